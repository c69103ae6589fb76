//! The spans every call runs in, as a capturing subscriber sees them: named and described by
//! OpenTelemetry's database conventions, the parent `_id` only where it is safe to log, what the
//! call emits nested under its span, and contention (a transaction's attempts, the polls of a
//! lease held by another writer) on the span.
//!
//! The driver emits no `tracing` events here (its `tracing-unstable` feature is off), so what
//! nests under a call's span is the library's own spans and events; the driver's OpenTelemetry
//! spans, with its `opentelemetry` feature, take the call's span as their parent through
//! `tracing-opentelemetry` (see the guide's traces section).

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, DateTime, Document};
use common::{hold, replica_db, stores, Product, Review};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Child, PageRequest, Store, Subset, WriteMode};
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

/// A span as it was created and recorded afterwards.
#[derive(Debug)]
struct SpanSeen {
    name: &'static str,
    /// The index of its parent among the spans seen.
    parent: Option<usize>,
    fields: BTreeMap<String, String>,
}

/// An event, with the index of the span it was emitted in.
#[derive(Debug)]
struct EventSeen {
    span: Option<usize>,
    fields: BTreeMap<String, String>,
}

/// Everything one call emitted, in order.
#[derive(Debug, Default)]
struct Seen {
    spans: Vec<SpanSeen>,
    events: Vec<EventSeen>,
    /// The spans still open, by id (the registry reuses the ids of closed spans).
    open: HashMap<Id, usize>,
}

impl Seen {
    /// The one span named `name`.
    fn span(&self, name: &str) -> (usize, &SpanSeen) {
        let found: Vec<_> = self
            .spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name == name)
            .collect();
        assert_eq!(found.len(), 1, "one span `{name}` in {self:#?}");
        found[0]
    }

    /// Whether the span at `index` is `ancestor` or nested, at any depth, under it.
    fn within(&self, mut index: usize, ancestor: usize) -> bool {
        loop {
            if index == ancestor {
                return true;
            }
            match self.spans[index].parent {
                Some(parent) => index = parent,
                None => return false,
            }
        }
    }

    /// Asserts that everything the call emitted nests under its span, `call`, which is a root.
    fn all_within(&self, call: usize, what: &str) {
        assert_eq!(
            self.spans[call].parent, None,
            "{what}: the call's span is a root"
        );
        for (i, span) in self.spans.iter().enumerate() {
            assert!(
                self.within(i, call),
                "{what}: span `{}` is outside the call's span",
                span.name
            );
        }
        for event in &self.events {
            assert!(
                event.span.is_some_and(|s| self.within(s, call)),
                "{what}: event {:?} is outside the call's span",
                event.fields
            );
        }
    }

    /// The events whose message is `message`, with the span each was emitted in.
    fn events(&self, message: &str) -> Vec<&EventSeen> {
        self.events
            .iter()
            .filter(|e| e.fields.get("message").map(String::as_str) == Some(message))
            .collect()
    }
}

