//! `subset check` and `subset reconcile`: the engine's per-parent check and reconcile over the
//! whole parent collection, with progress, `--skip-invalid`, and a look at the child index.

use futures::TryStreamExt;
use mongodb::Database;
use serde_json::{json, Value};
use subset_runtime::bson::{doc, Bson, Document};
use subset_runtime::repair::{Drift, Orphans, ParentFailure, SweepOptions, SweepReport};
use subset_runtime::{spec::SubsetSpec, Error};

use crate::args::SubsetArgs;
use crate::error::{is_connection, CliError, Invalid};
use crate::model::Model;
use crate::output::{
    failures_json, headline, id_json, invalid_json, keys_text, orphans_json, orphans_text,
    push_invalid, push_listed, spec_json, value_json, Outcome,
};
use crate::{progress, scan};

/// Parents checked at once.
const CONCURRENCY: usize = 4;

/// How many drifted parents the text form lists.
const LISTED: usize = 20;

/// Read-only, or fixing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Report drift.
    Check,
    /// Fix drift.
    Reconcile,
}

/// What a pass found: the engine's report, and the parents passed over as invalid
/// (`--skip-invalid`), which the report counts among its failures.
struct Swept {
    report: SweepReport,
    skipped: Vec<Invalid>,
}

/// Runs `subset check` or `subset reconcile` on every view of `model`.
pub async fn run(
    db: &Database,
    model: Model,
    args: &SubsetArgs,
    mode: Mode,
) -> Result<Outcome, CliError> {
    let json = args.conn.json;
    let parent = model.parent();
    scan::require_collection(db, parent).await?;
    let store = model.store(db, &args.conn)?;
    let mut indexes = Vec::new();
    for spec in model.spec.subsets {
        let subset = store.children(spec);
        let mut index = subset.has_index().await?;
        let created = mode == Mode::Reconcile && !index;
        if created {
            subset.ensure_index().await?;
            index = true;
        }
        let state = match (index, created) {
            (_, true) => "created",
            (true, false) => "present",
            (false, false) => "MISSING (reconcile or migrate creates it)",
        };
        let line = format!(
            "index {} on `{}`: {state}",
            keys_text(&subset.index_keys()),
            spec.child_collection
        );
        indexes.push(Index {
            line,
            present: index,
            created,
        });
    }

    let total = db
        .collection::<Document>(parent)
        .estimated_document_count()
        .await
        .map_err(|e| CliError::mongo(parent, e))?;
    let label = match mode {
        Mode::Check => "checking",
        Mode::Reconcile => "reconciling",
    };
    let bar = progress::bar(total, label, json);
    let options = SweepOptions::default()
        .batch_size(args.batch)
        .concurrency(CONCURRENCY);
    let mut skipped = Vec::new();
    let swept = store
        .resync_all(
            &options,
            mode == Mode::Reconcile,
            // Reconcile takes the child collection as the truth: on a parent that was never
            // migrated it would drop every embedded child. Those are refused, a batch at a time;
            // without --skip-invalid, the first stops the pass before its batch is written.
            |ids| async move {
                if mode == Mode::Check {
                    return Ok(Vec::new());
                }
                let mut refused = Vec::new();
                for spec in model.spec.subsets {
                    refused.extend(unmigrated(db, spec, parent, &ids).await?);
                }
                if !refused.is_empty() && !args.skip_invalid {
                    return Err(refused.swap_remove(0).error);
                }
                Ok(refused)
            },
            |failure| stops(failure, args.skip_invalid, &mut skipped),
            |p| bar.set_position(p.checked),
        )
        .await;
    let swept = match swept {
        Ok(report) => Swept { report, skipped },
        Err(e) => {
            bar.abandon();
            // A reconcile that stops at an invalid parent says it left that parent alone, as
            // migrate does.
            return Err(match (mode, invalid(&e)) {
                (Mode::Reconcile, Some(invalid)) => CliError::Invalid {
                    collection: parent.to_owned(),
                    field: match &e {
                        Error::MalformedParent { field, .. } => field.clone(),
                        _ => String::new(),
                    },
                    action: "reconciled",
                    invalid: vec![invalid],
                    hint: "nothing was written to this parent",
                },
                _ => e.into(),
            });
        }
    };
    bar.finish_and_clear();
    // Children of no parent are in no subset, so no parent's check finds them; views of one
    // child collection and key share them.
    let mut orphans = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for spec in model.spec.subsets {
        if seen.contains(&(spec.child_collection, spec.key)) {
            continue;
        }
        seen.push((spec.child_collection, spec.key));
        orphans.push((spec, store.children(spec).orphans().await?));
    }
    Ok(report(model, mode, &swept, &indexes, &orphans))
}

