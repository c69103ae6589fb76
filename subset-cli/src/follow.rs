//! `subset follow`: the engine's change-stream follower on every view of the model (the
//! registered one, or the flags' view), with a status line, `--json` lines, and a graceful stop
//! on Ctrl-C or SIGTERM.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use mongodb::Database;
use serde_json::{json, Value};
use subset_runtime::{
    follow::CatchUp, follow::FollowOptions, follow::FollowStats, follow::FollowUpdate,
    repair::SweepOptions,
};

use crate::args::FollowArgs;
use crate::error::CliError;
use crate::model::Model;
use crate::output::{headline, spec_json, Outcome};
use crate::{progress, scan};

/// Runs `subset follow` until a signal, then reports the totals.
pub async fn run(db: &Database, model: Model, args: &FollowArgs) -> Result<Outcome, CliError> {
    let subset = &args.subset;
    let json = subset.conn.json;
    let parent = model.parent();
    scan::require_collection(db, parent).await?;
    let store = model.store(db, &subset.conn)?;
    // Every reconcile reads the top `keep` of one parent: without the index, a scan each time.
    for spec in model.spec.subsets {
        let handle = store.children(spec);
        if !handle.has_index().await? {
            handle.ensure_index().await?;
        }
    }
    let name = args.name.clone().unwrap_or_else(|| default_name(model));
    let mut options = FollowOptions::new(&name)
        .window(Duration::from_millis(args.window_ms))
        .max_batch(usize::try_from(args.max_batch).unwrap_or(usize::MAX))
        .concurrency(usize::try_from(args.concurrency).unwrap_or(usize::MAX))
        .catch_up(args.catch_up)
        .enable_pre_images(!args.require_pre_images)
        .sweep(SweepOptions::default().batch_size(subset.batch));
    if let Some(tokens) = &args.token_collection {
        options = options.token_collection(tokens);
    }
    let status = progress::status(json);
    let printer = Printer {
        json,
        status: status.clone(),
        every: Duration::from_secs(args.status_every.max(1)),
        last: Mutex::new(Instant::now()),
    };
    let stats = store
        .follow(options)
        .on_update(move |update| printer.print(update))
        .until(shutdown())
        .await;
    status.finish_and_clear();
    Ok(report(model, &name, &stats?))
}

/// The follower's name without `--name`: `subset-cli:<PARENT>` on the registered model, and
/// `subset-cli:<PARENT>.<FIELD>` on the flags' view, so that the two never share a place.
fn default_name(model: Model) -> String {
    match (model.registered, model.spec.subsets) {
        (false, [spec]) => format!("subset-cli:{}.{}", model.parent(), spec.field),
        _ => format!("subset-cli:{}", model.parent()),
    }
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM; never, if neither can be listened for.
async fn shutdown() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            futures::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    () = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => interrupt.await,
        }
    }
    #[cfg(not(unix))]
    interrupt.await;
}

/// Prints the follower's updates: one JSON line each with `--json`; otherwise a line for each
/// start, catch-up and stop, and the totals on the status line (a terminal) or every `every`.
struct Printer {
    json: bool,
    status: ProgressBar,
    every: Duration,
    last: Mutex<Instant>,
}

impl Printer {
    fn print(&self, update: &FollowUpdate<'_>) {
        if self.json {
            println!("{}", update_json(update));
            return;
        }
        let line = match update {
            FollowUpdate::Started {
                collection,
                resumed: true,
            } => format!("following `{collection}` from its saved place"),
            FollowUpdate::Started { collection, .. } => {
                format!("following `{collection}` from now (no saved place)")
            }
            FollowUpdate::CatchingUp { collection, reason } => format!(
                "catching up on `{collection}`: {}; reconciling every parent",
                reason_text(*reason)
            ),
            FollowUpdate::CaughtUp { collection, report } => {
                let p = &report.progress;
                format!(
                    "caught up on `{collection}`: {} parents checked, {} drifted, {} fixed, {} failed",
                    p.checked, p.drifted, p.fixed, p.failed
                )
            }
            FollowUpdate::Stopped { collection } => {
                format!("stopped following `{collection}`; place saved")
            }
            FollowUpdate::Batch(batch) => {
                let line = status_text(batch.collection, &batch.totals);
                if !self.status.is_hidden() {
                    self.status.set_message(line);
                    return;
                }
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                if last.elapsed() < self.every {
                    return;
                }
                *last = Instant::now();
                line
            }
            _ => return,
        };
        self.status.suspend(|| println!("{line}"));
    }
}

