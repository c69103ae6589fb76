//! The one error type of the crate, and what the driver's errors mean for it ([`driver`]).

use crate::bson::Bson;

pub(crate) mod driver;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, naming the collection, document and field involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server or the driver reported an error.
    #[error("mongodb error on `{collection}`: {source}")]
    Mongo {
        /// The collection the operation was on.
        collection: String,
        /// The driver's error.
        #[source]
        source: Box<mongodb::error::Error>,
    },

    /// The server refused an operation for want of a privilege (its code 13, `Unauthorized`):
    /// the user the client authenticated as holds no role granting `action` on `collection`.
    /// Reads (`get`, pages, counts, checks) need `find` alone, which the built-in `read` role
    /// grants; writes need `find`, `insert`, `update` and `remove` (and `createIndex` and
    /// `createCollection` the first time), which `readWrite` grants; a follower needs
    /// `changeStream` too. A refused write wrote nothing.
    #[error("{}", unauthorized_message(collection, action, command))]
    Unauthorized {
        /// The collection the refused command was on, as the server named it.
        collection: String,
        /// The privilege action that was missing: `find`, `insert`, `update`, `remove`,
        /// `changeStream`, `createIndex`, `createCollection`, …, or the command's name for one
        /// without a known action (empty when the server's message names no command).
        action: String,
        /// The command the server refused (`findAndModify`, `insert`, `aggregate`, …; empty
        /// when its message names none).
        command: String,
        /// The driver's error.
        #[source]
        source: Box<mongodb::error::Error>,
    },

    /// The children were written, but the parent's views could not be brought along with them:
    /// without a transaction, the operation took longer than its lease on the parent (see
    /// the write modes in the guide), and another writer took the parent meanwhile. Nothing is
    /// lost: the parent is marked as built under no definition, so reads compute its views
    /// from the child collection, and the next write to it, or `reconcile`, rebuilds them. Do
    /// not retry the operation; it was applied.
    #[error("parent {id} in `{collection}`: the children were written, but its views are left for the next write or reconcile to rebuild (the operation outlasted its lease)")]
    Unsettled {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
    },

    /// A write or a page named a parent that does not exist. ([`crate::Children::count`] reads
    /// the child collection only: a parent that does not exist has none, and counts 0.)
    #[error("parent {id} not found in `{collection}`")]
    ParentNotFound {
        /// The parent collection.
        collection: String,
        /// The `_id` that was looked for.
        id: Box<Bson>,
    },

    /// An insert of a parent whose `_id` is already stored (a retry of an insert that got
    /// through, say): nothing was written, and the stored parent and its children are as they
    /// were.
    #[error("parent {id} already exists in `{collection}`")]
    ParentExists {
        /// The parent collection.
        collection: String,
        /// The `_id` that is taken.
        id: Box<Bson>,
    },

    /// A remove or update named a child that is not stored under that parent.
    #[error("child {id} of parent {parent} not found in `{collection}`")]
    ChildNotFound {
        /// The child collection.
        collection: String,
        /// The parent's `_id`.
        parent: Box<Bson>,
        /// The child's `_id`.
        id: Box<Bson>,
    },

    /// A call by a child's `_id` alone ([`crate::Children::patch_by_id`],
    /// [`crate::Children::move_by_id`]) named no stored child, or one that carries no parent
    /// key.
    #[error("child {id} not found under any parent in `{collection}`")]
    UnknownChild {
        /// The child collection.
        collection: String,
        /// The child's `_id`.
        id: Box<Bson>,
    },

    /// A child `_id` that is already in the child collection under another parent.
    #[error("child {id} in `{collection}` belongs to parent {owner}, not {parent}")]
    ChildOwnedElsewhere {
        /// The child collection.
        collection: String,
        /// The child's `_id`.
        id: Box<Bson>,
        /// The parent it was pushed to.
        parent: Box<Bson>,
        /// The parent it is stored under.
        owner: Box<Bson>,
    },

    /// A child pushed, updated or inserted under a parent whose `_id` is not the value the child
    /// holds in its parent key field (see [`crate::spec::SubsetSpec::embed_key`]); nothing was
    /// written.
    #[error("child {child} for `{collection}` holds {found} in its parent key `{field}`, not the `_id` of parent {parent} it is written under")]
    ParentKeyMismatch {
        /// The child collection.
        collection: String,
        /// The parent's `_id` the child was written under.
        parent: Box<Bson>,
        /// The child's `_id` (`null` if it has none).
        child: Box<Bson>,
        /// The parent key field.
        field: String,
        /// The value the child holds there.
        found: Box<Bson>,
    },

    /// A stored parent document does not have the shape of the Rust type.
    #[error("parent {id} in `{collection}`: field `{field}` {problem}")]
    MalformedParent {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
        /// The BSON path of the offending field.
        field: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A stored child document does not have the shape of the Rust type.
    #[error("child {id}{} in `{collection}`: field `{field}` {problem}", of_parent(.parent))]
    MalformedChild {
        /// The collection holding the child (the child collection, or the parent collection for an
        /// embedded copy).
        collection: String,
        /// The child's `_id` (or `null` when it has none).
        id: Box<Bson>,
        /// The `_id` of the parent the child was read or written for; `None` only where no
        /// parent is at hand (a child decoded on its own).
        parent: Option<Box<Bson>>,
        /// The BSON path of the offending field.
        field: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A value could not be turned into BSON.
    #[error("cannot serialize {what} to BSON: {source}")]
    Serialize {
        /// What was being serialized (a parent, a child, an `_id`).
        what: &'static str,
        /// The serializer's error.
        #[source]
        source: Box<crate::bson_compat::SerError>,
    },

    /// An `_id` given to an operation that no stored document can have (`undefined`, an array,
    /// a regular expression, a document with `$`-prefixed fields): refused before any query,
    /// since in a filter it would act as an operator, not a value.
    #[error("{what} {id} cannot be an `_id` in `{collection}`: {reason}")]
    InvalidId {
        /// The collection the `_id` was for.
        collection: String,
        /// "parent" or "child".
        what: &'static str,
        /// The value given.
        id: Box<Bson>,
        /// Why no document can have it.
        reason: &'static str,
    },

    /// One `push_many` given two children with the same `_id`: each child needs its own.
    /// Refused before any write (a push of a child already stored is a retry, and writes no
    /// second copy; two in one call are a mistake, which the server's unique index would refuse
    /// in one mode and not the other).
    #[error("push_many to parent {parent} of `{collection}` holds two children with `_id` {id}: each child needs its own `_id`; nothing was written")]
    RepeatedChild {
        /// The child collection.
        collection: String,
        /// The parent's `_id`.
        parent: Box<Bson>,
        /// The `_id` given twice.
        id: Box<Bson>,
    },

    /// A parent to be inserted has no `_id`: its children could not name it.
    #[error("parent for `{collection}` has no `_id` field")]
    ParentWithoutId {
        /// The parent collection.
        collection: String,
    },

    /// A parent to be inserted holds previews in a preview subset field (see
    /// [`crate::spec::SubsetSpec::embed`]): a preview is not the whole child, so the child collection
    /// could not be written from it. Nothing is written.
    #[error("parent {id} for `{collection}`: field `{field}` holds previews, not whole children, so they cannot be inserted with the parent: insert the parent with `{field}` empty, then push the whole children (in one transaction with `.session(&mut s)` if they must appear together)")]
    PreviewsOnInsert {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
        /// BSON name of the preview subset field.
        field: String,
    },

    /// A child to be written has no `_id`, which exactly-once pagination and idempotent pushes
    /// rely on.
    #[error("child for `{collection}` has no `_id` field")]
    ChildWithoutId {
        /// The child collection.
        collection: String,
    },

    /// A page cursor that is malformed, tampered with, or made for another parent or field.
    #[error("invalid page cursor: {reason}")]
    InvalidCursor {
        /// Why it was rejected.
        reason: String,
    },

    /// The registry of model definitions ([`Names::definitions`](crate::bookkeeping::Names::definitions)) could
    /// not be read or written as a store needs it.
    #[error("`{collection}`: the registry of model definitions: {reason}")]
    Registry {
        /// The parent collection.
        collection: String,
        /// What went wrong.
        reason: String,
    },

    /// A rebuild ([`crate::Store::rebuild`], or a reconcile or check of a parent built under
    /// another definition of the model) would empty a view of a parent that holds children
    /// today, while those children are still stored: none under the key the view names, and one
    /// of them carries the parent's `_id` in another field, which `carried` names. Most often
    /// the parent struct was renamed, and with it the default key (`Movie` → `Film` looks for
    /// `film_id`). Set the key on the field (`#[subset(key = "movie_id", …)]`); or, to drop
    /// those children from the views, rebuild with
    /// [`crate::repair::SweepOptions::allow_emptying`]. A view whose children are gone from the
    /// child collection is rebuilt empty without this error. Nothing was written.
    #[error("rebuilding parent {id} of `{collection}` would empty `{field}`, which holds children today: none is stored under `{key}`; its children carry `{carried}`: set `key = \"{carried}\"` on the field, or rebuild with `SweepOptions::allow_emptying(true)`")]
    RebuildWouldEmpty {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
        /// The view that would be emptied.
        field: String,
        /// The key the view looks for in the child collection.
        key: String,
        /// The field of an embedded child, as stored in the child collection, that holds the
        /// parent's `_id`.
        carried: String,
    },

    /// A rebuild or reconcile (or a check, which reaches the same verdict) would drop children
    /// a parent embeds that the child collection lacks, whose only copy is the parent's array:
    /// the parent was never migrated (no write of this library has marked it, `_subset.d`, and
    /// none of the view's children is stored: `subset migrate --skip-invalid` leaves invalid
    /// parents so), or its migration was cut off after it began to copy them (it carries the
    /// mark of an adoption under way, `_subset.a_<field>`, and one of them is not stored; see
    /// [`crate::raw::Children::adopt`]). Migrate it again (`subset migrate`, or
    /// `Children::adopt`; a skipped parent fixed first), which copies the rest and builds its
    /// view; or, to drop those children, rebuild or reconcile with
    /// [`crate::repair::SweepOptions::allow_emptying`]. Nothing was written.
    #[error("parent {id} of `{collection}` embeds in `{field}` {absent} child(ren) that `{child_collection}` lacks (the first: {first}): it was never migrated, or its migration was cut off, and rebuilding or reconciling it would drop them; run `subset migrate` (or `Children::adopt`) for it again, fixed first if the migration skipped it, or, to drop them, rebuild or reconcile with `SweepOptions::allow_emptying(true)`")]
    NotMigrated {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
        /// The view whose embedded children the child collection lacks.
        field: String,
        /// The child collection.
        child_collection: String,
        /// How many of the children it embeds the child collection lacks (every one, for a
        /// parent never migrated).
        absent: usize,
        /// The `_id` of the first of them.
        first: Box<Bson>,
    },

    /// A rebuild asked of a store that knows only some fields of its model
    /// ([`crate::raw::Store::for_fields`]): rebuilding under a partial definition would mark
    /// every parent as built without the fields it does not know. Rebuild with the store of
    /// the whole model ([`crate::Store::rebuild`]).
    #[error("`{collection}`: a store of some subset fields cannot rebuild parents; rebuild with the store of the whole model (`Store::rebuild`)")]
    PartialModel {
        /// The parent collection.
        collection: String,
    },

    /// A patch ([`crate::raw::ChildPatch`]) that cannot be applied: it names the `_id`, the
    /// parent key or one field twice, takes away a field the subset orders, filters or sums
    /// by, increments by something that is not a number, or would take an integer field out
    /// of its Rust type's range ([`crate::patch::Patch::inc`]). Nothing is written.
    #[error("invalid patch of a child in `{collection}`: field `{field}` {reason}")]
    InvalidPatch {
        /// The child collection.
        collection: String,
        /// The field (BSON name, as written in the patch).
        field: String,
        /// What is wrong with it, and what to do instead.
        reason: String,
    },

    /// A page request that cannot be served.
    #[error("invalid page size {size}: it must be from 1 to {max}")]
    InvalidPageSize {
        /// The size asked for.
        size: u32,
        /// The largest size allowed.
        max: u32,
    },

    /// The parent document would outgrow MongoDB's 16 MiB document limit with the subset a
    /// write asked for: its children (or its `keep`) are too large to embed. Nothing of the write
    /// is left behind.
    #[error("parent {id} in `{collection}` would be about {bytes} bytes with this `{field}` subset, over MongoDB's document limit of 16777216 bytes: embed fewer or smaller children (a lower `keep`)")]
    SubsetTooLarge {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
        /// The subset field (BSON name).
        field: String,
        /// The parent's stored size plus what the write would have added.
        bytes: u64,
    },

    /// A write would carry a parent's count or running sum past what its Rust type holds (see
    /// [`crate::spec::NumberType`]): an `i32` sum past `i32::MAX`, an `i64` past `i64::MAX`, a
    /// `u32` count below 0. The server would store a wider number, or refuse, and the parent
    /// would no longer decode. Nothing of the write is left behind; `arithmetic` says what the
    /// field would have become.
    #[error("parent {id} in `{collection}`: `{field}` is {ty}, which cannot hold {arithmetic}; nothing was written")]
    NumberOverflow {
        /// The parent collection.
        collection: String,
        /// The parent's `_id`.
        id: Box<Bson>,
        /// The count or sum field (BSON name).
        field: String,
        /// The field's Rust type: `i32`, `i64`, `u32`, `u64`.
        ty: String,
        /// What the write would have made of it: "2147483637 + 100 = 2147483737, more than
        /// 2147483647".
        arithmetic: String,
    },

    /// A follower ([`crate::raw::Store::follow`]) cannot run on this deployment or collection:
    /// change streams need a replica set or a sharded cluster, and telling the parent of a
    /// deleted child needs `changeStreamPreAndPostImages` (MongoDB 6.0 or later) on the child
    /// collection.
    #[error("cannot follow `{collection}`: {reason}")]
    FollowUnsupported {
        /// The collection that cannot be followed (the parent collection when the whole
        /// deployment cannot).
        collection: String,
        /// Why, and what to do instead.
        reason: String,
        /// The server's refusal, when there was one.
        #[source]
        source: Option<Box<mongodb::error::Error>>,
    },

    /// A write whose outcome the client cannot know: the connection was lost after the
    /// command was sent (and the driver's one retry failed too), the server applied it but
    /// could not satisfy the write concern (a failover may still roll it back), or a commit
    /// kept ending with an unknown result until its time ran out. The write may have happened,
    /// whole or (without a transaction) in part. Retry it: pushes, removes, updates, moves and
    /// patches that set fields are idempotent (an `inc` is not), and what a cut-off write left
    /// in part is drift that `reconcile` repairs; see the consistency guide.
    #[error("the outcome of a write on `{collection}` is unknown: {source}")]
    OutcomeUnknown {
        /// The collection of the write.
        collection: String,
        /// The driver's error.
        #[source]
        source: Box<mongodb::error::Error>,
    },

    /// A transaction that kept failing with transient errors until its time ran out.
    #[error("transaction on `{collection}` did not commit within {seconds} s: {source}")]
    TransactionTimeout {
        /// The parent collection.
        collection: String,
        /// The time allowed.
        seconds: u64,
        /// The last error seen.
        #[source]
        source: Box<mongodb::error::Error>,
    },
}

impl Error {
    /// Wraps a driver error with the collection it happened on; a refusal for want of a
    /// privilege is [`Error::Unauthorized`].
    pub(crate) fn mongo(collection: &str, source: mongodb::error::Error) -> Self {
        if let Some((command, target)) = unauthorized(&source) {
            return Error::Unauthorized {
                collection: target.unwrap_or(collection).to_owned(),
                action: action_of(command, source_message(&source)).to_owned(),
                command: command.to_owned(),
                source: Box::new(source),
            };
        }
        Error::Mongo {
            collection: collection.to_owned(),
            source: Box::new(source),
        }
    }

    /// A driver error that kept being transient until `deadline`: the same error, as a
    /// [`Error::TransactionTimeout`]. Other errors are returned unchanged.
    pub(crate) fn into_timeout(self, deadline: std::time::Duration) -> Self {
        match self {
            Error::Mongo { collection, source } => Error::TransactionTimeout {
                collection,
                seconds: deadline.as_secs(),
                source,
            },
            other => other,
        }
    }

    /// A driver error after which nobody knows whether the write happened, as an
    /// [`Error::OutcomeUnknown`]: a lost connection, or a write-concern error (applied, not as
    /// durably as asked). Other errors are returned unchanged.
    pub(crate) fn into_unknown(self) -> Self {
        match self {
            Error::Mongo { collection, source } if driver::is_unknown(&source) => {
                Error::OutcomeUnknown { collection, source }
            }
            other => other,
        }
    }

    /// Whether the write may or may not have happened ([`Error::OutcomeUnknown`]).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::OutcomeUnknown { .. })
    }

    /// For an [`Error::OutcomeUnknown`], the same error again, for another writer of the write
    /// whose outcome it is; `None` for any other error.
    pub(crate) fn unknown_again(&self) -> Option<Error> {
        match self {
            Error::OutcomeUnknown { collection, source } => Some(Error::OutcomeUnknown {
                collection: collection.clone(),
                source: source.clone(),
            }),
            _ => None,
        }
    }

    /// The driver error behind this error, if there is one.
    pub fn mongo_error(&self) -> Option<&mongodb::error::Error> {
        match self {
            Error::Mongo { source, .. }
            | Error::Unauthorized { source, .. }
            | Error::TransactionTimeout { source, .. }
            | Error::OutcomeUnknown { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The server's code for a command the user holds no privilege for.
const UNAUTHORIZED: i32 = 13;

/// The server's message of a command or write error.
fn source_message(error: &mongodb::error::Error) -> &str {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(c) => &c.message,
        ErrorKind::Write(WriteFailure::WriteError(w)) => &w.message,
        _ => "",
    }
}

/// For an `Unauthorized` refusal, the command the server refused and the collection it was
/// on, read from its message: "not authorized on <db> to execute command { <command>:
/// "<collection>", … }" (either may be empty when the message is worded otherwise).
fn unauthorized(error: &mongodb::error::Error) -> Option<(&str, Option<&str>)> {
    use mongodb::error::{ErrorKind, WriteFailure};
    let code = match error.kind.as_ref() {
        ErrorKind::Command(c) => c.code,
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code,
        _ => return None,
    };
    if code != UNAUTHORIZED {
        return None;
    }
    let message = source_message(error);
    let Some((_, command)) = message.split_once("to execute command { ") else {
        return Some(("", None));
    };
    let (name, rest) = command.split_once(':').unwrap_or(("", ""));
    let target = rest
        .trim_start()
        .strip_prefix('"')
        .and_then(|rest| rest.split_once('"'))
        .map(|(target, _)| target)
        .filter(|target| !target.is_empty());
    Some((name.trim(), target))
}

/// The privilege action a refused `command` needed (`message` is the server's, to tell a
/// change stream from another aggregation).
fn action_of<'a>(command: &'a str, message: &str) -> &'a str {
    match command {
        "insert" => "insert",
        "update" | "findAndModify" | "findandmodify" => "update",
        "delete" => "remove",
        "aggregate" if message.contains("$changeStream") => "changeStream",
        "find" | "aggregate" | "count" | "distinct" | "getMore" => "find",
        "createIndexes" => "createIndex",
        "create" => "createCollection",
        "drop" => "dropCollection",
        "dropIndexes" => "dropIndex",
        other => other,
    }
}

/// The message of [`Error::Unauthorized`]: what was refused, and which role grants it.
fn unauthorized_message(collection: &str, action: &str, command: &str) -> String {
    if command.is_empty() {
        return format!(
            "not authorized on `{collection}`: the user lacks a privilege this operation needs \
             (reads need `find`, which the built-in `read` role grants; writes need the \
             `readWrite` role)"
        );
    }
    let grant = match action {
        "find" | "changeStream" | "listCollections" | "listIndexes" | "collStats" | "dbStats"
        | "killCursors" => "the built-in `read` role grants it (as `readWrite` does)",
        "insert"
        | "update"
        | "remove"
        | "createIndex"
        | "createCollection"
        | "dropCollection"
        | "dropIndex"
        | "convertToCapped"
        | "renameCollectionSameDB" => {
            "the built-in `readWrite` role grants it; `read` grants no writes"
        }
        _ => "neither the built-in `read` nor `readWrite` role grants it",
    };
    format!(
        "not authorized to `{action}` on `{collection}` (the server refused `{command}`): \
         {grant}"
    )
}

/// The part of [`Error::MalformedChild`]'s message that names the parent, if known.
fn of_parent(parent: &Option<Box<Bson>>) -> String {
    parent
        .as_ref()
        .map_or_else(String::new, |p| format!(" of parent {p}"))
}

impl Error {
    /// This error naming `parent` when it is an [`Error::MalformedChild`] that names none: for
    /// a caller that decoded a child of a parent it knows.
    pub(crate) fn of_parent(self, parent: &Bson) -> Self {
        match self {
            Error::MalformedChild {
                collection,
                id,
                parent: None,
                field,
                problem,
            } => Error::MalformedChild {
                collection,
                id,
                parent: Some(Box::new(parent.clone())),
                field,
                problem,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_named_for_the_commands_that_need_them() {
        for (command, action) in [
            ("insert", "insert"),
            ("findAndModify", "update"),
            ("update", "update"),
            ("delete", "remove"),
            ("find", "find"),
            ("aggregate", "find"),
            ("createIndexes", "createIndex"),
            ("collMod", "collMod"),
        ] {
            assert_eq!(action_of(command, ""), action, "{command}");
        }
        let stream = "not authorized on db to execute command { aggregate: \"c\", pipeline: [ { $changeStream: {} } ] }";
        assert_eq!(action_of("aggregate", stream), "changeStream");
    }

    #[test]
    fn the_message_names_the_action_the_collection_and_the_role() {
        let message = unauthorized_message("products", "update", "findAndModify");
        assert_eq!(
            message,
            "not authorized to `update` on `products` (the server refused `findAndModify`): \
             the built-in `readWrite` role grants it; `read` grants no writes"
        );
        assert!(unauthorized_message("products", "find", "find").contains("`read` role"));
    }
}
