//! Pages both ways, Relay-shaped: `first/after` and `last/before` read the same keyset index in
//! opposite directions, serve every child exactly once across the embedded→collection seam,
//! and come back in the subset's order; in both write modes.

use crate::common;

use std::cmp::Ordering;
use std::sync::atomic::{AtomicBool, Ordering as Atomic};
use std::sync::Arc;
use subset::bson;

use bson::oid::ObjectId;
use bson::{Bson, DateTime};
use common::*;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use subset::{Child, Children, Cursor, Error, Page, PageRequest, Store, Subset};

/// Every page of `size` read forward from the first, as served.
async fn forward_pages<P: Subset, C: Child>(
    handle: &Children<'_, P, C>,
    id: &P::Id,
    size: u32,
) -> Vec<Page<C>> {
    let mut pages = Vec::new();
    let mut request = PageRequest::first(size);
    loop {
        let page = handle.page(id, &request).await.unwrap();
        assert!(page.items.len() <= size as usize);
        let next = page.next.clone();
        pages.push(page);
        match next {
            Some(cursor) => request = PageRequest::after(cursor, size),
            None => return pages,
        }
    }
}

/// Every page of `size` read backward from `request` (a `last` or `before` request), as served
/// (the last page first).
async fn backward_pages<P: Subset, C: Child>(
    handle: &Children<'_, P, C>,
    id: &P::Id,
    mut request: PageRequest,
) -> Vec<Page<C>> {
    let size = request.size();
    let mut pages = Vec::new();
    loop {
        let page = handle.page(id, &request).await.unwrap();
        assert!(page.items.len() <= size as usize);
        let previous = page.previous.clone();
        pages.push(page);
        match previous {
            // Through the token, as a web client would.
            Some(cursor) => {
                request = PageRequest::before(cursor.encode().parse().unwrap(), size);
            }
            None => return pages,
        }
    }
}

/// The children of `pages` in the order they were visited: page after page, and within a page
/// in the order the page holds them.
fn visited<C: Clone>(pages: &[Page<C>]) -> Vec<C> {
    pages.iter().flat_map(|p| p.items.iter().cloned()).collect()
}

/// The children of backward `pages` in the subset's order: the last page read comes first.
fn in_order<C: Clone>(pages: &[Page<C>]) -> Vec<C> {
    pages
        .iter()
        .rev()
        .flat_map(|p| p.items.iter().cloned())
        .collect()
}

fn ids(reviews: &[Review]) -> Vec<ObjectId> {
    reviews.iter().map(|r| r.id).collect()
}

/// Checks what every page must hold whatever happened between pages: the items in the subset's
/// order, one cursor per item at its position, `previous` and `next` the end cursors.
fn assert_well_formed(page: &Page<Review>) {
    let order = |a: &Review, b: &Review| Product::expected_order("recent_reviews", a, b);
    assert!(
        page.items
            .windows(2)
            .all(|w| order(&w[0], &w[1]) == Ordering::Less),
        "a page in the subset's order: {:?}",
        ids(&page.items)
    );
    assert_eq!(page.cursors().len(), page.items.len());
    assert_eq!(page.has_next(), page.next.is_some());
    assert_eq!(page.has_previous(), page.previous.is_some());
    if let Some(next) = &page.next {
        assert_eq!(Some(next), page.cursors().last());
    }
    if let Some(previous) = &page.previous {
        assert_eq!(Some(previous), page.cursors().first());
    }
}

/// A product with `n` reviews on `n / 3 + 1` distinct dates (many ties), pushed in a scrambled
/// order; returns it with the ids in the subset's order, sorted here, not by the server.
async fn product_with(store: &Store<Product>, n: i64) -> (Product, Vec<ObjectId>) {
    let product = Product::named("both ways");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let batch: Vec<Review> = (0..n)
        .map(|i| Review::at((i * 7_919) % (n / 3 + 1)))
        .collect();
    for chunk in batch.chunks(50) {
        reviews.push_many(&product.id, chunk).await.unwrap();
    }
    let expected = collection_ids(&reviews, store, &Bson::ObjectId(product.id))
        .await
        .into_iter()
        .map(|b| b.as_object_id().unwrap())
        .collect();
    (product, expected)
}

