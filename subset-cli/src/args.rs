//! The command line, as clap reads it.

use clap::{ArgGroup, Args, Parser, Subcommand};
use subset_runtime::bson::{Bson, Document};
use subset_runtime::{spec::SpecBuilder, spec::SubsetSpec};

use crate::bulk::Job;
use crate::error::CliError;
use subset_runtime::raw::bson_type_name as type_name;

/// Find unbounded arrays, migrate a collection to the MongoDB Subset Pattern, and keep it healthy.
///
/// Exit codes: 0 success, 1 problems found, 2 usage or connection error.
#[derive(Debug, Parser)]
#[command(name = "subset", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per collection: document sizes, array lengths, and which arrays look unbounded. Read-only.
    Inspect(InspectArgs),
    /// Move a fully-embedded array into a child collection, keeping the top `--keep` embedded.
    /// On parents without `--field`, build it from the child collection: how a second view of
    /// migrated children is added. Resumable and idempotent: rerun it after any interruption.
    Migrate(MigrateArgs),
    /// Report drift between each embedded subset (count, sums) and its child collection.
    /// Read-only.
    Check(SubsetArgs),
    /// Fix drift: recompute each embedded subset, count and sum from the child collection.
    Reconcile(ReconcileArgs),
    /// Keep the subset true while other programs write the child collection: follow its change
    /// stream and reconcile each parent a change concerns. Runs until Ctrl-C or SIGTERM, then
    /// saves its place; started again with the same `--name`, it goes on from there. Needs a
    /// replica set or a sharded cluster (MongoDB 6.0 or later).
    Follow(FollowArgs),
    /// Remove every child that matches `--where`, across all parents: from the child
    /// collection and from `--field`, each parent backfilled and its count and sums recounted.
    /// Resumable: rerun the same command after any interruption.
    Remove(RemoveArgs),
    /// Set or unset fields of every child that matches `--where`, across all parents: in the
    /// child collection and in the embedded copies of `--field`, re-ranked and recounted.
    /// Resumable: rerun the same command after any interruption.
    Patch(PatchArgs),
}

impl Command {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match self {
            Command::Inspect(a) => a.conn.json,
            Command::Migrate(a) => a.subset.conn.json,
            Command::Check(a) => a.conn.json,
            Command::Reconcile(a) => a.subset.conn.json,
            Command::Follow(a) => a.subset.conn.json,
            Command::Remove(a) => a.subset.conn.json,
            Command::Patch(a) => a.subset.conn.json,
        }
    }
}

/// Where the data is, and how to print.
#[derive(Debug, Args)]
pub struct Conn {
    /// MongoDB connection string.
    #[arg(long, env = "MONGODB_URI", value_name = "URI")]
    pub uri: String,
    /// The database.
    #[arg(long, value_name = "DB")]
    pub db: String,
    /// Print one JSON document on stdout instead of text (progress bars are hidden).
    #[arg(long)]
    pub json: bool,
    /// The prefix of the library's own collections (<P>_definitions, <P>_folds, <P>_jobs,
    /// <P>_followers): the one the application's stores use.
    #[arg(long, default_value = subset_runtime::bookkeeping::DEFAULT_PREFIX, value_name = "P")]
    pub bookkeeping_prefix: String,
}

/// `subset inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Inspect only this collection (default: every collection of the database).
    #[arg(long, value_name = "C")]
    pub collection: Option<String>,
    /// For flagged arrays, estimate the sizes if only this many elements stayed embedded.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub keep: u32,
    /// Collections with more documents than this are sampled (`$sample`) with this many.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub sample: u64,
    /// Flag arrays with at least this many elements in some document.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub long: usize,
    /// With `--collection` naming a child collection and `--key`: the parent collection whose
    /// `_id` each child's key holds. Inspect then also counts the children of no parent (key
    /// missing, an array, or naming no document of this collection).
    #[arg(long, value_name = "COLLECTION", requires_all = ["collection", "key"])]
    pub parent: Option<String>,
    /// The child field holding the parent's `_id`, with `--parent`.
    #[arg(long, value_name = "FIELD", requires = "parent")]
    pub key: Option<String>,
}

