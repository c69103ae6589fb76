//! The command line, as clap reads it.

use clap::{ArgGroup, Args, Parser, Subcommand};
use subset_runtime::bson::{Bson, Document};
use subset_runtime::spec::{parse_sort, SortValues, SpecBuilder};

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
    ///
    /// Prints the document count, total and average size and the 5 largest `_id`s; per array
    /// field (also inside embedded documents) the length p50/p99/max. An array looks unbounded
    /// with at least `--long` elements in some document, or held by a document over 8 MB; the
    /// report estimates the sizes if only the top `--keep` stayed embedded. It names the element
    /// fields whose type, in some documents, differs from the type most elements of that
    /// document's array have (all numbers count as one type; null and missing values are not
    /// counted): as a sort field such a child has no place in the order, and `migrate` refuses
    /// its parent.
    Inspect(InspectArgs),
    /// Move a fully-embedded array into a child collection, keeping the top `--keep` embedded.
    ///
    /// Every element is stored in the child collection with the parent key (keeping its `_id`,
    /// or getting a new one), the array is cut to the top `keep`, the count and sums are set, and
    /// the child index `{key: 1, <sort keys>, _id}` is created; the report gives the parent
    /// collection's size before and after. On parents without the field, it is built from the
    /// child collection: how a second view of migrated children is added. Resumable and
    /// idempotent: rerun it after any interruption.
    Migrate(MigrateArgs),
    /// Report drift between each embedded subset (count, sums) and its child collection.
    /// Read-only.
    ///
    /// Missing, stale, changed and misordered children, a wrong count, a wrong sum with its
    /// stored and computed values, malformed children, and the child index. A parent that cannot
    /// be checked is listed with its `_id` and the error, and the pass goes on.
    Check(SubsetArgs),
    /// Fix drift: recompute each embedded subset, count and sum from the child collection.
    ///
    /// Each parent is written in one conditional update (safe while the application writes),
    /// and a missing child index is created. A parent that cannot be fixed (say its top `keep`
    /// children and its other fields make more than 16 MB) is listed with its `_id` and the
    /// reason, and the pass goes on to fix the others.
    Reconcile(ReconcileArgs),
    /// Keep the subset true while other programs write the child collection: follow its change
    /// stream and reconcile each parent a change concerns. Runs until Ctrl-C or SIGTERM, then
    /// saves its place; started again with the same `--name`, it goes on from there. Needs a
    /// replica set or a sharded cluster (MongoDB 6.0 or later).
    ///
    /// Events are gathered for `--window-ms`, their parents deduplicated and reconciled
    /// `--concurrency` at once (a parent already in sync is not written); the place is saved
    /// after each batch's parents are reconciled. It turns on `changeStreamPreAndPostImages` on
    /// the child collections, to find the parent of a deleted child, unless
    /// `--require-pre-images`.
    Follow(FollowArgs),
    /// Remove every child that matches `--where`, across all parents: from the child
    /// collection and from `--field`, each parent backfilled and its count and sums recounted.
    /// Resumable: rerun the same command after any interruption.
    ///
    /// Each parent is changed whole or not at all: in a transaction, or on a standalone server
    /// between the entries of a journal in <P>_jobs that a rerun finishes first. A parent that
    /// fails is listed with its `_id` and the reason, and the job goes on.
    Remove(RemoveArgs),
    /// Set or unset fields of every child that matches `--where`, across all parents: in the
    /// child collection and in the embedded copies of `--field`, re-ranked and recounted.
    /// Resumable: rerun the same command after any interruption.
    ///
    /// A patch the subset refuses (the `_id`, the parent key, a sort key, filter or summed field
    /// unset) is a usage error before anything is written, in a dry run too.
    Patch(PatchArgs),
    /// Rebuild, under the application's registered model, every parent built under another
    /// definition of it (after a deploy or a rollback), then drop the definitions no parent is
    /// built under any more. Resumable.
    ///
    /// A rebuild that would empty views holding children (none stored under the key) is
    /// refused, with exit code 1, unless `--allow-emptying`. Takes no view flags.
    Rebuild(RebuildArgs),
    /// What the library keeps in the database: each model's definitions (which is current, how
    /// many parents are built under each), fold queues, jobs by filter and followers. Read-only.
    Status(StatusArgs),
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
            Command::Rebuild(a) => a.subset.conn.json,
            Command::Status(a) => a.conn.json,
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
    /// Print one JSON document on stdout instead of text, errors too (progress bars, on stderr
    /// when it is a terminal, are hidden).
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
    /// The parent's array field holding the (embedded) children. Without the view flags
    /// (`--field`, `--child`, `--key`, `--sort`), every command acts on the application's model
    /// as registered: every view, with its types.
    #[arg(long, value_name = "FIELD")]
    pub field: Option<String>,
    /// The child collection that holds every child.
    #[arg(long, value_name = "COLLECTION")]
    pub child: Option<String>,
    /// How many children stay embedded (1 to 1000) [default: 10].
    #[arg(long, value_name = "N")]
    pub keep: Option<u32>,
    /// The order of the children, by child field (their stored names): "date desc, rating asc";
    /// `_id` is added as the last tie-breaker. A key may name the
    /// BSON type its values hold, "date:date desc" (date, string, int, long, double, decimal,
    /// objectId, bool, timestamp, uuid): a child holding another type is malformed, reported
    /// and never embedded. Untyped keys take the type most children hold.
    #[arg(long, value_name = "ORDER")]
    pub sort: Option<String>,
    /// The field of each child document that holds its parent's `_id`.
    #[arg(long, value_name = "FIELD")]
    pub key: Option<String>,
    /// A parent integer field to keep equal to the number of children (with `--filter`, of
    /// the children the filter keeps).
    #[arg(long, value_name = "FIELD")]
    pub count: Option<String>,
    /// Embed previews instead of whole children: each embedded copy keeps only `_id`, the sort
    /// fields and these child fields, comma-separated BSON names ("author,rating"); the child
    /// collection keeps whole children.
    #[arg(long, value_name = "FIELDS")]
    pub embed: Option<String>,
    /// The children hold the parent key as a field of their own (`--key`), so the embedded
    /// copies keep it too; without it only the child collection holds the key.
    #[arg(long)]
    pub embed_key: bool,
    /// Make the field a filtered view: "verified" embeds, counts and sums only the children
    /// whose bool field `verified` is true; "!hidden" only those whose `hidden` is false.
    #[arg(long, value_name = "FIELD|!FIELD")]
    pub filter: Option<String>,
    /// A parent field kept equal to the sum of a child field: "rating_total = rating".
    /// Repeatable, and each may list several, comma-separated: "a = x, b = y". A sum has the
    /// type of the stored child values: `Decimal128` amounts add up exactly as decimals.
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
    /// The view the flags describe, sort keys typed as `--sort` says; `None` when no view flag
    /// is given (the registered model is meant).
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for some view flags without the others, a bad `--parent` or type
    /// word; [`CliError::Spec`] for flags that describe no valid subset.
    pub fn view(&self) -> Result<Option<View>, CliError> {
        if self.parent.is_empty() || self.parent.contains('$') || self.parent.contains('\0') {
            return Err(CliError::Usage(format!(
                "--parent `{}` is not a collection name MongoDB accepts",
                self.parent
            )));
        }
        let (Some(field), Some(child), Some(key), Some(sort)) =
            (&self.field, &self.child, &self.key, &self.sort)
        else {
            let given = self.view_flags_given();
            if given.is_empty() {
                return Ok(None);
            }
            return Err(CliError::Usage(format!(
                "{} given without the rest of the view: give --field, --child, --key and --sort together, or none of them to act on the application's registered model",
                given.join(", ")
            )));
        };
        let (sort, typed) = typed_sort(sort)?;
        let mut builder = SpecBuilder::new(field, child, key)
            .keep(self.keep.unwrap_or(DEFAULT_KEEP))
            .sort(&sort);
        if let Some(count) = &self.count {
            builder = builder.count(count);
        }
        if let Some(embed) = &self.embed {
            builder = builder.embed(embed.split(',').map(str::trim));
        }
        if self.embed_key {
            builder = builder.embed_key(true);
        }
        if let Some(filter) = &self.filter {
            builder = builder.filter(filter);
        }
        for sums in &self.sum {
            builder = builder.sums(sums).map_err(CliError::Spec)?;
        }
        let untyped = parse_sort(&sort)
            .map_err(CliError::Spec)?
            .into_iter()
            .map(|(field, _)| field)
            .filter(|f| !typed.iter().any(|(t, _)| t == f))
            .collect();
        for (field, values) in typed {
            builder = builder.values(field, values);
        }
        Ok(Some(View { builder, untyped }))
    }

    /// The view flags given (besides `--parent`).
    fn view_flags_given(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        let flags = [
            ("--field", self.field.is_some()),
            ("--child", self.child.is_some()),
            ("--key", self.key.is_some()),
            ("--sort", self.sort.is_some()),
            ("--keep", self.keep.is_some()),
            ("--count", self.count.is_some()),
            ("--embed", self.embed.is_some()),
            ("--embed-key", self.embed_key),
            ("--filter", self.filter.is_some()),
            ("--sum", !self.sum.is_empty()),
        ];
        for (flag, on) in flags {
            if on {
                given.push(flag);
            }
        }
        given
    }
}

