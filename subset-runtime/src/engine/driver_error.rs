//! What a driver error means for the engine: which documents of an insert failed and why.

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

/// Whether a driver error is a duplicate-key write error.
pub(crate) fn is_duplicate(error: &mongodb::error::Error) -> bool {
    InsertFailure::of(error).is_some_and(|f| !f.duplicates.is_empty())
}