/// The subset a command works on, and how to scan for it.
#[derive(Debug, Args)]
pub struct SubsetArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// The parent collection.
    #[arg(long, value_name = "COLLECTION")]
    pub parent: String,
    /// The parent's array field holding the (embedded) children.
    #[arg(long, value_name = "FIELD")]
    pub field: String,
    /// The child collection that holds every child.
    #[arg(long, value_name = "COLLECTION")]
    pub child: String,
    /// How many children stay embedded (1 to 1000).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub keep: u32,
    /// The order of the children, by child field: "date desc, rating asc".
    #[arg(long, value_name = "ORDER")]
    pub sort: String,
    /// The field of each child document that holds its parent's `_id`.
    #[arg(long, value_name = "FIELD")]
    pub key: String,
    /// A parent integer field to keep equal to the number of children (with `--filter`, of
    /// the children the filter keeps).
    #[arg(long, value_name = "FIELD")]
    pub count: Option<String>,
    /// Embed previews instead of whole children: each embedded copy keeps only `_id`, the sort
    /// fields and these child fields, comma-separated BSON names ("author,rating"); the child
    /// collection keeps whole children.
    #[arg(long, value_name = "FIELDS")]
    pub embed: Option<String>,
    /// Make the field a filtered view: "verified" embeds, counts and sums only the children
    /// whose bool field `verified` is true; "!hidden" only those whose `hidden` is false.
    #[arg(long, value_name = "FIELD|!FIELD")]
    pub filter: Option<String>,
    /// A parent field kept equal to the sum of a child field: "rating_total = rating".
    /// Repeatable, and each may list several, comma-separated: "a = x, b = y".
    #[arg(long, value_name = "PARENT = CHILD")]
    pub sum: Vec<String>,
    /// How many parents are read per query.
    #[arg(long, default_value_t = 500, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Pass over invalid parents and list them, instead of stopping at the first: a malformed
    /// array; for `migrate`, sort values that give some element no place in the order; for
    /// `reconcile`, a parent never migrated. Other failures never stop `check`/`reconcile`.
    #[arg(long)]
    pub skip_invalid: bool,
}

impl SubsetArgs {
    /// The descriptor the engine works with.
    pub fn spec(&self) -> Result<&'static SubsetSpec, CliError> {
        let mut builder = SpecBuilder::new(&self.field, &self.child, &self.key)
            .keep(self.keep)
            .sort(&self.sort);
        if let Some(count) = &self.count {
            builder = builder.count(count);
        }
        if let Some(embed) = &self.embed {
            builder = builder.embed(embed.split(',').map(str::trim));
        }
        if let Some(filter) = &self.filter {
            builder = builder.filter(filter);
        }
        for sums in &self.sum {
            builder = builder.sums(sums).map_err(CliError::Spec)?;
        }
        if self.parent.is_empty() || self.parent.contains('$') || self.parent.contains('\0') {
            return Err(CliError::Usage(format!(
                "--parent `{}` is not a collection name MongoDB accepts",
                self.parent
            )));
        }
        builder.build().map_err(CliError::Spec)
    }
}

/// `subset migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub subset: SubsetArgs,
    /// Change nothing; report what would be done.
    #[arg(long)]
    pub dry_run: bool,
}

/// `subset reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub subset: SubsetArgs,
    /// Change nothing; report the drift (the same as `subset check`).
    #[arg(long)]
    pub dry_run: bool,
}

