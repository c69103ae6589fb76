//! `subset rebuild`: the application's `Store::rebuild`, on its registered model, with
//! progress; then which definitions the registry still keeps whole.

use mongodb::Database;
use serde_json::json;
use subset_runtime::bson::Document;
use subset_runtime::repair::SweepOptions;

use crate::args::RebuildArgs;
use crate::error::{CliError, Invalid};
use crate::model::{self, Model};
use crate::output::{failures_json, headline, push_listed, Outcome};
use crate::{progress, scan};

/// How many failed parents the text form lists.
const LISTED: usize = 20;

/// Runs `subset rebuild`.
pub async fn run(db: &Database, model: Model, args: &RebuildArgs) -> Result<Outcome, CliError> {
    let a = &args.subset;
    let parent = model.parent();
    scan::require_collection(db, parent).await?;
    let store = model.store(db, &a.conn)?;
    let total = db
        .collection::<Document>(parent)
        .estimated_document_count()
        .await
        .map_err(|e| CliError::mongo(parent, e))?;
    let bar = progress::bar(total, "rebuilding", a.conn.json);
    let options = SweepOptions::default()
        .batch_size(a.batch)
        .allow_emptying(args.allow_emptying);
    let report = match store
        .rebuild(&options, |p| bar.set_position(p.checked))
        .await
    {
        Ok(report) => report,
        Err(e) => {
            bar.abandon();
            return Err(e.into());
        }
    };
    bar.finish_and_clear();
    let p = &report.progress;
    let failures: Vec<Invalid> = report.failures.iter().map(Invalid::failed).collect();
    let registered = model::registered(db, &a.conn, parent).await?;
    let definitions: Vec<(String, bool, bool)> = registered
        .iter()
        .flat_map(|r| {
            r.definitions
                .iter()
                .map(|d| (d.digest.clone(), d.digest == r.current, d.model.is_some()))
        })
        .collect();
    let mut text = format!("rebuild `{parent}`, the application's registered model:\n");
    for spec in model.spec.subsets {
        text.push_str(&format!("  {}", headline(spec, parent)));
    }
    text.push_str(&format!("  parents rebuilt: {}", p.fixed));
    if p.failed > 0 {
        text.push_str(&format!("; failed: {}", p.failed));
    }
    text.push_str(&format!(" ({:.1} s)\n", p.elapsed.as_secs_f64()));
    push_listed(
        &mut text,
        &failures,
        p.failed,
        LISTED,
        "not rebuilt (run the same command again to retry them)",
    );
    let kept = definitions.iter().filter(|(_, _, whole)| *whole).count();
    text.push_str(&format!(
        "  definitions kept whole: {kept} of {} registered (the others no parent is built under)\n",
        definitions.len()
    ));
    Ok(Outcome {
        json: json!({
            "command": "rebuild",
            "parent": parent,
            "rebuilt": p.fixed,
            "failed": p.failed,
            "failures": failures_json(&failures),
            "definitions": definitions.iter().map(|(digest, current, whole)| json!({
                "digest": digest, "current": current, "whole": whole,
            })).collect::<Vec<_>>(),
            "elapsed_ms": u64::try_from(p.elapsed.as_millis()).unwrap_or(u64::MAX),
        }),
        text,
        problems: p.failed > 0,
    })
}