/// The fields of a span or an event, as text: strings as they are, numbers and the rest as
/// `Debug` writes them.
struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// A layer that keeps every span and event it sees.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .and_then(|p| seen.open.get(&p.id()).copied());
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let index = seen.spans.len();
        seen.spans.push(SpanSeen {
            name: attrs.metadata().name(),
            parent,
            fields,
        });
        seen.open.insert(id.clone(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(&index) = seen.open.get(id) {
            values.record(&mut Fields(&mut seen.spans[index].fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        let span = ctx
            .event_span(event)
            .and_then(|s| seen.open.get(&s.id()).copied());
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        seen.events.push(EventSeen { span, fields });
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        self.0.lock().unwrap().open.remove(&id);
    }
}

/// Awaits `call` with the capturing layer as the subscriber wherever the call is polled (the
/// test's runtime has several threads), and returns its output and what it emitted. The call
/// is turned into its future inside, since that is where its span is created.
async fn captured<T>(call: impl IntoFuture<Output = T>) -> (T, Seen) {
    let capture = Capture::default();
    let dispatch = Dispatch::new(Registry::default().with(capture.clone()));
    let output = async move { call.await }.with_subscriber(dispatch).await;
    let seen = std::mem::take(&mut *capture.0.lock().unwrap());
    (output, seen)
}

/// Asserts the OpenTelemetry fields of the call's span `name` and returns its index and fields.
fn call_span<'s>(
    seen: &'s Seen,
    name: &str,
    db: &str,
    collection: &str,
    field: Option<&str>,
) -> (usize, &'s BTreeMap<String, String>) {
    let (index, span) = seen.span(name);
    let fields = &span.fields;
    let get = |key: &str| fields.get(key).map(String::as_str);
    assert_eq!(get("db.system.name"), Some("mongodb"), "{name}: {fields:?}");
    assert_eq!(get("db.namespace"), Some(db), "{name}: {fields:?}");
    assert_eq!(
        get("db.collection.name"),
        Some(collection),
        "{name}: {fields:?}"
    );
    assert_eq!(get("db.operation.name"), Some(name), "{name}: {fields:?}");
    assert_eq!(get("subset.field"), field, "{name}: {fields:?}");
    seen.all_within(index, name);
    (index, fields)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_runs_in_one_span_named_by_the_database_conventions() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let db = store.database().name().to_owned();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = Product::named("lamp");
        let id = product.id.to_hex();
        let field = Some("recent_reviews");
        let span = |seen: &Seen, name: &str, field| {
            let what = format!("{mode:?} {name}");
            let (_, fields) = call_span(seen, name, &db, "products", field);
            assert_eq!(fields.get("subset.parent"), Some(&id), "{what}: {fields:?}");
            fields.clone()
        };
        // What the executor records on a write: the attempts of a transaction of ours, or the
        // polls of leases held by others.
        let contention = |fields: &BTreeMap<String, String>, name: &str| {
            let (attempts, waits) = (
                fields.get("subset.attempts"),
                fields.get("subset.lease_waits"),
            );
            match mode {
                WriteMode::Transactional => {
                    assert_eq!((attempts, waits), (Some(&"1".to_owned()), None), "{name}");
                }
                WriteMode::Ordered => {
                    assert_eq!((attempts, waits), (None, Some(&"0".to_owned())), "{name}");
                }
            }
        };

        let (inserted, seen) = captured(store.insert(&product)).await;
        inserted.unwrap();
        span(&seen, "subset.insert", None);

        let review = Review::at(1_000);
        let (pushed, seen) = captured(reviews.push(&product.id, &review)).await;
        pushed.unwrap();
        let fields = span(&seen, "subset.push", field);
        assert_eq!(fields.get("subset.children").map(String::as_str), Some("1"));
        contention(&fields, "push");

        let (page, seen) = captured(reviews.page(&product.id, &PageRequest::first(5))).await;
        assert_eq!(page.unwrap().items.len(), 1, "{mode:?}");
        let fields = span(&seen, "subset.page", field);
        assert_eq!(
            fields.get("subset.page_size").map(String::as_str),
            Some("5")
        );
        assert_eq!(
            fields.get("subset.attempts"),
            None,
            "{mode:?}: a read retries nothing"
        );

        let (got, seen) = captured(store.get(&product.id)).await;
        assert_eq!(got.unwrap().unwrap().total_reviews, 1, "{mode:?}");
        span(&seen, "subset.get", None);

        let patch = reviews
            .patch(&product.id, &review.id)
            .set(Review::RATING, 5);
        let (patched, seen) = captured(patch).await;
        patched.unwrap();
        let fields = span(&seen, "subset.patch", field);
        contention(&fields, "patch");

        let (reconciled, seen) = captured(reviews.reconcile(&product.id)).await;
        reconciled.unwrap();
        span(&seen, "subset.reconcile", field);

        let (removed, seen) = captured(reviews.remove(&product.id, &review.id)).await;
        removed.unwrap();
        let fields = span(&seen, "subset.remove", field);
        contention(&fields, "remove");
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Line {
    #[serde(rename = "_id")]
    id: ObjectId,
    at: DateTime,
}

impl Line {
    fn new() -> Line {
        Line {
            id: ObjectId::new(),
            at: DateTime::now(),
        }
    }
}

/// A parent keyed by a number: its `_id` says nothing of anyone.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "shelves")]
struct Shelf {
    #[serde(rename = "_id")]
    id: i64,
    #[subset(child = "shelf_lines", keep = 2, sort = "at desc")]
    latest: Vec<Line>,
}

/// A parent keyed by a string, an e-mail address say: its `_id` stays out of traces.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "members")]
struct Member {
    #[serde(rename = "_id")]
    id: String,
    #[subset(child = "member_lines", keep = 2, sort = "at desc")]
    latest: Vec<Line>,
}

#[tokio::test(flavor = "multi_thread")]
async fn the_parent_id_is_recorded_for_a_number_and_never_for_a_string() {
    for store in stores::<Shelf>().await {
        let mode = store.mode().await.unwrap();
        let shelf = Shelf {
            id: 7,
            latest: Vec::new(),
        };
        store.insert(&shelf).await.unwrap();
        let lines = store.children(Shelf::LATEST);
        let (pushed, seen) = captured(lines.push(&7, &Line::new())).await;
        pushed.unwrap();
        let db = store.database().name();
        let (_, fields) = call_span(&seen, "subset.push", db, "shelves", Some("latest"));
        assert_eq!(
            fields.get("subset.parent").map(String::as_str),
            Some("7"),
            "{mode:?}"
        );
    }
    for store in stores::<Member>().await {
        let mode = store.mode().await.unwrap();
        let address = "someone@example.com".to_owned();
        let member = Member {
            id: address.clone(),
            latest: Vec::new(),
        };
        store.insert(&member).await.unwrap();
        let lines = store.children(Member::LATEST);
        let db = store.database().name();
        let (pushed, seen) = captured(lines.push(&address, &Line::new())).await;
        pushed.unwrap();
        let (_, fields) = call_span(&seen, "subset.push", db, "members", Some("latest"));
        assert_eq!(fields.get("subset.parent"), None, "{mode:?}: {fields:?}");
        let (page, seen) = captured(lines.page(&address, &PageRequest::first(2))).await;
        assert_eq!(page.unwrap().items.len(), 1);
        let (_, fields) = call_span(&seen, "subset.page", db, "members", Some("latest"));
        assert_eq!(fields.get("subset.parent"), None, "{mode:?}: {fields:?}");
        for event in &seen.events {
            assert!(
                !event.fields.values().any(|v| v.contains(&address)),
                "{mode:?}: an event names the address: {:?}",
                event.fields
            );
        }
    }
}

/// How long the other writer holds the parent before it lets go.
const HELD: Duration = Duration::from_millis(300);

/// A product with one review, and the review.
async fn reviewed(store: &Store<Product>) -> (Product, Review) {
    let product = Product::named("kettle");
    store.insert(&product).await.unwrap();
    let review = Review::at(5_000);
    store
        .children(Product::RECENT_REVIEWS)
        .push(&product.id, &review)
        .await
        .unwrap();
    (product, review)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_that_conflicts_is_retried_and_its_span_counts_the_attempts() {
    let store = Store::<Product>::new(&replica_db().await);
    assert_eq!(store.mode().await.unwrap(), WriteMode::Transactional);
    let (product, review) = reviewed(&store).await;
    // Another transaction holds the parent: every write of it conflicts until that commits.
    let mut holder = hold(&store, &product.id).await;
    let reviews = store.children(Product::RECENT_REVIEWS);
    let patch = captured(
        reviews
            .patch(&product.id, &review.id)
            .set(Review::RATING, 1),
    );
    let let_go = async {
        tokio::time::sleep(HELD).await;
        holder.commit_transaction().await.unwrap();
    };
    let ((patched, seen), ()) = tokio::join!(patch, let_go);
    patched.unwrap();

    let db = store.database().name();
    let (call, fields) = call_span(
        &seen,
        "subset.patch",
        db,
        "products",
        Some("recent_reviews"),
    );
    let attempts: u32 = fields["subset.attempts"].parse().unwrap();
    assert!(
        attempts > 1,
        "a conflicting transaction is retried: {fields:?}"
    );
    let retries = seen.events("transient transaction error, retrying");
    assert_eq!(
        retries.len() as u32,
        attempts - 1,
        "an event for each retry: {seen:#?}"
    );
    assert!(retries.iter().all(|e| e.span == Some(call)));
    let stored = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(
        stored.recent_reviews[0].rating, 1,
        "the patch landed once retried"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_held_by_another_writer_is_waited_for_and_its_span_counts_the_waits() {
    let store = Store::<Product>::with_options(
        &replica_db().await,
        subset::StoreOptions::new().mode(WriteMode::Ordered),
    );
    let (product, review) = reviewed(&store).await;
    // Another process's writer holds the parent's lease (for a minute, unless it gives it back)
    // and gives it back after a while.
    let parents = store.database().collection::<Document>("products");
    let until = DateTime::from_millis(DateTime::now().timestamp_millis() + 60_000);
    parents
        .update_one(
            doc! { "_id": product.id },
            doc! { "$set": { "_subset.l": { "o": ObjectId::new(), "u": until } } },
        )
        .await
        .unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let patch = captured(
        reviews
            .patch(&product.id, &review.id)
            .set(Review::RATING, 1),
    );
    let give_back = async {
        tokio::time::sleep(HELD).await;
        parents
            .update_one(
                doc! { "_id": product.id },
                doc! { "$unset": { "_subset.l": "" } },
            )
            .await
            .unwrap();
    };
    let ((patched, seen), ()) = tokio::join!(patch, give_back);
    patched.unwrap();

    let db = store.database().name();
    let (call, fields) = call_span(
        &seen,
        "subset.patch",
        db,
        "products",
        Some("recent_reviews"),
    );
    let waits: u32 = fields["subset.lease_waits"].parse().unwrap();
    assert!(waits > 0, "the lease was polled while held: {fields:?}");
    assert_eq!(
        fields.get("subset.attempts"),
        None,
        "no transaction: {fields:?}"
    );
    let held = seen.events("a parent's lease is held by another writer; waiting for it");
    assert_eq!(held.len(), 1, "one event for the held lease: {seen:#?}");
    assert_eq!(held[0].span, Some(call));
    let stored = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(
        stored.recent_reviews[0].rating, 1,
        "the patch landed once the lease was free"
    );
}