/// `subset follow`.
#[derive(Debug, Args)]
pub struct FollowArgs {
    #[command(flatten)]
    pub subset: SubsetArgs,
    /// The follower's name, under which its place (resume token) is saved
    /// [default: subset-cli:<PARENT>.<FIELD>].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Gather events for this long after the first of a batch, so that a burst on one parent
    /// costs one reconcile.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub window_ms: u64,
    /// End a batch at this many events.
    #[arg(long, default_value_t = 1_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch: u64,
    /// Parents reconciled at once.
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: u64,
    /// On a first start (no saved place), reconcile every parent before following.
    #[arg(long)]
    pub catch_up: bool,
    /// The collection (in --db) where the place is saved [default: <P>_followers, P the
    /// --bookkeeping-prefix].
    #[arg(long, value_name = "C")]
    pub token_collection: Option<String>,
    /// Do not turn on `changeStreamPreAndPostImages` on the child collection; fail if it is off.
    #[arg(long)]
    pub require_pre_images: bool,
    /// In text mode without a terminal, print a status line this often.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub status_every: u64,
}

/// What `subset remove` and `subset patch` take besides the subset: which children, and how.
#[derive(Debug, Args)]
pub struct WhereArgs {
    /// The children to change: a query on child fields, in extended JSON, as `find` takes it:
    /// '{"user": "ann"}', '{"date": {"$lt": {"$date": "2024-01-01T00:00:00Z"}}}'.
    #[arg(long = "where", id = "where", value_name = "FILTER")]
    pub filter: String,
    /// Change nothing; count the matching children and their parents.
    #[arg(long)]
    pub dry_run: bool,
    /// Parents changed at once.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: u64,
}

impl WhereArgs {
    /// `--where` as a document.
    pub fn filter(&self) -> Result<Document, CliError> {
        match extended_json("--where", &self.filter)? {
            Bson::Document(filter) => Ok(filter),
            other => Err(CliError::Usage(format!(
                "--where must be a JSON document (an object such as '{{\"user\": \"ann\"}}'), not {}",
                type_name(other.element_type())
            ))),
        }
    }
}

/// `subset remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub subset: SubsetArgs,
    #[command(flatten)]
    pub job: WhereArgs,
}

/// `subset patch`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("change").args(["set", "unset"]).required(true).multiple(true)))]
pub struct PatchArgs {
    #[command(flatten)]
    pub subset: SubsetArgs,
    #[command(flatten)]
    pub job: WhereArgs,
    /// Set a child field (a BSON name, or a dotted path) to a value in extended JSON:
    /// 'user="anonymous"', 'rating=5', 'seen={"$date": "2024-01-01T00:00:00Z"}'. Repeatable.
    #[arg(long, value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Remove a child field. Repeatable.
    #[arg(long, value_name = "FIELD")]
    pub unset: Vec<String>,
}

impl PatchArgs {
    /// The change `--set` and `--unset` describe. The engine checks it against the subset
    /// (the `_id`, the parent key, a sort key unset, …) before it writes anything.
    pub fn job(&self) -> Result<Job, CliError> {
        let mut set = Vec::new();
        for flag in &self.set {
            let (field, value) = flag.split_once('=').ok_or_else(|| {
                CliError::Usage(format!(
                    "--set `{flag}` must be FIELD=VALUE, the value in extended JSON: 'user=\"anonymous\"'"
                ))
            })?;
            let field = field.trim();
            if field.is_empty() {
                return Err(CliError::Usage(format!(
                    "--set `{flag}` names no field: 'user=\"anonymous\"'"
                )));
            }
            let value = extended_json(&format!("--set {field}"), value)?;
            set.push((field.to_owned(), value));
        }
        let unset = self.unset.iter().map(|f| f.trim().to_owned()).collect();
        Ok(Job::Patch { set, unset })
    }
}

/// A flag's value read as extended JSON (relaxed or canonical), keys in the order given.
fn extended_json(flag: &str, text: &str) -> Result<Bson, CliError> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| CliError::Usage(format!("{flag} is not valid JSON ({e}): {text}")))?;
    Bson::try_from(value)
        .map_err(|e| CliError::Usage(format!("{flag} is not valid extended JSON ({e}): {text}")))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// clap checks the flags (unique names, groups) only when a command is parsed.
    #[test]
    fn the_command_line_is_valid() {
        Cli::command().debug_assert();
    }
}