/// The child index of one view, as found (and made, by a reconcile).
struct Index {
    line: String,
    present: bool,
    created: bool,
}

/// A parent whose document cannot be worked on, as `--skip-invalid` passes it over.
fn invalid(error: &Error) -> Option<Invalid> {
    match error {
        Error::MalformedParent {
            id, field, problem, ..
        } => Some(Invalid {
            id: Bson::clone(id),
            problem: format!("`{field}` {problem}"),
        }),
        _ => None,
    }
}

/// Whether a failed parent stops the pass. A parent that fails for reasons of its own (a subset
/// too large for one document, a write the server refused) is recorded and the pass goes on; an
/// invalid one stops it unless `--skip-invalid`, and so does a lost connection.
fn stops(failure: &ParentFailure, skip_invalid: bool, skipped: &mut Vec<Invalid>) -> bool {
    match invalid(&failure.error) {
        Some(invalid) if skip_invalid => {
            skipped.push(invalid);
            false
        }
        Some(_) => true,
        None => failure.error.mongo_error().is_some_and(is_connection),
    }
}

/// The report of a pass. Exit code 1 when anything is left to do: drift (`check`), drift that
/// could not be fixed, a missing index (`check`), parents skipped or failed.
fn report(
    model: Model,
    mode: Mode,
    swept: &Swept,
    indexes: &[Index],
    orphans: &[(&SubsetSpec, Orphans)],
) -> Outcome {
    let parent = model.parent();
    let index = indexes.iter().all(|i| i.present);
    let index_created = indexes.iter().any(|i| i.created);
    // With several views, each drift line names its field.
    let many = model.spec.subsets.len() > 1;
    let Swept { report, skipped } = swept;
    let p = &report.progress;
    // The report counts every parent it looked at, and the skipped ones among the failed.
    let checked = p.checked - p.failed;
    let failed = p.failed - skipped.len() as u64;
    // Drifted parents a reconcile could not rewrite because they kept changing.
    let unfixed = match mode {
        Mode::Check => 0,
        Mode::Reconcile => p.drifted - p.fixed,
    };
    let failures: Vec<Invalid> = report
        .failures
        .iter()
        .filter(|f| invalid(&f.error).is_none())
        .map(Invalid::failed)
        .collect();
    let problems = unfixed > 0
        || failed > 0
        || !skipped.is_empty()
        || p.malformed > 0
        || (mode == Mode::Check && (p.drifted > 0 || !index));
    let command = match mode {
        Mode::Check => "check",
        Mode::Reconcile => "reconcile",
    };
    let source = if model.registered {
        "the application's registered model"
    } else {
        "the view the flags describe"
    };
    let mut text = format!("{command} `{parent}`, {source}:\n");
    for spec in model.spec.subsets {
        text.push_str(&format!("  {}", headline(spec, parent)));
    }
    text.push_str(&format!(
        "  parents checked: {checked}; drifted: {}",
        p.drifted
    ));
    if mode == Mode::Reconcile {
        text.push_str(&format!("; fixed: {}", p.fixed));
        if unfixed > 0 {
            text.push_str(&format!(
                "; not fixed (changing under concurrent writes, run again): {unfixed}"
            ));
        }
    }
    if failed > 0 {
        text.push_str(&format!("; failed: {failed}"));
    }
    if p.malformed > 0 {
        text.push_str(&format!(
            "; malformed children (in no subset): {}",
            p.malformed
        ));
    }
    if p.queued > 0 {
        text.push_str(&format!(
            "; children of pushes queued for a fold whose callers went away: {}",
            p.queued
        ));
    }
    if p.outdated > 0 {
        text.push_str(&format!(
            "; built under another definition (rebuild them with `subset rebuild`, or the application's `Store::rebuild`): {}",
            p.outdated
        ));
    }
    text.push('\n');
    for i in indexes {
        text.push_str(&format!("  {}\n", i.line));
    }
    for (field, drift) in report.drifts.iter().take(LISTED) {
        let field = if many {
            format!(" `{field}`")
        } else {
            String::new()
        };
        text.push_str(&format!("  {}{field}: {}\n", drift.parent, describe(drift)));
    }
    if report.drifts.len() > LISTED {
        text.push_str(&format!(
            "  … and {} more drifted parents (--json lists up to {})\n",
            p.drifted - LISTED as u64,
            SweepReport::SAMPLES
        ));
    }
    push_invalid(&mut text, skipped, "skipped as invalid (--skip-invalid)");
    let what = match mode {
        Mode::Check => "could not be checked (the pass went on past them)",
        Mode::Reconcile => "could not be reconciled (the pass went on past them)",
    };
    push_listed(&mut text, &failures, failed, LISTED, what);
    for (spec, orphans) in orphans {
        text.push_str(&orphans_text(orphans, spec.child_collection));
    }
    if p.drifted == 0 && p.malformed == 0 && skipped.is_empty() && failed == 0 {
        text.push_str("  no drift\n");
    }
    Outcome {
        json: json!({
            "command": command,
            "registered": model.registered,
            "views": model.spec.subsets.iter().map(|s| spec_json(s, parent)).collect::<Vec<_>>(),
            "checked": checked,
            "drifted": p.drifted,
            "fixed": p.fixed,
            "unfixed": unfixed,
            "malformed": p.malformed,
            "outdated": p.outdated,
            "queued": p.queued,
            "index": { "present": index, "created": index_created },
            "drifts": report.drifts.iter().map(|(field, drift)| drift_json(field, drift)).collect::<Vec<_>>(),
            "skipped": invalid_json(skipped),
            "failed": failed,
            "failures": failures_json(&failures),
            "orphans": orphans_per_child(orphans),
        }),
        text,
        problems,
    }
}