/// `keep` when `--keep` is not given.
const DEFAULT_KEEP: u32 = 10;

/// A view described by flags, its sort keys' types not yet all known.
#[derive(Debug)]
pub struct View {
    /// The descriptor, with the types `--sort` gave.
    pub builder: SpecBuilder,
    /// The sort keys `--sort` gave no type: the type most children hold is theirs.
    pub untyped: Vec<String>,
}

/// `--sort` without its types, and the types: `"date:date desc, stars desc"` is
/// `("date desc, stars desc", [("date", date)])`. The order itself is the library's grammar
/// ([`parse_sort`]); a type is a word [`SortValues::parse`] reads.
fn typed_sort(sort: &str) -> Result<(String, Vec<(String, SortValues)>), CliError> {
    let mut plain = Vec::new();
    let mut typed = Vec::new();
    for key in sort.split(',') {
        let trimmed = key.trim_start();
        let (first, rest) = trimmed
            .split_once(char::is_whitespace)
            .unwrap_or((trimmed, ""));
        match first.split_once(':') {
            Some((field, word)) => {
                let values = SortValues::parse(word).ok_or_else(|| {
                    CliError::Usage(format!(
                        "--sort: `{word}` (the type of `{field}`) is not a type: date, string, int, long, double, decimal, objectId, bool, timestamp or uuid"
                    ))
                })?;
                typed.push((field.to_owned(), values));
                plain.push(format!("{field} {rest}"));
            }
            None => plain.push(key.to_owned()),
        }
    }
    Ok((plain.join(","), typed))
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
    /// The follower's name, under which its place (resume token) is saved [default:
    /// subset-cli:<PARENT> on the registered model, subset-cli:<PARENT>.<FIELD> with the view
    /// flags].
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

/// `subset rebuild`.
#[derive(Debug, Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub subset: SubsetArgs,
    /// Rebuild a parent even when that empties a view that holds children today, none of them
    /// stored under the view's key (children really gone; a renamed key wants the key fixed
    /// in the model instead).
    #[arg(long)]
    pub allow_emptying: bool,
}

