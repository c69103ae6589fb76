//! `subset check` and `subset reconcile`: the engine's per-parent check and reconcile over the
//! whole parent collection, with progress, `--skip-invalid`, and a look at the child index.

use bson::{doc, Bson, Document};
use futures::{StreamExt, TryStreamExt};
use mongodb::Database;
use serde_json::{json, Value};
use subset_runtime::{Drift, Error, ParentSpec, RawStore, SubsetSpec};

use crate::args::SubsetArgs;
use crate::error::{CliError, Invalid};
use crate::output::{headline, id_json, invalid_json, keys_text, push_invalid, spec_json, Outcome};
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
    let (mut checked, mut drifted, mut fixed, mut unfixed) = (0_u64, 0_u64, 0_u64, 0_u64);
    let mut drifts: Vec<Drift> = Vec::new();
    let mut skipped: Vec<Invalid> = Vec::new();
    let batches = store.parent_ids(args.batch);
    futures::pin_mut!(batches);
    while let Some(ids) = batches.try_next().await? {
        // Reconcile takes the child collection as the truth: on a parent that was never
        // migrated it would drop every embedded child. Those are refused.
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
            skipped.push(invalid);
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
            let drift = match result {
                Ok(drift) => drift,
                // Deleted between the `_id` scan and its check: nothing to compare.
                Err(Error::ParentNotFound { .. }) => continue,
                Err(Error::MalformedParent { field, problem, .. }) if args.skip_invalid => {
                    skipped.push(Invalid {
                        id,
                        problem: format!("`{field}` {problem}"),
                    });
                    continue;
                }
                Err(e) => {
                    bar.abandon();
                    return Err(e.into());
                }
            };
            checked += 1;
            if drift.is_clean() {
                continue;
            }
            drifted += 1;
            if drift.fixed {
                fixed += 1;
            } else if mode == Mode::Reconcile {
                unfixed += 1;
            }
            if drifts.len() < DETAILED {
                drifts.push(drift);
            }
        }
    }
    bar.finish_and_clear();

    let problems = match mode {
        Mode::Check => drifted > 0 || !index || !skipped.is_empty(),
        Mode::Reconcile => unfixed > 0,
    };
    let command = match mode {
        Mode::Check => "check",
        Mode::Reconcile => "reconcile",
    };
    let mut text = format!("{command} {}", headline(spec, &args.parent));
    text.push_str(&format!("  parents checked: {checked}; drifted: {drifted}"));
    if mode == Mode::Reconcile {
        text.push_str(&format!("; fixed: {fixed}"));
        if unfixed > 0 {
            text.push_str(&format!(
                "; not fixed (changing under concurrent writes, run again): {unfixed}"
            ));
        }
    }
    text.push('\n');
    let index_state = match (index, index_created) {
        (_, true) => "created",
        (true, false) => "present",
        (false, false) => "MISSING (reconcile or migrate creates it)",
    };
    text.push_str(&format!(
        "  index {} on `{}`: {index_state}\n",
        keys_text(&subset.index_keys()),
        spec.child_collection
    ));
    for drift in drifts.iter().take(LISTED) {
        text.push_str(&format!("  {}: {}\n", drift.parent, describe(drift)));
    }
    if drifts.len() > LISTED {
        text.push_str(&format!(
            "  … and {} more drifted parents (--json lists up to {DETAILED})\n",
            drifted - LISTED as u64
        ));
    }
    push_invalid(&mut text, &skipped, "skipped as invalid (--skip-invalid)");
    if drifted == 0 && skipped.is_empty() {
        text.push_str("  no drift\n");
    }
    Ok(Outcome {
        json: json!({
            "command": command,
            "subset": spec_json(spec, &args.parent),
            "checked": checked,
            "drifted": drifted,
            "fixed": fixed,
            "unfixed": unfixed,
            "index": { "present": index, "created": index_created },
            "drifts": drifts.iter().map(drift_json).collect::<Vec<_>>(),
            "skipped": invalid_json(&skipped),
        }),
        text,
        problems,
    })
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
        "fixed": drift.fixed,
    })
}
