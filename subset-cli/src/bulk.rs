//! `subset remove --where` and `subset patch --where`: the engine's jobs by filter
//! (`raw::Children::remove_where`, `raw::Children::patch_where`) over one subset described by flags, with
//! a dry run (`raw::Children::count_where`), a progress bar, and the parents that failed listed.
//!
//! Both are resumable in the engine: each parent is changed whole in a transaction, or on a
//! standalone server between the entries of a journal (in `subset_jobs`) that a rerun of the
//! same job finishes first. So the command keeps no state of its own: after an interruption,
//! the same command line goes on where the last run stopped.

use mongodb::error::ErrorKind;
use mongodb::Database;
use serde_json::{json, Map, Value};
use subset_runtime::bson::{Bson, Document};
use subset_runtime::bulk::{BulkProgress, BulkReport};
use subset_runtime::raw::ChildPatch;
use subset_runtime::repair::SweepOptions;
use subset_runtime::spec::SubsetSpec;
use subset_runtime::Error;

use crate::args::{Job, SubsetArgs, WhereArgs};
use crate::error::{reason, CliError, Invalid};
use crate::model::Model;
use crate::output::{failures_json, headline, push_listed, spec_json, value_json, Outcome};
use crate::{progress, scan};

/// How many failed parents the text form lists.
const LISTED: usize = 20;

/// What each job does and says, for the engine and the reports.
impl Job {
    fn command(&self) -> &'static str {
        match self {
            Job::Remove => "remove",
            Job::Patch { .. } => "patch",
        }
    }

    /// The progress bar's label.
    fn doing(&self) -> &'static str {
        match self {
            Job::Remove => "removing",
            Job::Patch { .. } => "patching",
        }
    }

    /// What the job did to each child, in its report.
    fn done(&self) -> &'static str {
        match self {
            Job::Remove => "removed",
            Job::Patch { .. } => "patched",
        }
    }

    /// The change as the engine takes it.
    fn patch(&self) -> Option<ChildPatch> {
        let Job::Patch { set, unset } = self else {
            return None;
        };
        let patch = set.iter().fold(ChildPatch::new(), |p, (field, value)| {
            p.set(field, value.clone())
        });
        Some(unset.iter().fold(patch, |p, field| p.unset(field)))
    }

    /// The change for the text form: `; set user = "anonymous"; unset email`.
    fn text(&self) -> String {
        let Job::Patch { set, unset } = self else {
            return String::new();
        };
        let mut text = String::new();
        for (field, value) in set {
            text.push_str(&format!("; set {field} = {}", value_json(value)));
        }
        for field in unset {
            text.push_str(&format!("; unset {field}"));
        }
        text
    }

    /// The change for `--json`: `{"set": {…}, "unset": […]}`, or null for a removal.
    fn json(&self) -> Value {
        let Job::Patch { set, unset } = self else {
            return Value::Null;
        };
        let set: Map<String, Value> = set
            .iter()
            .map(|(field, value)| (field.clone(), value_json(value)))
            .collect();
        json!({ "set": set, "unset": unset })
    }
}

/// Runs `subset remove` or `subset patch` on every child collection of `model`: each job
/// brings along every view of its child collection.
pub async fn run(
    db: &Database,
    model: Model,
    subset: &SubsetArgs,
    args: &WhereArgs,
    filter: Document,
    job: Job,
) -> Result<Outcome, CliError> {
    let json = subset.conn.json;
    scan::require_collection(db, model.parent()).await?;
    let store = model.store(db, &subset.conn)?;
    // One job per child collection and key, on the first view of it.
    let mut jobs: Vec<&'static SubsetSpec> = Vec::new();
    for spec in model.spec.subsets {
        if !jobs
            .iter()
            .any(|j| (j.child_collection, j.key) == (spec.child_collection, spec.key))
        {
            jobs.push(spec);
        }
    }
    let patch = job.patch();
    let mut matching = BulkProgress::default();
    for spec in &jobs {
        // A misspelt `--child` would otherwise match nothing and look like a success.
        scan::require_collection(db, spec.child_collection).await?;
        let handle = store.children(spec);
        if let Some(patch) = &patch {
            // Refused before anything is written or counted.
            handle.check_patch(patch)?;
        }
        let found = handle.count_where(&filter).await.map_err(filter_refused)?;
        matching.children += found.children;
        matching.parents += found.parents;
    }
    let about = About {
        model,
        filter: &filter,
        job: &job,
    };
    if args.dry_run {
        return Ok(about.dry_run(&matching));
    }
    let bar = progress::bar(matching.parents, job.doing(), json);
    let options = SweepOptions::default()
        .batch_size(subset.batch)
        .concurrency(usize::try_from(args.concurrency).unwrap_or(usize::MAX));
    let mut done = BulkReport::default();
    let mut before = 0;
    for spec in &jobs {
        let handle = store.children(spec);
        // Each parent's views are recomputed from its top children: without the index, a scan
        // of the child collection each time.
        if !handle.has_index().await? {
            handle.ensure_index().await?;
        }
        let shown = |p: &BulkProgress| bar.set_position(before + p.parents + p.failed);
        let one = match &patch {
            None => handle.remove_where(&filter, &options, shown).await,
            Some(patch) => handle.patch_where(&filter, patch, &options, shown).await,
        };
        let one = match one {
            Ok(one) => one,
            Err(e) => {
                bar.abandon();
                return Err(e.into());
            }
        };
        let p = &mut done.progress;
        p.children += one.progress.children;
        p.parents += one.progress.parents;
        p.failed += one.progress.failed;
        p.elapsed += one.progress.elapsed;
        before = p.parents + p.failed;
        done.failures.extend(one.failures);
    }
    bar.finish_and_clear();
    Ok(about.report(&done))
}

