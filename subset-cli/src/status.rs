//! `subset status`: what the library keeps in the database (`bookkeeping::Status`), and the
//! followers saved in the collections given with `--token-collection`, as text or as its JSON
//! form.

use mongodb::Database;
use subset_runtime::bookkeeping::{FollowerPlace, Status};

use crate::args::StatusArgs;
use crate::error::CliError;
use crate::output::Outcome;
use crate::scan;

/// Runs `subset status`.
pub async fn run(db: &Database, args: &StatusArgs) -> Result<Outcome, CliError> {
    let names = crate::model::names(&args.conn)?;
    let mut status = Status::read(db, &names).await?;
    let mut read = vec![names.followers()];
    for tokens in &args.token_collection {
        if read.contains(&tokens.as_str()) {
            continue;
        }
        // A misspelt name would otherwise look like a collection with no follower.
        scan::require_collection(db, tokens).await.map_err(|_| {
            CliError::Usage(format!(
                "--token-collection: collection `{tokens}` does not exist in database `{}`",
                db.name()
            ))
        })?;
        status
            .followers
            .extend(FollowerPlace::read_from(db, tokens).await?);
        read.push(tokens);
    }
    let json = serde_json::to_value(&status)
        .map_err(|e| CliError::Usage(format!("the status cannot be written as JSON: {e}")))?;
    Ok(Outcome {
        json,
        text: text(&status),
        problems: false,
    })
}

fn text(status: &Status) -> String {
    let mut text = String::from("models:\n");
    if status.models.is_empty() {
        text.push_str("  none registered\n");
    }
    for model in &status.models {
        text.push_str(&format!("  {}\n", model.collection));
        for d in &model.definitions {
            let mut marks = Vec::new();
            if d.current {
                marks.push("current");
            }
            if d.legacy {
                marks.push("legacy");
            }
            let marks = if marks.is_empty() {
                String::new()
            } else {
                format!(" ({})", marks.join(", "))
            };
            let views = match &d.views {
                Some(views) => views
                    .iter()
                    .map(|v| format!("{} → {}", v.field, v.child))
                    .collect::<Vec<_>>()
                    .join(", "),
                None => "digest only".to_owned(),
            };
            text.push_str(&format!(
                "    {}{marks}: {} parent(s); {views}\n",
                d.digest, d.parents
            ));
        }
        if model.built_under_none > 0 {
            text.push_str(&format!(
                "    built under none (read from the child collections until rebuilt): {}\n",
                model.built_under_none
            ));
        }
        if model.built_under_unknown > 0 {
            text.push_str(&format!(
                "    built under a definition not registered: {}\n",
                model.built_under_unknown
            ));
        }
    }
    text.push_str("fold queues:");
    if status.folds.is_empty() {
        text.push_str(" none\n");
    } else {
        text.push('\n');
    }
    for f in &status.folds {
        text.push_str(&format!(
            "  {}: {} push(es) queued on {} parent(s), oldest {}\n",
            f.collection,
            f.queued,
            f.parents,
            f.oldest.as_deref().unwrap_or("?")
        ));
    }
    text.push_str("jobs by filter:");
    if status.jobs.is_empty() {
        text.push_str(" none\n");
    } else {
        text.push('\n');
    }
    for j in &status.jobs {
        text.push_str(&format!(
            "  {} on {} (children in {}) where {}: {} parent(s) half done\n",
            j.change, j.parents, j.collection, j.filter, j.pending
        ));
    }
    text.push_str("followers:");
    if status.followers.is_empty() {
        text.push_str(" none\n");
    } else {
        text.push('\n');
    }
    for f in &status.followers {
        text.push_str(&format!(
            "  {} on {} (parents {}): saved at {} in {}\n",
            f.follower,
            f.collection,
            f.parent,
            f.saved_at.as_deref().unwrap_or("?"),
            f.saved_in
        ));
    }
    text
}
