//! Running a group of writes in one transaction, retried the way the driver specification
//! prescribes: the whole transaction on `TransientTransactionError`, the commit alone on
//! `UnknownTransactionCommitResult`, both until a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use mongodb::error::{TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::{Client, ClientSession};

use crate::error::{Error, Result};

/// How long a transaction keeps retrying; the same 120 s the drivers' callback API uses.
const DEADLINE: Duration = Duration::from_secs(120);

/// The writes of one transaction. `run` may be called several times, so it must not consume
/// anything it needs again.
pub(crate) trait TxnOp {
    type Output;

    /// Runs the writes with `session`. `Ok(Err(e))` is a business outcome (such as a missing
    /// parent) that aborts the transaction and is returned as is; `Err` is a driver error.
    fn run(
        &self,
        session: &mut ClientSession,
    ) -> impl Future<Output = mongodb::error::Result<Result<Self::Output>>> + Send;
}

/// Runs `op` in a transaction on `client`; `collection` names the parent collection in errors.
pub(crate) async fn run<O: TxnOp + Sync>(
    client: &Client,
    collection: &str,
    op: &O,
) -> Result<O::Output> {
    let mongo = |e| Error::mongo(collection, e);
    let mut session = client.start_session().await.map_err(mongo)?;
    let started = Instant::now();
    let mut attempt: u32 = 0;
    'transaction: loop {
        attempt += 1;
        session.start_transaction().await.map_err(mongo)?;
        let output = match op.run(&mut session).await {
            Ok(Ok(output)) => output,
            Ok(Err(outcome)) => {
                // Aborting can fail only if the server is gone; the transaction then dies with
                // the session, so the outcome is still the right thing to report.
                let _ = session.abort_transaction().await;
                return Err(outcome);
            }
            Err(e) => {
                let _ = session.abort_transaction().await;
                if e.contains_label(TRANSIENT_TRANSACTION_ERROR) {
                    if started.elapsed() < DEADLINE {
                        tracing::debug!(attempt, error = %e, "transient transaction error, retrying");
                        backoff(attempt).await;
                        continue 'transaction;
                    }
                    return Err(timeout(collection, e));
                }
                return Err(mongo(e));
            }
        };
        loop {
            match session.commit_transaction().await {
                Ok(()) => return Ok(output),
                Err(e) if started.elapsed() >= DEADLINE => return Err(timeout(collection, e)),
                Err(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => {
                    tracing::debug!(error = %e, "unknown commit result, retrying the commit");
                }
                Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
                    tracing::debug!(attempt, error = %e, "transient commit error, retrying");
                    backoff(attempt).await;
                    continue 'transaction;
                }
                Err(e) => return Err(mongo(e)),
            }
        }
    }
}

fn timeout(collection: &str, source: mongodb::error::Error) -> Error {
    Error::TransactionTimeout {
        collection: collection.to_owned(),
        seconds: DEADLINE.as_secs(),
        source: Box::new(source),
    }
}

/// Write conflicts between transactions on one hot parent resolve faster when the losers do not
/// all come back at once: wait a few milliseconds, growing with the attempt and spread by the
/// clock's low bits (no random generator needed for this).
async fn backoff(attempt: u32) {
    let spread = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos() >> 10));
    let base = u64::from(attempt.min(20));
    let millis = base + spread % (base + 1);
    tokio::time::sleep(Duration::from_millis(millis)).await;
}

/// Moves driver errors out of a transaction body's result, so that [`run`] sees their labels
/// and retries transient ones; other errors stay outcomes that abort the transaction.
pub(crate) fn surface<T>(result: Result<T>) -> mongodb::error::Result<Result<T>> {
    match result {
        Err(Error::Mongo { source, .. }) => Err(*source),
        other => Ok(other),
    }
}
