//! `subset check` and `subset reconcile`: the engine's per-parent check and reconcile over the
//! whole parent collection, with progress, `--skip-invalid`, and a look at the child index.

use futures::{StreamExt, TryStreamExt};
use mongodb::Database;
use serde_json::{json, Value};
use subset_runtime::bson::{doc, Bson, Document};
use subset_runtime::{raw::RawStore, repair::Drift, spec::ParentSpec, spec::SubsetSpec, Error};

use crate::args::SubsetArgs;
use crate::error::{is_connection, reason, CliError, Invalid};
use crate::output::{
    headline, id_json, invalid_json, keys_text, push_invalid, push_listed, spec_json, value_json,
    Outcome,
};
use crate::{progress, scan};

/// Parents checked at once.
const CONCURRENCY: usize = 4;

/// How many drifted parents are kept in detail (the counts cover them all).
const DETAILED: usize = 1_000;

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

/// What a pass found, parent by parent.
#[derive(Debug, Default)]
struct Tally {
    checked: u64,
    drifted: u64,
    fixed: u64,
    /// Drifted parents a reconcile could not rewrite because they kept changing.
    unfixed: u64,
    /// The first [`DETAILED`] drifted parents.
    drifts: Vec<Drift>,
    /// Parents passed over as invalid (`--skip-invalid`).
    skipped: Vec<Invalid>,
    /// Parents that could not be checked or fixed.
    failed: u64,
    /// The first [`DETAILED`] of them, with the error.
    failures: Vec<Invalid>,
}

impl Tally {
    /// Counts one parent's result. A parent that fails for reasons of its own (a subset too
    /// large for one document, a write the server refused) is recorded and the pass goes on; an
    /// invalid one stops it unless `--skip-invalid`, and so does a lost connection.
    fn record(
        &mut self,
        id: Bson,
        result: subset_runtime::Result<Drift>,
        mode: Mode,
        skip_invalid: bool,
    ) -> Result<(), CliError> {
        let drift = match result {
            Ok(drift) => drift,
            // Deleted between the `_id` scan and its check: nothing to compare.
            Err(Error::ParentNotFound { .. }) => return Ok(()),
            Err(Error::MalformedParent { field, problem, .. }) if skip_invalid => {
                self.skipped.push(Invalid {
                    id,
                    problem: format!("`{field}` {problem}"),
                });
                return Ok(());
            }
            Err(e @ Error::MalformedParent { .. }) => return Err(e.into()),
            Err(e) if e.mongo_error().is_some_and(is_connection) => return Err(e.into()),
            Err(e) => {
                self.failed += 1;
                if self.failures.len() < DETAILED {
                    self.failures.push(Invalid {
                        id,
                        problem: reason(&e),
                    });
                }
                return Ok(());
            }
        };
        self.checked += 1;
        if drift.is_clean() {
            return Ok(());
        }
        self.drifted += 1;
        if drift.fixed {
            self.fixed += 1;
        } else if mode == Mode::Reconcile {
            self.unfixed += 1;
        }
        if self.drifts.len() < DETAILED {
            self.drifts.push(drift);
        }
        Ok(())
    }
}

/// Runs `subset check` or `subset reconcile`.
pub async fn run(
    db: &Database,
    spec: &'static SubsetSpec,
    args: &SubsetArgs,
    mode: Mode,
) -> Result<Outcome, CliError> {
    let json = args.conn.json;
    scan::require_collection(db, &args.parent).await?;
    let store = RawStore::new(db, ParentSpec::leak(args.parent.clone(), vec![*spec]));
    let subset = store.subset(spec);
    let mut index = subset.has_index().await?;
    let index_created = mode == Mode::Reconcile && !index;
    if index_created {
        subset.ensure_index().await?;
        index = true;
    }

    let total = db
        .collection::<Document>(&args.parent)
        .estimated_document_count()
        .await
        .map_err(|e| CliError::mongo(&args.parent, e))?;
    let label = match mode {
        Mode::Check => "checking",
        Mode::Reconcile => "reconciling",
    };
    let bar = progress::bar(total, label, json);
    let mut tally = Tally::default();
    let batches = store.parent_ids(args.batch);
    futures::pin_mut!(batches);
    while let Some(ids) = batches.try_next().await? {
        // Reconcile takes the child collection as the truth: on a parent that was never
        // migrated it would drop every embedded child. Those are refused, a batch at a time.
        let refused = match mode {
            Mode::Reconcile => unmigrated(db, spec, &args.parent, &ids).await?,
            Mode::Check => Vec::new(),
        };
        let ids: Vec<Bson> = ids
            .into_iter()
            .filter(|id| !refused.iter().any(|(r, _)| r == id))
            .collect();
        for (id, why) in refused {
            bar.inc(1);
            let invalid = Invalid {
                id,
                problem: format!(
                    "`{}` {why}: it was never migrated, and reconciling would drop the elements missing from `{}`; run `subset migrate` with the same flags",
                    spec.field, spec.child_collection
                ),
            };
            if !args.skip_invalid {
                bar.abandon();
                return Err(CliError::Invalid {
                    collection: args.parent.clone(),
                    field: spec.field.to_owned(),
                    action: "reconciled",
                    invalid: vec![invalid],
                    hint: "nothing was written to this parent",
                });
            }
            tally.skipped.push(invalid);
        }
        let mut results = futures::stream::iter(ids.into_iter().map(|id| async move {
            let result = match mode {
                Mode::Check => subset.check(&id).await,
                Mode::Reconcile => subset.reconcile(&id).await,
            };
            (id, result)
        }))
        .buffered(CONCURRENCY);
        while let Some((id, result)) = results.next().await {
            bar.inc(1);
            if let Err(e) = tally.record(id, result, mode, args.skip_invalid) {
                bar.abandon();
                return Err(e);
            }
        }
    }
    bar.finish_and_clear();
    let index_state = match (index, index_created) {
        (_, true) => "created",
        (true, false) => "present",
        (false, false) => "MISSING (reconcile or migrate creates it)",
    };
    let index_line = format!(
        "index {} on `{}`: {index_state}",
        keys_text(&subset.index_keys()),
        spec.child_collection
    );
    Ok(report(
        spec,
        &args.parent,
        mode,
        &tally,
        index_line,
        index,
        index_created,
    ))
}