/// A filter the server cannot run is a usage error that names `--where`.
fn filter_refused(e: Error) -> CliError {
    match e.mongo_error().map(|m| m.kind.as_ref()) {
        Some(ErrorKind::Command(_)) => CliError::Usage(format!(
            "--where: the server refused the filter: {}",
            reason(&e)
        )),
        _ => e.into(),
    }
}

/// What a report names: the subset, the filter, the change.
struct About<'a> {
    model: Model,
    filter: &'a Document,
    job: &'a Job,
}

impl About<'_> {
    /// The filter as relaxed extended JSON, as `--where` takes it.
    fn filter(&self) -> Value {
        value_json(&Bson::Document(self.filter.clone()))
    }

    /// The views, for `--json`.
    fn views(&self) -> Value {
        let parent = self.model.parent();
        self.model
            .spec
            .subsets
            .iter()
            .map(|s| spec_json(s, parent))
            .collect()
    }

    /// The lines every report begins with.
    fn head(&self, prefix: &str) -> String {
        let parent = self.model.parent();
        let mut text = format!("{prefix}{} `{parent}`:\n", self.job.command());
        for spec in self.model.spec.subsets {
            text.push_str(&format!("  {}", headline(spec, parent)));
        }
        text.push_str(&format!("  where {}{}\n", self.filter(), self.job.text()));
        text
    }

    /// What `count_where` found. Exit code 0.
    fn dry_run(&self, matching: &BulkProgress) -> Outcome {
        let mut text = self.head("dry run, nothing changed: ");
        text.push_str(&format!(
            "  children matching: {}, under {} parent(s)\n",
            matching.children, matching.parents
        ));
        Outcome {
            json: json!({
                "command": self.job.command(),
                "dry_run": true,
                "registered": self.model.registered,
                "views": self.views(),
                "where": self.filter(),
                "change": self.job.json(),
                "children_matching": matching.children,
                "parents_matching": matching.parents,
            }),
            text,
            problems: false,
        }
    }

    /// What the job did. Exit code 1 when a parent failed.
    fn report(&self, done: &BulkReport) -> Outcome {
        let p = &done.progress;
        let failures: Vec<Invalid> = done.failures.iter().map(Invalid::failed).collect();
        let done_to = self.job.done();
        let mut text = self.head("");
        text.push_str(&format!(
            "  children {done_to}: {}; parents touched: {}",
            p.children, p.parents
        ));
        if p.failed > 0 {
            text.push_str(&format!("; failed: {}", p.failed));
        }
        text.push_str(&format!(" ({:.1} s)\n", p.elapsed.as_secs_f64()));
        push_listed(
            &mut text,
            &failures,
            p.failed,
            LISTED,
            "failed (the job went on past them; run the same command again to retry them)",
        );
        let json = json!({
            "command": self.job.command(),
            "dry_run": false,
            "registered": self.model.registered,
            "views": self.views(),
            "where": self.filter(),
            "change": self.job.json(),
            format!("children_{done_to}"): p.children,
            "parents_touched": p.parents,
            "failed": p.failed,
            "failures": failures_json(&failures),
            "elapsed_ms": u64::try_from(p.elapsed.as_millis()).unwrap_or(u64::MAX),
        });
        Outcome {
            json,
            text,
            problems: p.failed > 0,
        }
    }
}
