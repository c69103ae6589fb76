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

    /// A push, page or count named a parent that does not exist.
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
    #[error("child {id} in `{collection}`: field `{field}` {problem}")]
    MalformedChild {
        /// The collection holding the child (the child collection, or the parent collection for an
        /// embedded copy).
        collection: String,
        /// The child's `_id` (or `null` when it has none).
        id: Box<Bson>,
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

    /// The registry of model definitions ([`crate::repair::DEFINITIONS_COLLECTION`]) could
    /// not be read or written as a store needs it.
    #[error("`{collection}`: the registry of model definitions: {reason}")]
    Registry {
        /// The parent collection.
        collection: String,
        /// What went wrong.
        reason: String,
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
    /// Wraps a driver error with the collection it happened on.
    pub(crate) fn mongo(collection: &str, source: mongodb::error::Error) -> Self {
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

    /// The driver error behind this error, if there is one.
    pub fn mongo_error(&self) -> Option<&mongodb::error::Error> {
        match self {
            Error::Mongo { source, .. }
            | Error::TransactionTimeout { source, .. }
            | Error::OutcomeUnknown { source, .. } => Some(source),
            _ => None,
        }
    }
}