/// Which of `ids` look never migrated: without a marker (a parent the library wrote carries
/// one), and more than `keep` elements embedded (a subset never holds that many), or some
/// embedded and none in the child collection. A marked parent may hold a view built under
/// another model, or one whose last child code of another model removed (leaving the view as
/// it was): the engine's reconcile judges those, as its rebuild does.
async fn unmigrated(
    db: &Database,
    spec: &SubsetSpec,
    parent: &str,
    ids: &[Bson],
) -> subset_runtime::Result<Vec<ParentFailure>> {
    let mongo = |collection: &str| {
        let collection = collection.to_owned();
        move |source| Error::Mongo {
            collection,
            source: Box::new(source),
        }
    };
    let find = |filter: Document| async move {
        let found: Vec<Document> = db
            .collection::<Document>(parent)
            .find(filter)
            .projection(doc! { "_id": 1 })
            .await
            .map_err(mongo(parent))?
            .try_collect()
            .await
            .map_err(mongo(parent))?;
        Ok::<_, Error>(found.into_iter().filter_map(|mut d| d.remove("_id")))
    };
    let marker = subset_runtime::bookkeeping::Names::default().marker();
    let overfull = find(doc! {
        "_id": { "$in": ids },
        marker: { "$exists": false },
        format!("{}.{}", spec.field, spec.keep): { "$exists": true },
    })
    .await?
    .map(|id| (id, "holds more than `keep` elements"));
    let with_children = db
        .collection::<Document>(spec.child_collection)
        .distinct(spec.key, doc! { spec.key: { "$in": ids } })
        .await
        .map_err(mongo(spec.child_collection))?;
    let orphaned = find(doc! {
        "_id": { "$in": ids, "$nin": with_children },
        marker: { "$exists": false },
        format!("{}.0", spec.field): { "$exists": true },
    })
    .await?
    .map(|id| (id, "has embedded elements and none in the child collection"));
    Ok(overfull
        .chain(orphaned)
        .map(|(id, why)| {
            let error = Error::MalformedParent {
                collection: parent.to_owned(),
                id: Box::new(id.clone()),
                field: spec.field.to_owned(),
                problem: format!(
                    "{why}: it was never migrated, and reconciling would drop the elements missing from `{}`; run `subset migrate` with the same flags",
                    spec.child_collection
                ),
            };
            ParentFailure::new(id, spec.field, error)
        })
        .collect())
}