/// The report of a pass. Exit code 1 when anything is left to do: drift (`check`), drift that
/// could not be fixed, a missing index (`check`), parents skipped or failed.
fn report(
    spec: &SubsetSpec,
    parent: &str,
    mode: Mode,
    t: &Tally,
    index_line: String,
    index: bool,
    index_created: bool,
) -> Outcome {
    let problems = t.unfixed > 0
        || t.failed > 0
        || !t.skipped.is_empty()
        || (mode == Mode::Check && (t.drifted > 0 || !index));
    let command = match mode {
        Mode::Check => "check",
        Mode::Reconcile => "reconcile",
    };
    let mut text = format!("{command} {}", headline(spec, parent));
    text.push_str(&format!(
        "  parents checked: {}; drifted: {}",
        t.checked, t.drifted
    ));
    if mode == Mode::Reconcile {
        text.push_str(&format!("; fixed: {}", t.fixed));
        if t.unfixed > 0 {
            text.push_str(&format!(
                "; not fixed (changing under concurrent writes, run again): {}",
                t.unfixed
            ));
        }
    }
    if t.failed > 0 {
        text.push_str(&format!("; failed: {}", t.failed));
    }
    text.push('\n');
    text.push_str(&format!("  {index_line}\n"));
    for drift in t.drifts.iter().take(LISTED) {
        text.push_str(&format!("  {}: {}\n", drift.parent, describe(drift)));
    }
    if t.drifts.len() > LISTED {
        text.push_str(&format!(
            "  … and {} more drifted parents (--json lists up to {DETAILED})\n",
            t.drifted - LISTED as u64
        ));
    }
    push_invalid(&mut text, &t.skipped, "skipped as invalid (--skip-invalid)");
    let failed = match mode {
        Mode::Check => "could not be checked (the pass went on past them)",
        Mode::Reconcile => "could not be reconciled (the pass went on past them)",
    };
    push_listed(&mut text, &t.failures, t.failed, LISTED, failed);
    if t.drifted == 0 && t.skipped.is_empty() && t.failed == 0 {
        text.push_str("  no drift\n");
    }
    Outcome {
        json: json!({
            "command": command,
            "subset": spec_json(spec, parent),
            "checked": t.checked,
            "drifted": t.drifted,
            "fixed": t.fixed,
            "unfixed": t.unfixed,
            "index": { "present": index, "created": index_created },
            "drifts": t.drifts.iter().map(drift_json).collect::<Vec<_>>(),
            "skipped": invalid_json(&t.skipped),
            "failed": t.failed,
            "failures": t.failures.iter().map(|f| json!({ "_id": id_json(&f.id), "error": f.problem })).collect::<Vec<_>>(),
        }),
        text,
        problems,
    }
}

/// Which of `ids` look never migrated: more than `keep` elements embedded (a subset never
/// holds that many), or some embedded and none in the child collection.
async fn unmigrated(
    db: &Database,
    spec: &SubsetSpec,
    parent: &str,
    ids: &[Bson],
) -> Result<Vec<(Bson, &'static str)>, CliError> {
    let find = |filter: Document| async move {
        let found: Vec<Document> = db
            .collection::<Document>(parent)
            .find(filter)
            .projection(doc! { "_id": 1 })
            .await
            .map_err(|e| CliError::mongo(parent, e))?
            .try_collect()
            .await
            .map_err(|e| CliError::mongo(parent, e))?;
        Ok::<_, CliError>(found.into_iter().filter_map(|mut d| d.remove("_id")))
    };
    let overfull = find(doc! {
        "_id": { "$in": ids },
        format!("{}.{}", spec.field, spec.keep): { "$exists": true },
    })
    .await?
    .map(|id| (id, "holds more than `keep` elements"));
    let with_children = db
        .collection::<Document>(spec.child_collection)
        .distinct(spec.key, doc! { spec.key: { "$in": ids } })
        .await
        .map_err(|e| CliError::mongo(spec.child_collection, e))?;
    let orphaned = find(doc! {
        "_id": { "$in": ids, "$nin": with_children },
        format!("{}.0", spec.field): { "$exists": true },
    })
    .await?
    .map(|id| (id, "has embedded elements and none in the child collection"));
    Ok(overfull.chain(orphaned).collect())
}

/// One line about a drifted parent.
fn describe(drift: &Drift) -> String {
    let mut parts = Vec::new();
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
    if drift.fixed {
        parts.push("fixed".to_owned());
    }
    parts.join(", ")
}

fn drift_json(drift: &Drift) -> Value {
    let ids = |ids: &[Bson]| ids.iter().map(id_json).collect::<Vec<_>>();
    json!({
        "_id": id_json(&drift.parent),
        "missing": ids(&drift.missing),
        "stale": ids(&drift.stale),
        "changed": ids(&drift.changed),
        "misordered": drift.misordered,
        "count": drift.count.map(|(stored, actual)| json!({ "stored": stored, "children": actual })),
        "sums": drift.sums.iter().map(|s| json!({
            "field": s.field,
            "stored": value_json(&s.stored),
            "computed": value_json(&s.computed),
        })).collect::<Vec<_>>(),
        "fixed": drift.fixed,
    })
}