#[tokio::test(flavor = "multi_thread")]
async fn forward_then_backward_visits_the_same_children_in_reverse() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let (product, expected) = product_with(&store, 61).await;
        let reviews = store.children(Product::RECENT_REVIEWS);
        let mut reversed = expected.clone();
        reversed.reverse();
        for size in [1, 2, 4, 5, 6, 7, 20, 61, 100] {
            let forward = forward_pages(&reviews, &product.id, size).await;
            forward.iter().for_each(assert_well_formed);
            assert_eq!(ids(&visited(&forward)), expected, "{mode:?}, size {size}");
            assert!(!forward[0].has_previous(), "the first page has none before");
            assert!(forward[1..].iter().all(Page::has_previous));

            // Back from the last forward page: its own items, then every page before it.
            let last = forward.last().unwrap();
            let mut back = vec![last.clone()];
            if let Some(previous) = &last.previous {
                back.extend(
                    backward_pages(
                        &reviews,
                        &product.id,
                        PageRequest::before(previous.clone(), size),
                    )
                    .await,
                );
            }
            back.iter().for_each(assert_well_formed);
            let mut walked: Vec<ObjectId> = Vec::new();
            for page in &back {
                walked.extend(ids(&page.items).iter().rev());
            }
            assert_eq!(walked, reversed, "{mode:?}, size {size}: back from the end");
            assert_eq!(ids(&in_order(&back)), expected);

            // From `last(size)`: the same children, the last page exactly `size` long.
            let from_end = backward_pages(&reviews, &product.id, PageRequest::last(size)).await;
            from_end.iter().for_each(assert_well_formed);
            assert_eq!(
                ids(&in_order(&from_end)),
                expected,
                "{mode:?}, last({size})"
            );
            let n = expected.len().min(size as usize);
            assert_eq!(ids(&from_end[0].items), expected[expected.len() - n..]);
            assert!(!from_end[0].has_next(), "last() ends at the last child");
            assert!(from_end[1..].iter().all(Page::has_next));
            assert!(!from_end.last().unwrap().has_previous());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn both_walks_stay_exact_while_children_are_pushed_between_and_during_pages() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let (product, expected) = product_with(&store, 150).await;
        let reviews = store.children(Product::RECENT_REVIEWS);

        // A writer pushing children that rank anywhere (newest, oldest, among the originals)
        // for as long as the walks go on.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (store, stop, id) = (store.clone(), stop.clone(), product.id);
            tokio::spawn(async move {
                let reviews = store.children(Product::RECENT_REVIEWS);
                let mut round = 0_i64;
                while !stop.load(Atomic::Relaxed) && round < 300 {
                    round += 1;
                    let millis = match round % 3 {
                        0 => 1_000_000 + round,
                        1 => -round,
                        _ => round % 51,
                    };
                    reviews.push(&id, &Review::at(millis)).await.unwrap();
                }
                round
            })
        };

        let mut forward = Vec::new();
        let mut request = PageRequest::first(5);
        let mut round = 0_i64;
        loop {
            let page = reviews.page(&product.id, &request).await.unwrap();
            assert_well_formed(&page);
            // And between pages, one child at each end.
            round += 1;
            reviews
                .push_many(
                    &product.id,
                    &[Review::at(2_000_000 + round), Review::at(-1_000 - round)],
                )
                .await
                .unwrap();
            let next = page.next.clone();
            forward.push(page);
            match next {
                Some(next) => request = PageRequest::after(next, 9),
                None => break,
            }
        }
        let last_page = forward.last().unwrap();
        let start = last_page.cursors().last().cloned().unwrap();
        let last_served = last_page.items.last().unwrap().id;
        let mut back = Vec::new();
        let mut request = PageRequest::before(start, 8);
        loop {
            let page = reviews.page(&product.id, &request).await.unwrap();
            assert_well_formed(&page);
            round += 1;
            reviews
                .push_many(
                    &product.id,
                    &[Review::at(2_000_000 + round), Review::at(-1_000 - round)],
                )
                .await
                .unwrap();
            let previous = page.previous.clone();
            back.push(page);
            match previous {
                Some(previous) => request = PageRequest::before(previous, 6),
                None => break,
            }
        }
        stop.store(true, Atomic::Relaxed);
        let pushed = writer.await.unwrap();
        assert!(pushed > 0, "the writer ran");

        for (walk, seen) in [
            ("forward", ids(&visited(&forward))),
            ("backward", ids(&in_order(&back))),
        ] {
            let mut unique = seen.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), seen.len(), "{mode:?} {walk}: no child twice");
            let originals: Vec<ObjectId> = seen
                .iter()
                .filter(|id| expected.contains(id))
                .copied()
                .collect();
            // The backward walk starts before the forward walk's last child, which the
            // forward walk's last page served.
            let want: Vec<ObjectId> = match walk {
                "forward" => expected.clone(),
                _ => expected
                    .iter()
                    .filter(|id| **id != last_served)
                    .copied()
                    .collect(),
            };
            assert_eq!(
                originals, want,
                "{mode:?} {walk}: every original once, in order"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn backward_edge_cases() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        // 12 children with distinct dates, `keep = 5`: the head is expected[..5].
        let product = Product::named("edges");
        store.insert(&product).await.unwrap();
        let batch: Vec<Review> = (0..12).map(|i| Review::at(100 + i * 10)).collect();
        reviews.push_many(&product.id, &batch).await.unwrap();
        let expected = ids(&visited(&forward_pages(&reviews, &product.id, 100).await));
        assert_eq!(expected.len(), 12);
        let all = reviews
            .page(&product.id, &PageRequest::first(12))
            .await
            .unwrap();
        let at = |i: usize| all.cursors().get(i).unwrap().clone();

        // Before the first child: an empty page, nothing before it, no cursor.
        let page = reviews
            .page(&product.id, &PageRequest::before(at(0), 5))
            .await
            .unwrap();
        assert!(page.items.is_empty(), "{mode:?}");
        assert!(!page.has_previous() && !page.has_next());
        assert_eq!(
            (page.cursors().first(), page.cursors().last()),
            (None, None)
        );

        // A page that ends inside the embedded subset, then the one that reaches its first.
        let page = reviews
            .page(&product.id, &PageRequest::before(at(3), 2))
            .await
            .unwrap();
        assert_eq!(ids(&page.items), expected[1..3], "{mode:?}");
        assert!(page.has_previous() && page.has_next());
        let first = reviews
            .page(
                &product.id,
                &PageRequest::before(page.previous.clone().unwrap(), 5),
            )
            .await
            .unwrap();
        assert_eq!(ids(&first.items), expected[..1]);
        assert!(!first.has_previous(), "nothing before the first child");
        // A page across the seam: the end of the head and the start of the collection.
        let page = reviews
            .page(&product.id, &PageRequest::before(at(8), 5))
            .await
            .unwrap();
        assert_eq!(ids(&page.items), expected[3..8]);
        // Exactly the head, up to its first child: nothing before.
        let page = reviews
            .page(&product.id, &PageRequest::before(at(5), 5))
            .await
            .unwrap();
        assert_eq!(ids(&page.items), expected[..5]);
        assert!(!page.has_previous());

        // last(n): n above, at and below the total.
        for (n, has_previous) in [(50, false), (12, false), (11, true), (1, true)] {
            let page = reviews
                .page(&product.id, &PageRequest::last(n))
                .await
                .unwrap();
            assert_well_formed(&page);
            let from = 12 - (n as usize).min(12);
            assert_eq!(ids(&page.items), expected[from..], "last({n})");
            assert_eq!(page.has_previous(), has_previous, "last({n})");
            assert!(!page.has_next(), "last({n})");
        }

        // A backward page turns forward again from its end cursor, and any child's cursor
        // continues either way.
        let page = reviews
            .page(&product.id, &PageRequest::before(at(6), 3))
            .await
            .unwrap();
        assert_eq!(ids(&page.items), expected[3..6]);
        let after = reviews
            .page(
                &product.id,
                &PageRequest::after(page.next.clone().unwrap(), 3),
            )
            .await
            .unwrap();
        assert_eq!(ids(&after.items), expected[6..9]);
        let after = reviews
            .page(
                &product.id,
                &PageRequest::after(page.cursors().get(1).unwrap().clone(), 2),
            )
            .await
            .unwrap();
        assert_eq!(ids(&after.items), expected[5..7]);
        // The end cursor of the last page: nothing after it (yet).
        let end = reviews
            .page(&product.id, &PageRequest::after(at(11), 3))
            .await
            .unwrap();
        assert!(end.items.is_empty() && !end.has_next() && !end.has_previous());

        // No children: an empty page both ways; no parent: ParentNotFound.
        let empty = Product::named("empty");
        store.insert(&empty).await.unwrap();
        for request in [PageRequest::last(3), PageRequest::first(30)] {
            let page = reviews.page(&empty.id, &request).await.unwrap();
            assert!(page.items.is_empty() && !page.has_next() && !page.has_previous());
            let err = reviews.page(&ObjectId::new(), &request).await.unwrap_err();
            assert!(matches!(err, Error::ParentNotFound { .. }), "{err}");
        }
        for size in [0, 10_001] {
            let err = reviews
                .page(&product.id, &PageRequest::last(size))
                .await
                .unwrap_err();
            assert!(matches!(err, Error::InvalidPageSize { .. }), "{err}");
        }
        // A cursor of one parent is refused backward too.
        let err = reviews
            .page(&empty.id, &PageRequest::before(at(3), 2))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidCursor { .. }), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_no_keyset_reaches_is_named_at_either_end_of_a_walk() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (product, expected) = product_with(&store, 12).await;
    let cursor = reviews
        .page(&product.id, &PageRequest::first(12))
        .await
        .unwrap()
        .cursors()
        .get(6)
        .cloned()
        .unwrap();
    // A date stored as a string by another writer: MongoDB sorts every string before every
    // date, so in `date desc` it is the last child, and `date > d` / `date < d` never match it.
    let odd = ObjectId::new();
    store
        .database()
        .collection::<bson::Document>("reviews")
        .insert_one(bson::doc! {
            "_id": odd, "product_id": product.id, "author": "x", "rating": 1, "date": "2024",
        })
        .await
        .unwrap();
    let named = |err: Error| match err {
        Error::MalformedChild { id, field, .. } => {
            assert_eq!((*id, field.as_str()), (Bson::ObjectId(odd), "date"));
        }
        other => panic!("expected MalformedChild, got {other:?}"),
    };
    // Backward from the middle: the pages before the cursor are served, and the walk that
    // reaches the first child ends with the child it could not place, named.
    let page = reviews
        .page(&product.id, &PageRequest::before(cursor.clone(), 3))
        .await
        .unwrap();
    assert_eq!(ids(&page.items), expected[3..6]);
    let err = reviews
        .page(&product.id, &PageRequest::before(page.previous.unwrap(), 3))
        .await
        .unwrap_err();
    named(err);
    // Forward from the same cursor: the same at the other end.
    let err = reviews
        .page(&product.id, &PageRequest::after(cursor, 10))
        .await
        .unwrap_err();
    named(err);
    // `last(n)` reads it first.
    named(
        reviews
            .page(&product.id, &PageRequest::last(2))
            .await
            .unwrap_err(),
    );
}