/// The status line: `reviews: 1200 events, 310 reconciled (300 written, 10 in sync), lag 80 ms`,
/// with the children of no parent when there are any.
fn status_text(collection: &str, t: &FollowStats) -> String {
    let lag = t
        .last_lag
        .map(|l| format!(", lag {} ms", l.as_millis()))
        .unwrap_or_default();
    let mut orphans = String::new();
    if t.orphaned > 0 {
        orphans.push_str(&format!(", {} naming no parent", t.orphaned));
    }
    if t.keyless > 0 {
        orphans.push_str(&format!(", {} without a parent key", t.keyless));
    }
    if t.malformed > 0 {
        orphans.push_str(&format!(", {} malformed", t.malformed));
    }
    format!(
        "following `{collection}`: {} events, {} reconciled ({} written, {} in sync){orphans}{lag}",
        t.events, t.resynced, t.written, t.skipped
    )
}

fn reason_text(reason: CatchUp) -> &'static str {
    match reason {
        CatchUp::FirstStart => "first start with --catch-up",
        CatchUp::HistoryLost => {
            "the saved place can no longer be resumed (it fell off the oplog, or the server cannot find it)"
        }
        CatchUp::MissingImages => "changes without the pre-images that name their parents",
        CatchUp::Dropped => "the collection was dropped or renamed",
        _ => "the stream cannot be read",
    }
}

fn reason_key(reason: CatchUp) -> &'static str {
    match reason {
        CatchUp::FirstStart => "first_start",
        CatchUp::HistoryLost => "history_lost",
        CatchUp::MissingImages => "missing_images",
        CatchUp::Dropped => "dropped",
        _ => "other",
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn totals_json(t: &FollowStats) -> Value {
    json!({
        "events": t.events,
        "batches": t.batches,
        "resynced": t.resynced,
        "written": t.written,
        "skipped": t.skipped,
        "orphaned": t.orphaned,
        "keyless": t.keyless,
        "malformed": t.malformed,
        "failed": t.failed,
        "catch_ups": t.catch_ups,
        "last_lag_ms": t.last_lag.map(millis),
        "max_lag_ms": millis(t.max_lag),
    })
}

fn update_json(update: &FollowUpdate<'_>) -> Value {
    match update {
        FollowUpdate::Started {
            collection,
            resumed,
        } => json!({ "event": "started", "collection": collection, "resumed": resumed }),
        FollowUpdate::Batch(b) => json!({
            "event": "batch",
            "collection": b.collection,
            "events": b.events,
            "resynced": b.resynced,
            "written": b.written,
            "skipped": b.skipped,
            "orphaned": b.orphaned,
            "keyless": b.keyless,
            "malformed": b.malformed,
            "failed": b.failed,
            "lag_ms": b.lag.map(millis),
            "took_ms": millis(b.took),
            "totals": totals_json(&b.totals),
        }),
        FollowUpdate::CatchingUp { collection, reason } => json!({
            "event": "catching_up",
            "collection": collection,
            "reason": reason_key(*reason),
        }),
        FollowUpdate::CaughtUp { collection, report } => {
            let p = &report.progress;
            json!({
                "event": "caught_up",
                "collection": collection,
                "checked": p.checked,
                "drifted": p.drifted,
                "fixed": p.fixed,
                "failed": p.failed,
            })
        }
        FollowUpdate::Stopped { collection } => {
            json!({ "event": "stopped", "collection": collection })
        }
        _ => json!({ "event": "other" }),
    }
}

/// The totals after a stop. Exit code 1 when parents were passed over.
fn report(model: Model, name: &str, t: &FollowStats) -> Outcome {
    let parent = model.parent();
    let mut text = String::new();
    for spec in model.spec.subsets {
        text.push_str(&format!("follow {}", headline(spec, parent)));
    }
    text.push_str(&format!(
        "  follower `{name}`: {} events in {} batches; {} reconciled: {} written, {} already in sync",
        t.events, t.batches, t.resynced, t.written, t.skipped
    ));
    if t.orphaned > 0 {
        text.push_str(&format!("; {} naming no parent", t.orphaned));
    }
    if t.keyless > 0 {
        text.push_str(&format!("; {} children without a parent key", t.keyless));
    }
    if t.malformed > 0 {
        text.push_str(&format!(
            "; {} malformed children left out of their subsets (see `subset check`)",
            t.malformed
        ));
    }
    if t.failed > 0 {
        text.push_str(&format!("; {} passed over (see `subset check`)", t.failed));
    }
    if t.catch_ups > 0 {
        text.push_str(&format!("; {} full catch-ups", t.catch_ups));
    }
    text.push_str(&format!("; max lag {} ms\n", millis(t.max_lag)));
    Outcome {
        json: json!({
            "event": "summary",
            "command": "follow",
            "registered": model.registered,
            "views": model.spec.subsets.iter().map(|s| spec_json(s, parent)).collect::<Vec<_>>(),
            "name": name,
            "totals": totals_json(t),
        }),
        text,
        problems: t.failed > 0,
    }
}