/// One line about a drifted parent.
fn describe(drift: &Drift) -> String {
    let mut parts = Vec::new();
    if drift.outdated {
        parts.push("built under another definition of the field".to_owned());
    }
    if !drift.missing.is_empty() {
        parts.push(format!("{} missing", drift.missing.len()));
    }
    if !drift.stale.is_empty() {
        parts.push(format!("{} stale", drift.stale.len()));
    }
    if !drift.changed.is_empty() {
        parts.push(format!("{} changed", drift.changed.len()));
    }
    if drift.misordered {
        parts.push("misordered".to_owned());
    }
    if let Some((stored, actual)) = drift.count {
        parts.push(format!("count {stored}, children {actual}"));
    }
    for sum in &drift.sums {
        parts.push(format!(
            "sum `{}` {}, children {}",
            sum.field, sum.stored, sum.computed
        ));
    }
    if !drift.malformed_in_head.is_empty() {
        parts.push(format!(
            "{} malformed among the first `keep` (a first page fails at them)",
            drift.malformed_in_head.len()
        ));
    }
    if drift.malformed_note {
        parts.push("note of malformed children out of date".to_owned());
    }
    if !drift.queued.is_empty() {
        parts.push(format!("{} queued for a fold", drift.queued.len()));
    }
    if drift.fixed {
        parts.push("fixed".to_owned());
    }
    // Each malformed child on a line of its own: the data to fix, which no reconcile can.
    for m in &drift.malformed {
        parts.push(format!(
            "\n    malformed child {}: `{}` {} (left out of the subset; fix it in the child collection)",
            m.child, m.field, m.problem
        ));
    }
    parts.join(", ")
}

/// The children of no parent, one entry per child collection (`{"child", "total", …}`): one
/// shape whether the model has one child collection or several.
fn orphans_per_child(orphans: &[(&SubsetSpec, Orphans)]) -> Value {
    orphans
        .iter()
        .map(|(spec, o)| {
            let mut entry = orphans_json(o);
            entry["child"] = spec.child_collection.into();
            entry
        })
        .collect()
}

fn drift_json(field: &str, drift: &Drift) -> Value {
    let ids = |ids: &[Bson]| ids.iter().map(id_json).collect::<Vec<_>>();
    json!({
        "_id": id_json(&drift.parent),
        "field": field,
        "missing": ids(&drift.missing),
        "stale": ids(&drift.stale),
        "changed": ids(&drift.changed),
        "misordered": drift.misordered,
        "outdated": drift.outdated,
        "count": drift.count.map(|(stored, actual)| json!({ "stored": stored, "children": actual })),
        "sums": drift.sums.iter().map(|s| json!({
            "field": s.field,
            "stored": value_json(&s.stored),
            "computed": value_json(&s.computed),
        })).collect::<Vec<_>>(),
        "malformed_in_head": ids(&drift.malformed_in_head),
        "malformed_note": drift.malformed_note,
        "queued": ids(&drift.queued),
        "fixed": drift.fixed,
        "malformed": drift.malformed.iter().map(|m| json!({
            "_id": id_json(&m.child),
            "field": m.field,
            "problem": m.problem,
        })).collect::<Vec<_>>(),
    })
}
