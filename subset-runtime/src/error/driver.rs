//! What a driver error means for us: which documents of an insert failed and why, whether a
//! write was refused, may have happened, or cannot go on.

use mongodb::error::{ErrorKind, WriteFailure};

/// MongoDB's error code for a duplicate key.
pub const DUPLICATE_KEY: i32 = 11000;

/// How an insert (one document or a batch) failed, document by document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InsertFailure {
    /// Positions in the batch of the documents refused because their `_id` (or another unique
    /// key) is already stored.
    pub duplicates: Vec<usize>,
    /// Positions and server error codes of the documents refused for another reason.
    pub refused: Vec<(usize, i32)>,
    /// Whether the write concern was not satisfied: the documents not refused were written, but
    /// not as durably as asked.
    pub write_concern: bool,
}

impl InsertFailure {
    /// Reads the error of an `insertOne` or `insertMany`. `None` when the error is not about
    /// documents (network, authentication, a command error…), so nothing is known of what was
    /// written.
    pub fn of(error: &mongodb::error::Error) -> Option<Self> {
        let mut failure = InsertFailure::default();
        let mut add = |index: usize, code: i32| match code {
            DUPLICATE_KEY => failure.duplicates.push(index),
            other => failure.refused.push((index, other)),
        };
        match error.kind.as_ref() {
            ErrorKind::Write(WriteFailure::WriteError(w)) => add(0, w.code),
            ErrorKind::Write(WriteFailure::WriteConcernError(_)) => failure.write_concern = true,
            ErrorKind::InsertMany(m) => {
                for w in m.write_errors.iter().flatten() {
                    add(w.index, w.code);
                }
                failure.write_concern = m.write_concern_error.is_some();
            }
            _ => return None,
        }
        let empty = failure.duplicates.is_empty() && failure.refused.is_empty();
        (!empty || failure.write_concern).then_some(failure)
    }

    /// Whether the failure is duplicates and nothing else: every other document was written as
    /// durably as asked.
    pub fn only_duplicates(&self) -> bool {
        !self.duplicates.is_empty() && self.refused.is_empty() && !self.write_concern
    }
}

/// Whether `error` is a write concern error alone: the write was applied, but not as durably
/// as asked.
pub(crate) fn is_write_concern(error: &mongodb::error::Error) -> bool {
    matches!(
        error.kind.as_ref(),
        ErrorKind::Write(WriteFailure::WriteConcernError(_))
    )
}

/// Whether nobody knows if the write that failed with `error` happened: the connection was
/// lost (the reply never came), or the write was applied but its write concern not satisfied
/// (one document's, or a batch's with no document refused).
pub(crate) fn is_unknown(error: &mongodb::error::Error) -> bool {
    let applied = InsertFailure::of(error)
        .is_some_and(|f| f.write_concern && f.duplicates.is_empty() && f.refused.is_empty());
    matches!(error.kind.as_ref(), ErrorKind::Io(_)) || is_write_concern(error) || applied
}

/// Server codes for a document over the BSON size limit: an update's result
/// (`17419`), or a document as written (`10334`, `BSONObjectTooLarge`).
const TOO_LARGE: [i32; 2] = [17419, 10334];

/// Server codes for a pipeline the server cannot run: a `$lookup` from a sharded collection
/// (`28769`, before MongoDB 5.1), an unknown stage (`40324`) or operator (`168`), one it cannot
/// parse (`9`).
const UNSUPPORTED: [i32; 4] = [28769, 40324, 168, 9];

/// Whether the server refused an `aggregate` as a pipeline it cannot run (as opposed to a
/// failure of the moment: a failover, a timeout, an interrupted operation).
pub(crate) fn is_unsupported(error: &mongodb::error::Error) -> bool {
    code(error).is_some_and(|c| UNSUPPORTED.contains(&c))
}

/// Whether the server refused a write because the document would be over 16 MiB.
pub(crate) fn is_too_large(error: &mongodb::error::Error) -> bool {
    code(error).is_some_and(|c| TOO_LARGE.contains(&c))
}

/// Whether the server refused a write as a bad value (code 2: an `$inc` that would carry an
/// int64 past its range, a `$push` to a field that is not an array) or a type mismatch (code
/// 14: an `$inc` of a field that is not a number).
pub(crate) fn is_bad_type(error: &mongodb::error::Error) -> bool {
    matches!(code(error), Some(2 | 14))
}

/// Whether the server answered that it did not apply a write (a write or command error), as
/// opposed to a failure after which nobody knows (a lost connection).
pub(crate) fn is_refused(error: &mongodb::error::Error) -> bool {
    matches!(
        error.kind.as_ref(),
        ErrorKind::Write(WriteFailure::WriteError(_)) | ErrorKind::Command(_)
    )
}

/// Whether our error says the server refused a write, which then left nothing behind. A
/// parent out of shape is one no write of it applies to: refused, or not sent.
pub(crate) fn was_refused(error: &crate::Error) -> bool {
    match error {
        crate::Error::SubsetTooLarge { .. }
        | crate::Error::NumberOverflow { .. }
        | crate::Error::MalformedParent { .. } => true,
        other => other.mongo_error().is_some_and(is_refused),
    }
}

/// The server's write conflict: another transaction wrote the same document first.
const WRITE_CONFLICT: i32 = 112;

/// Whether our error is a write conflict with another transaction (see [`WRITE_CONFLICT`]).
pub(crate) fn is_write_conflict(error: &crate::Error) -> bool {
    error.mongo_error().and_then(code) == Some(WRITE_CONFLICT)
}

fn code(error: &mongodb::error::Error) -> Option<i32> {
    match error.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

/// Whether a driver error is a duplicate-key write error.
pub(crate) fn is_duplicate(error: &mongodb::error::Error) -> bool {
    InsertFailure::of(error).is_some_and(|f| !f.duplicates.is_empty())
}

/// Whether an insert of one document failed because its `_id` is taken (not another unique
/// key: the server names the index, `_id_`, in its message).
pub(crate) fn is_duplicate_id(error: &mongodb::error::Error) -> bool {
    match error.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(w)) => {
            w.code == DUPLICATE_KEY && w.message.contains(" index: _id_ ")
        }
        _ => false,
    }
}

/// `ChangeStreamHistoryLost`: the resume point has fallen off the oplog.
const CHANGE_STREAM_HISTORY_LOST: i32 = 286;

/// `ChangeStreamFatalError`: among others, a resume token the server cannot find in an oplog
/// that was never truncated (where it does not say `ChangeStreamHistoryLost`).
const CHANGE_STREAM_FATAL: i32 = 280;

/// Whether a change stream cannot go on from its resume token: the changes since then can no
/// longer be read, and only a full pass can make up for them.
pub(crate) fn is_history_lost(error: &mongodb::error::Error) -> bool {
    code(error).is_some_and(|c| c == CHANGE_STREAM_HISTORY_LOST || c == CHANGE_STREAM_FATAL)
}

/// `NamespaceExists`.
pub(crate) const NAMESPACE_EXISTS: i32 = 48;

/// Whether a command failed with the server error `expected`.
pub(crate) fn has_code(error: &mongodb::error::Error, expected: i32) -> bool {
    code(error) == Some(expected)
}