/// `subset status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Also list the followers whose places are saved in this collection (in --db), as
    /// `subset follow --token-collection` saves them; <P>_followers is always listed.
    /// Repeatable.
    #[arg(long, value_name = "C")]
    pub token_collection: Vec<String>,
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

/// What a job does to each matching child.
#[derive(Debug)]
pub enum Job {
    /// `subset remove`: deletes it.
    Remove,
    /// `subset patch`: sets and unsets fields, in the order given.
    Patch {
        /// `--set FIELD=VALUE`.
        set: Vec<(String, Bson)>,
        /// `--unset FIELD`.
        unset: Vec<String>,
    },
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

    #[test]
    fn sort_keys_may_name_their_type() {
        let (plain, typed) = typed_sort("date:date desc, stars desc,  n:long asc").unwrap();
        assert_eq!(parse_sort(&plain).unwrap().len(), 3);
        assert_eq!(
            typed,
            [
                ("date".to_owned(), SortValues::DateTime),
                ("n".to_owned(), SortValues::integer(i64::MIN, i64::MAX)),
            ]
        );
        let err = typed_sort("date:when desc").unwrap_err().to_string();
        assert!(err.contains("`when`") && err.contains("`date`"), "{err}");
        let spec = |sort: &str| {
            let cli = Cli::try_parse_from([
                "subset",
                "check",
                "--uri",
                "mongodb://x",
                "--db",
                "d",
                "--parent",
                "movies",
                "--field",
                "latest",
                "--child",
                "comments",
                "--key",
                "movie_id",
                "--sort",
                sort,
            ])
            .unwrap();
            let Command::Check(args) = cli.command else {
                unreachable!()
            };
            args.view().unwrap().unwrap()
        };
        let view = spec("date:date desc, stars desc");
        assert_eq!(view.untyped, ["stars"]);
        let built = view.builder.build().unwrap();
        assert_eq!(built.sort[0].values, SortValues::DateTime);
        assert_eq!(built.sort[1].values, SortValues::Scalar);
        // Some view flags without the others: a usage error naming them.
        let cli = Cli::try_parse_from([
            "subset",
            "check",
            "--uri",
            "mongodb://x",
            "--db",
            "d",
            "--parent",
            "movies",
            "--field",
            "latest",
        ])
        .unwrap();
        let Command::Check(args) = cli.command else {
            unreachable!()
        };
        let err = args.view().unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--field given"), "{err}");
    }

    #[test]
    fn embed_key_reaches_the_descriptor() {
        let spec = |extra: &[&str]| {
            let mut argv = vec![
                "subset",
                "check",
                "--uri",
                "mongodb://localhost",
                "--db",
                "app",
                "--parent",
                "movies",
                "--field",
                "comments",
                "--child",
                "comments",
                "--sort",
                "date desc",
                "--key",
                "movie_id",
            ];
            argv.extend(extra);
            match Cli::try_parse_from(argv).unwrap().command {
                Command::Check(args) => args.view().unwrap().unwrap().builder.build().unwrap(),
                _ => unreachable!("parsed as `check`"),
            }
        };
        assert!(!spec(&[]).embed_key);
        assert!(spec(&["--embed-key"]).embed_key);
        // A preview may then show the key.
        let preview = spec(&["--embed-key", "--embed", "movie_id,text"]);
        assert!(preview.embed.unwrap().iter().any(|f| f.bson == "movie_id"));
    }
}