/// A first page from the embedded subset gives each child the cursor the same child has on a
/// page from the child collection, and an embedded child that no cursor can place is an error
/// of the read that names it.
#[tokio::test(flavor = "multi_thread")]
async fn the_first_page_from_the_subset_has_the_collections_cursors() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (product, expected) = product_with(&store, 12).await;
    // `keep = 5`: a first page of 4 is the subset's, one of 12 the collection's.
    let head = reviews
        .page(&product.id, &PageRequest::first(4))
        .await
        .unwrap();
    let all = reviews
        .page(&product.id, &PageRequest::first(12))
        .await
        .unwrap();
    assert_eq!(ids(&head.items), expected[..4]);
    assert_eq!(head.next.as_ref(), all.cursors().get(3));
    assert_eq!(head.cursors(), &all.cursors()[..4]);
    assert_eq!(head.clone().map(|r| r.id).cursors(), &all.cursors()[..4]);
    assert_well_formed(&head);
    // The next page continues from the last child's cursor, as from `next`.
    let after = head.cursors().last().cloned().unwrap();
    let next = reviews
        .page(&product.id, &PageRequest::after(after, 4))
        .await
        .unwrap();
    assert_eq!(ids(&next.items), expected[4..8]);

    // The second embedded copy loses its date behind the store's back: the raw first page,
    // which decodes anything, names it.
    let second = expected[1];
    store
        .database()
        .collection::<bson::Document>("products")
        .update_one(
            bson::doc! { "_id": product.id },
            bson::doc! { "$unset": { "recent_reviews.1.date": "" } },
        )
        .await
        .unwrap();
    match reviews
        .raw()
        .page(&Bson::ObjectId(product.id), &PageRequest::first(4))
        .await
    {
        Err(Error::MalformedChild {
            id, field, problem, ..
        }) => {
            assert_eq!((*id, field.as_str()), (Bson::ObjectId(second), "date"));
            assert!(problem.contains("missing or null"), "{problem}");
        }
        other => panic!("expected MalformedChild, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn equal_sort_keys_are_ordered_by_id_and_served_once_both_ways() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = Product::named("ties");
        store.insert(&product).await.unwrap();
        // Every child on the same date: only `_id` orders them.
        let batch: Vec<Review> = (0..23).map(|_| Review::at(42)).collect();
        reviews.push_many(&product.id, &batch).await.unwrap();
        let mut expected = ids(&batch);
        expected.sort_by(|a, b| b.cmp(a));
        for size in [1, 2, 3, 5, 6, 22, 23, 24] {
            let forward = forward_pages(&reviews, &product.id, size).await;
            assert_eq!(ids(&visited(&forward)), expected, "{mode:?} forward {size}");
            let back = backward_pages(&reviews, &product.id, PageRequest::last(size)).await;
            assert_eq!(ids(&in_order(&back)), expected, "{mode:?} backward {size}");
        }
    }
}

