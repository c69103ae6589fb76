//! Preview subsets: the parent embeds `{_id, author, stars, postedAt}` of each of the latest
//! reviews while the child collection holds whole reviews with their bodies. Push, update,
//! remove, reconcile and pages in both write modes.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::stores;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::bson;

use subset::{
    raw, spec::ParentSpec, spec::SpecBuilder, Child, Children, Error, PageRequest, Store, Subset,
    WriteMode,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    stars: i32,
    posted_at: DateTime,
    body: String,
    helpful: i32,
}

/// The fields a product page shows, in another order than the full type's: an embedded copy is
/// compared by content, not by field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    posted_at: DateTime,
    stars: i32,
    author: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "preview_shops")]
struct Shop {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "preview_reviews",
        keep = 4,
        sort = "posted_at desc",
        count = "total",
        sum = "helpful_total = helpful"
    )]
    latest: Vec<ReviewPreview>,
    #[serde(default)]
    total: i64,
    // The sum of a field the preview does not hold: it is taken from whole reviews.
    #[serde(default)]
    helpful_total: i64,
}

/// The same with a long subset, whose in-order pushes go to the head without `$sort`.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "preview_malls")]
struct Mall {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "preview_mall_reviews", keep = 32, sort = "posted_at desc")]
    latest: Vec<ReviewPreview>,
}

const PREVIEW_KEYS: [&str; 4] = ["_id", "postedAt", "stars", "author"];

fn shop() -> Shop {
    Shop {
        id: ObjectId::new(),
        latest: Vec::new(),
        total: 0,
        helpful_total: 0,
    }
}

fn review(millis: i64) -> Review {
    Review {
        id: ObjectId::new(),
        author: format!("author {millis}"),
        stars: (millis % 5) as i32 + 1,
        posted_at: DateTime::from_millis(millis),
        body: "a long review body ".repeat(20),
        helpful: (millis % 7) as i32,
    }
}

fn preview(r: &Review) -> ReviewPreview {
    ReviewPreview {
        id: r.id,
        posted_at: r.posted_at,
        stars: r.stars,
        author: r.author.clone(),
    }
}

/// Newest first, then `_id` descending: the subset's order, written out here.
fn newest_first(reviews: &mut [Review]) {
    reviews.sort_by_key(|r| std::cmp::Reverse((r.posted_at, r.id)));
}

/// The raw embedded array of `field` in `collection`.
async fn embedded(
    db: &mongodb::Database,
    collection: &str,
    field: &str,
    id: &ObjectId,
) -> Vec<Document> {
    let parent = db
        .collection::<Document>(collection)
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .expect("the parent exists");
    parent
        .get_array(field)
        .unwrap()
        .iter()
        .map(|e| e.as_document().unwrap().clone())
        .collect()
}

