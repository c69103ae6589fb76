//! [`Action`]: an operation that runs when awaited, optionally in the caller's session.

use std::fmt;
use std::future::IntoFuture;

use futures::future::BoxFuture;
use mongodb::ClientSession;

use crate::error::Result;

type Run<'a, T> =
    Box<dyn FnOnce(Option<&'a mut ClientSession>) -> BoxFuture<'a, Result<T>> + Send + 'a>;

/// A write (or read) that runs when awaited, as the driver's own actions do.
///
/// `reviews.push(&id, &review).await` runs on its own: in a transaction of its own on a replica
/// set, in order on a standalone server. `.session(&mut session)` runs it in the caller's
/// session instead:
///
/// - a session **in a transaction** (`session.start_transaction()`): the operation joins it and
///   neither commits nor retries it: the caller's commit makes it visible, the caller's abort
///   undoes all of it, and the caller retries on `TransientTransactionError` as the driver
///   documents;
/// - a session **not in a transaction**: the operation runs as it would alone (its own
///   transaction on a replica set, in order on a standalone server), within the caller's session,
///   so it is causally ordered after the caller's earlier operations.
///
/// Sessions on a standalone server work in the second way; a standalone server cannot start a
/// transaction, so the first cannot arise there.
///
/// ```no_run
/// # use subset_runtime as subset;
/// # async fn demo(client: mongodb::Client, reviews: subset::raw::Children<'_>, id: subset::bson::Bson, review: subset::bson::Document) -> Result<(), Box<dyn std::error::Error>> {
/// let mut session = client.start_session().await?;
/// session.start_transaction().await?;
/// // … the caller's own writes, with `.session(&mut session)` …
/// reviews.push(&id, vec![review]).session(&mut session).await?;
/// session.commit_transaction().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "an action does nothing until it is awaited"]
pub struct Action<'a, T> {
    session: Option<&'a mut ClientSession>,
    run: Run<'a, T>,
}

impl<'a, T> Action<'a, T> {
    pub(crate) fn new(
        run: impl FnOnce(Option<&'a mut ClientSession>) -> BoxFuture<'a, Result<T>> + Send + 'a,
    ) -> Self {
        Action {
            session: None,
            run: Box::new(run),
        }
    }

    /// Runs the operation in `session` (see [`Action`]).
    pub fn session(mut self, session: &'a mut ClientSession) -> Self {
        self.session = Some(session);
        self
    }
}

impl<'a, T: 'a> IntoFuture for Action<'a, T> {
    type Output = Result<T>;
    type IntoFuture = BoxFuture<'a, Result<T>>;

    fn into_future(self) -> Self::IntoFuture {
        (self.run)(self.session)
    }
}

impl<T> fmt::Debug for Action<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Action")
            .field("session", &self.session.is_some())
            .finish_non_exhaustive()
    }
}
