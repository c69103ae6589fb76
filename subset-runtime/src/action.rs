//! [`Action`]: an operation that runs when awaited, optionally in the caller's session.

use std::fmt;
use std::future::{Future, IntoFuture};

use futures::future::BoxFuture;
use mongodb::ClientSession;
use tracing::Instrument;

use crate::bson::Bson;
use crate::error::{Error, Result};

/// One call of the library as a value: its arguments, what it refuses before sending anything,
/// and how it runs. [`Action`] runs any of them, in the span the operation names.
///
/// `'s` is the caller's session: an output may hold it (a stream read in it).
pub(crate) trait Operation<'s>: Send + Sync + 's {
    type Output: Send + 's;

    /// The span the operation runs in (see [`span!`](crate::action::span)).
    fn span(&self) -> tracing::Span;

    /// What the operation refuses before it sends anything ([`Error::InvalidId`], a page size,
    /// an invalid patch…). Nothing by default.
    fn check(&self) -> Result<()> {
        Ok(())
    }

    /// Sends the operation, in `caller`'s session if given; `check` has passed.
    fn execute(
        self,
        caller: Option<&'s mut ClientSession>,
    ) -> impl Future<Output = Result<Self::Output>> + Send;
}

/// Runs `operation`: its checks, then the operation.
pub(crate) async fn run<'s, O: Operation<'s>>(
    operation: O,
    caller: Option<&'s mut ClientSession>,
) -> Result<O::Output> {
    operation.check()?;
    operation.execute(caller).await
}

/// The span of one call, named and described by OpenTelemetry's database conventions, so that
/// a call shows as the parent of the driver commands it sends: `span!("subset.push", store,
/// field, parent)`. The parent `_id` is recorded when it is an ObjectId or a number (see
/// [`loggable_id`]). The fields an operation or the executor records later are declared here,
/// empty: a field a span was not created with is dropped when recorded.
macro_rules! span {
    ($name:literal, $store:expr, $field:expr, $parent:expr) => {{
        let store: &$crate::engine::RawStore = $store;
        let span = ::tracing::info_span!(
            $name,
            db.system.name = "mongodb",
            db.namespace = store.database().name(),
            db.collection.name = store.collection_name(),
            db.operation.name = $name,
            subset.field = $field,
            subset.parent = ::tracing::field::Empty,
            subset.children = ::tracing::field::Empty,
            subset.page_size = ::tracing::field::Empty,
            subset.attempts = ::tracing::field::Empty,
            subset.lease_waits = ::tracing::field::Empty,
        );
        let parent: Option<&$crate::bson::Bson> = $parent;
        // Nothing to format for a span no subscriber takes.
        if let Some(parent) = parent.filter(|_| !span.is_disabled()) {
            if let Some(parent) = $crate::action::loggable_id(parent) {
                span.record("subset.parent", parent.as_str());
            }
        }
        span
    }};
}
pub(crate) use span;

/// `id` as a span records it: an ObjectId as its hex, a number as written; `None` for any other
/// `_id`, since a string, or a document or array holding one, may be personal data (an e-mail
/// address as `_id`).
pub(crate) fn loggable_id(id: &Bson) -> Option<String> {
    match id {
        Bson::ObjectId(id) => Some(id.to_hex()),
        Bson::Int32(n) => Some(n.to_string()),
        Bson::Int64(n) => Some(n.to_string()),
        _ => None,
    }
}

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
    /// The action that runs `operation`: its checks, then the operation, in its span.
    pub(crate) fn of<O: Operation<'a, Output = T>>(operation: O) -> Self
    where
        T: 'a,
    {
        Action {
            session: None,
            run: Box::new(move |session| {
                let span = operation.span();
                Box::pin(run(operation, session).instrument(span))
            }),
        }
    }

    /// The action that fails with `error` when awaited (an argument that did not serialize),
    /// sending nothing.
    pub(crate) fn refused(error: Error) -> Self
    where
        T: 'a,
    {
        Action {
            session: None,
            run: Box::new(move |_| Box::pin(async move { Err(error) })),
        }
    }

    /// `action`, or the action refused with its error: how a typed call whose arguments
    /// serialize (or not) becomes the BSON-level call.
    pub(crate) fn or_refused(action: Result<Self>) -> Self
    where
        T: 'a,
    {
        action.unwrap_or_else(Action::refused)
    }

    /// The action whose output is `f` of this one's: a typed call decoding what the BSON-level
    /// one read.
    pub(crate) fn map<U: 'a>(self, f: impl FnOnce(T) -> Result<U> + Send + 'a) -> Action<'a, U>
    where
        T: 'a,
    {
        let run = self.run;
        Action {
            session: self.session,
            run: Box::new(move |session| Box::pin(async move { run(session).await.and_then(f) })),
        }
    }

    /// Runs the operation in `session` if given.
    pub(crate) fn in_session(mut self, session: Option<&'a mut ClientSession>) -> Self {
        self.session = session;
        self
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
