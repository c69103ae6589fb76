//! What can stop a command, and the exit code each means.

use mongodb::error::{ErrorKind, WriteFailure};
use subset_runtime::bson::Bson;
use subset_runtime::repair::ParentFailure;
use subset_runtime::spec::SpecError;

/// How many invalid parents an error message lists (`--json` lists them all).
const LISTED: usize = 10;

/// A parent that a command cannot work on, and why.
#[derive(Debug, Clone)]
pub struct Invalid {
    /// The parent's `_id`.
    pub id: Bson,
    /// What is wrong, naming the field path.
    pub problem: String,
}

impl Invalid {
    /// A parent a pass went on past, with the engine's error in one line.
    pub fn failed(failure: &ParentFailure) -> Self {
        Invalid {
            id: failure.parent.clone(),
            problem: reason(&failure.error),
        }
    }
}

/// A failed command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag value the tool cannot use.
    #[error("{0}")]
    Usage(String),

    /// `--field`, `--child`, `--key`, `--sort`, `--keep`, `--count`, `--embed`, `--filter` or
    /// `--sum` describe no valid subset.
    #[error("invalid subset description: {0}")]
    Spec(#[source] SpecError),

    /// The server could not be reached or refused us.
    #[error("cannot connect to MongoDB: {0}")]
    Connect(#[source] Box<mongodb::error::Error>),

    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),

    /// The engine failed (a server error, a malformed document it met).
    #[error("{0}")]
    Engine(#[from] subset_runtime::Error),

    /// A driver error outside the engine.
    #[error("mongodb error on `{collection}`: {source}")]
    Mongo {
        /// The collection involved.
        collection: String,
        /// The driver's error.
        #[source]
        source: Box<mongodb::error::Error>,
    },

    /// Parents whose documents cannot be worked on; nothing was written to them.
    #[error("{}", invalid_message(collection, field, action, invalid, hint))]
    Invalid {
        /// The parent collection.
        collection: String,
        /// The array field.
        field: String,
        /// What could not be done (`migrated`, `reconciled`).
        action: &'static str,
        /// Every invalid parent found.
        invalid: Vec<Invalid>,
        /// What was changed, and what to do next.
        hint: &'static str,
    },
}

impl CliError {
    /// A driver error on `collection`.
    pub fn mongo(collection: &str, source: mongodb::error::Error) -> Self {
        CliError::Mongo {
            collection: collection.to_owned(),
            source: Box::new(source),
        }
    }

    /// 2 for usage and connection errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Spec(_) | CliError::Connect(_) => 2,
            CliError::Mongo { source, .. } if is_connection(source) => 2,
            CliError::Engine(e) if e.mongo_error().is_some_and(is_connection) => 2,
            CliError::Engine(subset_runtime::Error::FollowUnsupported { .. }) => 2,
            // `--set` and `--unset` describe a change the subset cannot take.
            CliError::Engine(subset_runtime::Error::InvalidPatch { .. }) => 2,
            _ => 1,
        }
    }

    /// The invalid parents, for `--json`.
    pub fn invalid(&self) -> &[Invalid] {
        match self {
            CliError::Invalid { invalid, .. } => invalid,
            _ => &[],
        }
    }
}

/// An engine error in one line. A server's refusal is its code and message: the driver's own
/// text carries the raw reply, in hex.
pub fn reason(e: &subset_runtime::Error) -> String {
    let said = e.mongo_error().and_then(|m| match m.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some((w.code, w.message.as_str())),
        ErrorKind::Command(c) => Some((c.code, c.message.as_str())),
        _ => None,
    });
    match (e, said) {
        (subset_runtime::Error::Mongo { collection, .. }, Some((code, message))) => {
            format!("server error {code} on `{collection}`: {message}")
        }
        _ => e.to_string(),
    }
}

/// Whether a driver error means the server is unreachable or refused the credentials.
pub fn is_connection(e: &mongodb::error::Error) -> bool {
    matches!(
        e.kind.as_ref(),
        ErrorKind::ServerSelection { .. }
            | ErrorKind::Io(_)
            | ErrorKind::ConnectionPoolCleared { .. }
            | ErrorKind::Authentication { .. }
            | ErrorKind::DnsResolve { .. }
            | ErrorKind::InvalidTlsConfig { .. }
    )
}

fn invalid_message(
    collection: &str,
    field: &str,
    action: &str,
    invalid: &[Invalid],
    hint: &str,
) -> String {
    let mut message = format!(
        "{} parent(s) of `{collection}` have a `{field}` that cannot be {action}:",
        invalid.len()
    );
    for i in invalid.iter().take(LISTED) {
        message.push_str(&format!("\n  {}: {}", i.id, i.problem));
    }
    if invalid.len() > LISTED {
        message.push_str(&format!(
            "\n  … and {} more (--json lists them all)",
            invalid.len() - LISTED
        ));
    }
    message.push('\n');
    message.push_str(hint);
    message
}