/// Asserts the shop embeds exactly the previews of the newest four of `all`, holding only the
/// preview's fields, and counts and sums every review.
async fn assert_previews_true(store: &Store<Shop>, id: &ObjectId, all: &[Review]) {
    let mode = store.mode().await.unwrap();
    let mut all = all.to_vec();
    newest_first(&mut all);
    let got = store.get(id).await.unwrap().unwrap();
    let expected: Vec<ReviewPreview> = all.iter().take(4).map(preview).collect();
    assert_eq!(got.latest, expected, "{mode:?}");
    assert_eq!(got.total, all.len() as i64, "{mode:?}");
    let helpful: i64 = all.iter().map(|r| i64::from(r.helpful)).sum();
    assert_eq!(got.helpful_total, helpful, "{mode:?}");
    for element in embedded(store.database(), "preview_shops", "latest", id).await {
        let keys: Vec<&str> = element.keys().map(String::as_str).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let mut want = PREVIEW_KEYS.to_vec();
        want.sort_unstable();
        assert_eq!(sorted, want, "{mode:?}: an embedded copy holds {keys:?}");
    }
    // The child collection holds whole reviews.
    let stored: Vec<Review> = store
        .children(Shop::LATEST)
        .all(id)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(stored, all, "{mode:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn push_embeds_previews_and_stores_whole_children() {
    for store in stores::<Shop>().await {
        let parent = shop();
        store.insert(&parent).await.unwrap();
        let reviews = store.children(Shop::LATEST);
        let mut all = vec![review(3)];
        reviews.push(&parent.id, &all[0]).await.unwrap();
        assert_previews_true(&store, &parent.id, &all).await;

        let more: Vec<Review> = [7, 1, 9, 5, 2].into_iter().map(review).collect();
        reviews.push_many(&parent.id, &more).await.unwrap();
        all.extend(more);
        assert_previews_true(&store, &parent.id, &all).await;

        // A retried push stores, embeds and counts nothing twice.
        reviews.push(&parent.id, &all[2]).await.unwrap();
        assert_previews_true(&store, &parent.id, &all).await;
        assert!(reviews.check(&parent.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn update_refreshes_a_preview_and_remove_backfills_one() {
    for store in stores::<Shop>().await {
        let parent = shop();
        store.insert(&parent).await.unwrap();
        let reviews = store.children(Shop::LATEST);
        let mut all: Vec<Review> = (1..=6).map(|i| review(i * 10)).collect();
        reviews.push_many(&parent.id, &all).await.unwrap();

        // A field the preview shows changes on the page.
        all[5].author = "renamed".to_owned();
        reviews.update(&parent.id, &all[5]).await.unwrap();
        assert_previews_true(&store, &parent.id, &all).await;

        // A field it does not show (and a summed one) changes only the stored review and the sum.
        all[4].body = "edited".to_owned();
        all[4].helpful += 100;
        reviews.update(&parent.id, &all[4]).await.unwrap();
        assert_previews_true(&store, &parent.id, &all).await;

        // A sort key moves the newest review to the end: its preview leaves, the fifth enters.
        all[5].posted_at = DateTime::from_millis(0);
        reviews.update(&parent.id, &all[5]).await.unwrap();
        assert_previews_true(&store, &parent.id, &all).await;

        // Removing an embedded review backfills the next one's preview.
        let gone = all.remove(4);
        reviews.remove(&parent.id, &gone.id).await.unwrap();
        assert_previews_true(&store, &parent.id, &all).await;
        assert!(reviews.check(&parent.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_hold_whole_children_and_go_on_after_the_previews() {
    for store in stores::<Shop>().await {
        let parent = shop();
        store.insert(&parent).await.unwrap();
        let reviews = store.children(Shop::LATEST);
        let mut all: Vec<Review> = (1..=11).map(review).collect();
        reviews.push_many(&parent.id, &all).await.unwrap();
        newest_first(&mut all);

        // A first page holds whole reviews, bodies included, read from the child collection.
        let first = reviews
            .page(&parent.id, &PageRequest::first(3))
            .await
            .unwrap();
        assert_eq!(first.items, all[..3]);
        assert!(first.has_next());

        // The product page showed four previews; "more reviews" goes on after the last one.
        let page = store.get(&parent.id).await.unwrap().unwrap();
        assert_eq!(page.latest.len(), 4);
        // A review pushed meanwhile is newer than every preview: the walk after them does not
        // show it, and shows nothing twice.
        reviews.push(&parent.id, &review(100)).await.unwrap();
        let last = page.latest.last().unwrap();
        let mut request = PageRequest::after(reviews.cursor_of(&parent.id, last).unwrap(), 3);
        let mut walked: Vec<Review> = Vec::new();
        loop {
            let got = reviews.page(&parent.id, &request).await.unwrap();
            walked.extend(got.items.iter().cloned());
            match got.next {
                Some(next) => request = PageRequest::after(next, 3),
                None => break,
            }
        }
        assert_eq!(walked, all[4..]);

        // Backward from the first preview: nothing is newer than it but the late review.
        let first_preview = &page.latest[0];
        let before = PageRequest::before(reviews.cursor_of(&parent.id, first_preview).unwrap(), 5);
        let newer = reviews.page(&parent.id, &before).await.unwrap();
        let newer: Vec<i64> = newer
            .items
            .iter()
            .map(|r| r.posted_at.timestamp_millis())
            .collect();
        assert_eq!(newer, [100]);

        // A cursor made for the preview serves the whole review's walk too.
        let from_whole = reviews.cursor_of(&parent.id, &all[3]).unwrap();
        assert_eq!(from_whole, reviews.cursor_of(&parent.id, last).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_inserted_with_previews_is_refused_and_nothing_is_written() {
    for store in stores::<Shop>().await {
        let mut parent = shop();
        parent.latest.push(preview(&review(1)));
        match store.insert(&parent).await {
            Err(Error::PreviewsOnInsert { field, id, .. }) => {
                assert_eq!(field, "latest");
                assert_eq!(*id, Bson::ObjectId(parent.id));
            }
            other => panic!("expected PreviewsOnInsert, got {other:?}"),
        }
        assert!(store.get(&parent.id).await.unwrap().is_none());
        let children = store
            .database()
            .collection::<Document>("preview_reviews")
            .count_documents(doc! { "shop_id": parent.id })
            .await
            .unwrap();
        assert_eq!(children, 0);

        // The way the message gives: the parent without previews, then the whole reviews.
        parent.latest.clear();
        store.insert(&parent).await.unwrap();
        let all = vec![review(1), review(2)];
        store
            .children(Shop::LATEST)
            .push_many(&parent.id, &all)
            .await
            .unwrap();
        assert_previews_true(&store, &parent.id, &all).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_turns_whole_embedded_children_back_into_previews() {
    for store in stores::<Shop>().await {
        let parent = shop();
        store.insert(&parent).await.unwrap();
        let reviews = store.children(Shop::LATEST);
        let mut all: Vec<Review> = (1..=5).map(review).collect();
        reviews.push_many(&parent.id, &all).await.unwrap();
        newest_first(&mut all);

        // Code outside the library embedded whole reviews.
        let whole: Vec<Document> = all[..4]
            .iter()
            .map(|r| subset::bson_compat::to_document(r).unwrap())
            .collect();
        store
            .database()
            .collection::<Document>("preview_shops")
            .update_one(
                doc! { "_id": parent.id },
                doc! { "$set": { "latest": whole } },
            )
            .await
            .unwrap();

        let drift = reviews.check(&parent.id).await.unwrap();
        let ids: Vec<Bson> = all[..4].iter().map(|r| Bson::ObjectId(r.id)).collect();
        assert_eq!(drift.changed, ids, "{drift:?}");
        assert!(drift.missing.is_empty() && drift.stale.is_empty());
        assert!(reviews.reconcile(&parent.id).await.unwrap().fixed);
        assert_previews_true(&store, &parent.id, &all).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_preview_subset_pushes_at_the_head() {
    for store in stores::<Mall>().await {
        let mall = Mall {
            id: ObjectId::new(),
            latest: Vec::new(),
        };
        store.insert(&mall).await.unwrap();
        let reviews = store.children(Mall::LATEST);
        let mut all: Vec<Review> = (1..=40).map(review).collect();
        for r in &all {
            reviews.push(&mall.id, r).await.unwrap();
        }
        // One late review lands behind the head.
        let late = review(0);
        reviews.push(&mall.id, &late).await.unwrap();
        all.push(late);
        newest_first(&mut all);
        let got = store.get(&mall.id).await.unwrap().unwrap();
        let expected: Vec<ReviewPreview> = all.iter().take(32).map(preview).collect();
        assert_eq!(got.latest, expected);
        for element in embedded(store.database(), "preview_malls", "latest", &mall.id).await {
            assert!(!element.contains_key("body"), "{element}");
        }
        assert!(reviews.check(&mall.id).await.unwrap().is_clean());
    }
}

/// A preview described at run time: `embed` names the fields kept besides `_id` and the sort
/// keys.
#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_descriptor_embeds_the_fields_it_names() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let spec = SpecBuilder::new("latest", "runtime_reviews", "shop_id")
            .keep(2)
            .sort("postedAt desc")
            .embed(["author"])
            .build()
            .unwrap();
        let names: Vec<&str> = spec.embed.unwrap().iter().map(|f| f.bson).collect();
        assert_eq!(names, ["_id", "postedAt", "author"]);
        let store = raw::Store::with_options(
            &db,
            ParentSpec::leak("runtime_shops", vec![*spec]),
            subset::StoreOptions::new().mode(mode),
        );
        let id = Bson::ObjectId(ObjectId::new());
        store.insert(doc! { "_id": id.clone() }).await.unwrap();
        let children: Vec<Document> = (1..=3)
            .map(|i| subset::bson_compat::to_document(&review(i)).unwrap())
            .collect();
        store.children(spec).push(&id, children).await.unwrap();
        let parent = db
            .collection::<Document>("runtime_shops")
            .find_one(doc! { "_id": id.clone() })
            .await
            .unwrap()
            .unwrap();
        let latest = parent.get_array("latest").unwrap();
        assert_eq!(latest.len(), 2, "{mode:?}");
        for element in latest {
            let keys: Vec<&str> = element
                .as_document()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ["_id", "author", "postedAt"], "{mode:?}");
        }
        assert!(store.children(spec).check(&id).await.unwrap().is_clean());
    }
}

/// `Children` is the handle of whole reviews even though the field holds previews.
#[allow(dead_code)]
fn the_handle_takes_whole_children(store: &Store<Shop>) -> Children<'_, Shop, Review> {
    store.children(Shop::LATEST)
}
