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

    /// Runs the writes with `session`. An error aborts the transaction; a driver error labelled
    /// `TransientTransactionError` then retries it, any other error is returned as is.
    fn run(&self, session: &mut ClientSession)
        -> impl Future<Output = Result<Self::Output>> + Send;
}

/// Runs `op` in a transaction on `client`; `collection` (the parent collection) names errors of
/// the session and the commit, the operations name their own.
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
            Ok(output) => output,
            Err(error) => {
                // Aborting can fail only if the server is gone; the transaction then dies with
                // the session, so the error is still the right thing to report.
                let _ = session.abort_transaction().await;
                let transient = error
                    .mongo_error()
                    .is_some_and(|e| e.contains_label(TRANSIENT_TRANSACTION_ERROR));
                if !transient {
                    return Err(error);
                }
                if started.elapsed() >= DEADLINE {
                    return Err(error.into_timeout(DEADLINE));
                }
                tracing::debug!(attempt, %error, "transient transaction error, retrying");
                backoff(attempt).await;
                continue 'transaction;
            }
        };
        loop {
            match session.commit_transaction().await {
                Ok(()) => return Ok(output),
                Err(e) if started.elapsed() >= DEADLINE => {
                    return Err(mongo(e).into_timeout(DEADLINE))
                }
                Err(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => {
                    tracing::debug!(error = %e, "unknown commit result, retrying the commit");
                    backoff(attempt).await;
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
