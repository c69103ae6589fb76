//! Merged pagination: page 1 from the embedded subset, later pages by keyset, exactly once.

use crate::common;

use common::*;
use futures::TryStreamExt;
use subset::bson::oid::ObjectId;
use subset::bson::{doc, Bson, Document};
use subset::{Cursor, Error, Page, PageRequest, Store};

/// Reads every page of `size` and returns the ids in the order served.
async fn read_all(store: &Store<Product>, id: &ObjectId, size: u32) -> Vec<ObjectId> {
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut out = Vec::new();
    let mut request = PageRequest::first(size);
    loop {
        let Page { items, next, .. } = reviews.page(id, &request).await.unwrap();
        assert!(items.len() <= size as usize);
        out.extend(items.iter().map(|r| r.id));
        match next {
            // Through the token, as a web client would.
            Some(cursor) => {
                let token = cursor.encode();
                request = PageRequest::after(token.parse().unwrap(), size);
            }
            None => return out,
        }
    }
}

async fn product_with(store: &Store<Product>, n: i64) -> (Product, Vec<ObjectId>) {
    let product = Product::named("paged");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    // Dates with many ties (n / 3 distinct values), pushed in a scrambled order.
    let batch: Vec<Review> = (0..n)
        .map(|i| Review::at((i * 7_919) % (n / 3 + 1)))
        .collect();
    for chunk in batch.chunks(100) {
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
async fn every_page_size_serves_each_child_exactly_once() {
    let store = Store::<Product>::new(&replica_db().await);
    store.ensure_indexes().await.unwrap();
    let (product, expected) = product_with(&store, 1_000).await;
    assert_eq!(expected.len(), 1_000);
    for size in [1, 7, 5, 6, 100] {
        let got = read_all(&store, &product.id, size).await;
        assert_eq!(got, expected, "page size {size}");
    }
    let streamed: Vec<ObjectId> = store
        .children(Product::RECENT_REVIEWS)
        .all(&product.id)
        .await
        .unwrap()
        .map_ok(|r| r.id)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(streamed, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn small_and_empty_subsets_end_cleanly() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    for n in [0, 1, 4, 5, 6] {
        let product = Product::named("small");
        store.insert(&product).await.unwrap();
        let batch: Vec<Review> = (0..n).map(Review::at).collect();
        reviews.push_many(&product.id, &batch).await.unwrap();
        for size in [1, 5, 6, 50] {
            let got = read_all(&store, &product.id, size).await;
            assert_eq!(got.len(), n as usize, "{n} children, page size {size}");
        }
        // A page exactly as large as a full subset says there is more only when there is.
        let page = reviews
            .page(&product.id, &PageRequest::first(5))
            .await
            .unwrap();
        assert_eq!(page.next.is_some(), n > 5, "{n} children");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_stay_exact_while_children_are_pushed_between_them() {
    let store = Store::<Product>::new(&replica_db().await);
    let (product, expected) = product_with(&store, 300).await;
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut seen = Vec::new();
    let mut request = PageRequest::first(5);
    let mut round = 0_i64;
    loop {
        let page = reviews.page(&product.id, &request).await.unwrap();
        seen.extend(page.items.iter().map(|r| r.id));
        // Newer and older children arrive between pages.
        round += 1;
        reviews
            .push_many(
                &product.id,
                &[Review::at(1_000_000 + round), Review::at(-round)],
            )
            .await
            .unwrap();
        match page.next {
            Some(next) => request = PageRequest::after(next, 17),
            None => break,
        }
    }
    let originals: Vec<ObjectId> = seen
        .iter()
        .filter(|id| expected.contains(id))
        .copied()
        .collect();
    assert_eq!(
        originals, expected,
        "every original child exactly once, in order"
    );
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no child served twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_page_is_one_projected_query_on_the_parent() {
    let store = Store::<Product>::new(&replica_db().await);
    let (product, expected) = product_with(&store, 30).await;
    // Remove the children from the collection: a first page within `keep` must not need them.
    store
        .database()
        .collection::<Document>("reviews")
        .delete_many(doc! {})
        .await
        .unwrap();
    let page = store
        .children(Product::RECENT_REVIEWS)
        .page(&product.id, &PageRequest::first(5))
        .await
        .unwrap();
    let ids: Vec<ObjectId> = page.items.iter().map(|r| r.id).collect();
    assert_eq!(ids, expected[..5]);
    assert!(page.next.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_cursors_and_sizes_are_typed_errors() {
    let store = Store::<Product>::new(&replica_db().await);
    let (product, _) = product_with(&store, 20).await;
    let (other, _) = product_with(&store, 20).await;
    let reviews = store.children(Product::RECENT_REVIEWS);
    let next = reviews
        .page(&product.id, &PageRequest::first(5))
        .await
        .unwrap()
        .next
        .unwrap();
    let token = next.encode();

    // Tampered tokens: flipped characters, truncation, garbage, padding.
    let mut tampered = vec![
        String::new(),
        "not a cursor".to_owned(),
        token[..token.len() / 2].to_owned(),
        format!("{token}=="),
    ];
    for i in (0..token.len()).step_by(3) {
        let mut bytes = token.clone().into_bytes();
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        tampered.push(String::from_utf8(bytes).unwrap());
    }
    for bad in &tampered {
        match bad.parse::<Cursor>() {
            Err(Error::InvalidCursor { .. }) => {}
            Err(e) => panic!("{bad:?}: unexpected error {e}"),
            // A flip can land on a value and still decode: then the page call must hold.
            Ok(cursor) => match reviews
                .page(&product.id, &PageRequest::after(cursor, 5))
                .await
            {
                Ok(_) | Err(Error::InvalidCursor { .. }) => {}
                Err(e) => panic!("{bad:?}: unexpected error {e}"),
            },
        }
    }

    // A cursor of one parent used on another.
    let err = reviews
        .page(&other.id, &PageRequest::after(next.clone(), 5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidCursor { .. }), "{err}");

    for size in [0, 10_001] {
        let err = reviews
            .page(&product.id, &PageRequest::first(size))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidPageSize { .. }), "{err}");
    }

    for size in [5, 50] {
        let err = reviews
            .page(&ObjectId::new(), &PageRequest::first(size))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ParentNotFound { .. }), "{err}");
    }
}