/// A model with two sort keys in opposite directions, where one comparison operator for both
/// keys (or a predicate without the equality on the first key) pages wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Ticket {
    #[serde(rename = "_id")]
    id: ObjectId,
    priority: i32,
    opened: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "queues")]
struct Queue {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "tickets", keep = 3, sort = "priority desc, opened asc")]
    open: Vec<Ticket>,
}

/// `priority desc, opened asc`, then `_id` in the direction of the last key.
fn ticket_order(a: &Ticket, b: &Ticket) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.opened.cmp(&b.opened))
        .then(a.id.cmp(&b.id))
}

#[tokio::test(flavor = "multi_thread")]
async fn two_sort_keys_in_mixed_directions_page_right_both_ways() {
    for store in stores::<Queue>().await {
        let mode = store.mode().await.unwrap();
        store.ensure_indexes().await.unwrap();
        let queue = Queue {
            id: ObjectId::new(),
            open: Vec::new(),
        };
        store.insert(&queue).await.unwrap();
        let tickets = store.children(Queue::OPEN);
        // 4 priorities × 4 dates, each pair two or three times: ties on one key, on both.
        let batch: Vec<Ticket> = (0..40)
            .map(|i| Ticket {
                id: ObjectId::new(),
                priority: (i * 7) % 4,
                opened: DateTime::from_millis(i64::from((i * 5) % 4) * 1_000),
            })
            .collect();
        tickets.push_many(&queue.id, &batch).await.unwrap();
        let mut expected = batch.clone();
        expected.sort_by(ticket_order);
        let ids = |t: &[Ticket]| t.iter().map(|t| t.id).collect::<Vec<_>>();
        for size in [1, 2, 3, 4, 7, 40] {
            let forward = forward_pages(&tickets, &queue.id, size).await;
            assert_eq!(
                ids(&visited(&forward)),
                ids(&expected),
                "{mode:?} forward {size}"
            );
            let back = backward_pages(&tickets, &queue.id, PageRequest::last(size)).await;
            for page in &back {
                assert!(
                    page.items
                        .windows(2)
                        .all(|w| ticket_order(&w[0], &w[1]) == Ordering::Less),
                    "{mode:?}: a backward page in display order"
                );
            }
            assert_eq!(
                ids(&in_order(&back)),
                ids(&expected),
                "{mode:?} backward {size}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cursors_and_pages_round_trip_through_serde() {
    let store = Store::<Product>::new(&replica_db().await);
    let (product, expected) = product_with(&store, 20).await;
    let reviews = store.children(Product::RECENT_REVIEWS);
    let page = reviews
        .page(&product.id, &PageRequest::first(7))
        .await
        .unwrap();
    // A cursor is its token in a struct a web framework reads from a query string.
    #[derive(Serialize, Deserialize)]
    struct Query {
        after: Option<Cursor>,
        first: u32,
    }
    let end = page.cursors().last().unwrap().clone();
    let json = serde_json::to_value(Query {
        after: Some(end.clone()),
        first: 7,
    })
    .unwrap();
    assert_eq!(json["after"], serde_json::Value::String(end.encode()));
    let query: Query = serde_json::from_value(json).unwrap();
    let second = reviews
        .page(
            &product.id,
            &PageRequest::after(query.after.unwrap(), query.first),
        )
        .await
        .unwrap();
    assert_eq!(ids(&second.items), expected[7..14]);
    let err = serde_json::from_str::<Query>(r#"{"after": "%%%", "first": 7}"#)
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("invalid page cursor: the token is not base64url"),
        "{err}"
    );

    // A whole page, as a JSON response and back.
    let json = serde_json::to_value(&second).unwrap();
    assert_eq!(json["has_next"], true);
    assert_eq!(json["has_previous"], true);
    assert_eq!(json["cursors"].as_array().unwrap().len(), 7);
    let back: Page<Review> = serde_json::from_value(json).unwrap();
    assert_eq!(back, second);
}

/// A GraphQL schema whose `reviews` field pages a product's reviews through `subset`.
#[cfg(feature = "async-graphql")]
mod graphql {
    use async_graphql::connection::{self, Connection};
    use async_graphql::{Context, EmptyMutation, EmptySubscription, Object, Schema, SimpleObject};
    use subset::bson::oid::ObjectId;
    use subset::{Cursor, PageRequest, Store};

    use super::{Product, Review};

    #[derive(SimpleObject)]
    pub struct ReviewNode {
        pub id: String,
        pub author: String,
    }

    pub struct Query;

    #[Object]
    impl Query {
        async fn reviews(
            &self,
            ctx: &Context<'_>,
            product: String,
            after: Option<String>,
            before: Option<String>,
            first: Option<i32>,
            last: Option<i32>,
        ) -> async_graphql::Result<Connection<Cursor, ReviewNode>> {
            let store = ctx.data::<Store<Product>>()?;
            let product: ObjectId = product.parse()?;
            connection::query(
                after,
                before,
                first,
                last,
                |after: Option<Cursor>, before, first, last| async move {
                    let request = match (after, before, first, last) {
                        (None, Some(before), _, last) => {
                            PageRequest::before(before, last.unwrap_or(10) as u32)
                        }
                        (None, None, None, Some(last)) => PageRequest::last(last as u32),
                        (Some(after), _, first, _) => {
                            PageRequest::after(after, first.unwrap_or(10) as u32)
                        }
                        (None, None, first, _) => PageRequest::first(first.unwrap_or(10) as u32),
                    };
                    let page = store
                        .children(Product::RECENT_REVIEWS)
                        .page(&product, &request)
                        .await?;
                    let page = page.map(|r: Review| ReviewNode {
                        id: r.id.to_hex(),
                        author: r.author,
                    });
                    Ok::<_, subset::Error>(page.into())
                },
            )
            .await
        }
    }

    pub fn schema(store: Store<Product>) -> Schema<Query, EmptyMutation, EmptySubscription> {
        Schema::build(Query, EmptyMutation, EmptySubscription)
            .data(store)
            .finish()
    }
}

#[cfg(feature = "async-graphql")]
#[tokio::test(flavor = "multi_thread")]
async fn a_relay_query_pages_both_ways_through_async_graphql() {
    let store = Store::<Product>::new(&replica_db().await);
    let (product, expected) = product_with(&store, 12).await;
    let hex = |ids: &[ObjectId]| ids.iter().map(|id| id.to_hex()).collect::<Vec<_>>();
    let schema = graphql::schema(store.clone());
    let run = |args: String| {
        let schema = schema.clone();
        let query = format!(
            "{{ reviews(product: \"{}\", {args}) {{ edges {{ cursor node {{ id }} }} \
             pageInfo {{ hasPreviousPage hasNextPage startCursor endCursor }} }} }}",
            product.id.to_hex()
        );
        async move {
            let response = schema.execute(query).await;
            assert!(response.errors.is_empty(), "{:?}", response.errors);
            serde_json::to_value(&response.data).unwrap()["reviews"].clone()
        }
    };
    let ids_of = |connection: &serde_json::Value| -> Vec<String> {
        connection["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"]["id"].as_str().unwrap().to_owned())
            .collect()
    };

    let last = run("last: 4".into()).await;
    assert_eq!(ids_of(&last), hex(&expected[8..]));
    assert_eq!(last["pageInfo"]["hasPreviousPage"], true);
    assert_eq!(last["pageInfo"]["hasNextPage"], false);
    assert_eq!(last["pageInfo"]["startCursor"], last["edges"][0]["cursor"]);
    let start = last["pageInfo"]["startCursor"].as_str().unwrap();
    let before = run(format!("last: 5, before: \"{start}\"")).await;
    assert_eq!(ids_of(&before), hex(&expected[3..8]));
    let end = before["pageInfo"]["endCursor"].as_str().unwrap();
    let after = run(format!("first: 2, after: \"{end}\"")).await;
    assert_eq!(ids_of(&after), hex(&expected[8..10]));
    let first = run("first: 3".into()).await;
    assert_eq!(ids_of(&first), hex(&expected[..3]));
    assert_eq!(first["pageInfo"]["hasPreviousPage"], false);
    assert_eq!(first["pageInfo"]["hasNextPage"], true);

    // A bad token is the field's error, in the cursor's words.
    let query = format!(
        "{{ reviews(product: \"{}\", after: \"%%\") {{ edges {{ cursor }} }} }}",
        product.id.to_hex()
    );
    let response = schema.execute(query).await;
    assert_eq!(
        response.errors[0].message,
        "invalid page cursor: the token is not base64url"
    );
}

/// Dates with ties for up to 40 children, and the page sizes of a forward and a backward walk.
fn walks() -> impl Strategy<Value = (Vec<i64>, Vec<u32>, Vec<u32>)> {
    (
        prop::collection::vec(0_i64..12, 0..40),
        prop::collection::vec(1_u32..9, 1..12),
        prop::collection::vec(1_u32..9, 1..12),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Forward and backward walks of random page sizes (the sizes cycle) serve the children a
    /// sorted `Vec` holds, in its order, each once.
    #[test]
    fn walks_of_any_sizes_match_a_sorted_vec((dates, forward_sizes, backward_sizes) in walks()) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let store = Store::<Product>::new(&replica_db().await);
            let reviews = store.children(Product::RECENT_REVIEWS);
            let product = Product::named("prop");
            store.insert(&product).await.unwrap();
            let batch: Vec<Review> = dates.iter().map(|d| Review::at(*d)).collect();
            if !batch.is_empty() {
                reviews.push_many(&product.id, &batch).await.unwrap();
            }
            let mut sorted = batch.clone();
            sorted.sort_by(|a, b| Product::expected_order("recent_reviews", a, b));
            let expected = ids(&sorted);

            let mut seen = Vec::new();
            let mut sizes = forward_sizes.iter().cycle();
            let mut request = PageRequest::first(*sizes.next().unwrap());
            loop {
                let page = reviews.page(&product.id, &request).await.unwrap();
                assert_well_formed(&page);
                seen.extend(ids(&page.items));
                match page.next {
                    Some(next) => request = PageRequest::after(next, *sizes.next().unwrap()),
                    None => break,
                }
            }
            assert_eq!(&seen, &expected, "forward, sizes {:?}", forward_sizes);

            let mut pages = Vec::new();
            let mut sizes = backward_sizes.iter().cycle();
            let mut request = PageRequest::last(*sizes.next().unwrap());
            loop {
                let page = reviews.page(&product.id, &request).await.unwrap();
                assert_well_formed(&page);
                let previous = page.previous.clone();
                pages.push(page);
                match previous {
                    Some(previous) => {
                        request = PageRequest::before(previous, *sizes.next().unwrap());
                    }
                    None => break,
                }
            }
            assert_eq!(ids(&in_order(&pages)), expected, "backward, sizes {:?}", backward_sizes);
        });
    }
}
