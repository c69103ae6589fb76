//! The example service (`examples/service`) on a loopback port, against the test server, driven
//! over HTTP: the whole flow, bad input, missing and duplicate ids, concurrent posts, concurrent
//! votes, moderation, and stored data of the wrong shape.

#[path = "../../examples/service/app.rs"]
mod app;
use crate::common;

use std::cmp::Ordering;
use std::collections::HashSet;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use app::{ErrorBody, Product, ProductOut, Review, ReviewOut, ReviewPage};
use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime};
use common::{assert_subset_true, stores, ExpectedOrder};
use rand::seq::SliceRandom;
use reqwest::StatusCode;
use serde_json::json;
use subset::bson;
use subset::{Store, WriteMode};

impl ExpectedOrder<Review> for Product {
    fn expected_order(field: &str, a: &Review, b: &Review) -> Ordering {
        match field {
            // `date desc`, then `_id` desc.
            "recent_reviews" => (b.date, b.id).cmp(&(a.date, a.id)),
            // `helpful desc, date desc`, then `_id` desc.
            "most_helpful" => (b.helpful, b.date, b.id).cmp(&(a.helpful, a.date, a.id)),
            other => panic!("`{other}` is not a subset of the service's Product"),
        }
    }
}

/// What the service logged at `warn` and above, in every test of this binary.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        std::io::stderr().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(|| LogWriter)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
}

/// The service on a loopback port over `store`, and a client for it.
struct Service {
    base: String,
    http: reqwest::Client,
    store: Store<Product>,
}

impl Service {
    async fn start(store: Store<Product>) -> Service {
        capture_logs();
        store.ensure_indexes().await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = app::router(store.clone());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Service {
            base,
            http: reqwest::Client::new(),
            store,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn put(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.http
            .put(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn delete(&self, path: &str) -> reqwest::Response {
        self.http.delete(self.url(path)).send().await.unwrap()
    }

    /// `POST …/votes`: one helpful vote, no body.
    async fn vote(&self, product: &str, review: &str) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/products/{product}/reviews/{review}/votes")))
            .send()
            .await
            .unwrap()
    }

    /// `PUT …/hidden` with `hidden`, which must succeed.
    async fn set_hidden(&self, product: &str, review: &Review, hidden: bool) {
        let path = format!("/products/{product}/reviews/{}/hidden", review.id);
        let response = self.put(&path, json!(hidden)).await;
        assert_eq!(
            response.status(),
            StatusCode::NO_CONTENT,
            "{path}: {hidden}"
        );
    }

    async fn create_product(&self, name: &str) -> ProductOut {
        let response = self.post("/products", json!({ "name": name })).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let location = response.headers()["location"].to_str().unwrap().to_owned();
        let product: ProductOut = response.json().await.unwrap();
        assert_eq!(location, format!("/products/{}", product.id));
        product
    }

    async fn post_review(&self, product: &str, review: &Review) -> ReviewOut {
        let response = self
            .post(
                &format!("/products/{product}/reviews"),
                request_body(review),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    async fn product(&self, id: &str) -> ProductOut {
        let response = self.get(&format!("/products/{id}")).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Every review of `product`, `size` at a time with `first`/`after`, and how many pages.
    async fn all_reviews(&self, product: &str, size: u32) -> (Vec<ReviewOut>, usize) {
        let (mut all, mut pages) = (Vec::new(), 0);
        let mut path = format!("/products/{product}/reviews?first={size}");
        loop {
            let response = self.get(&path).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let page: ReviewPage = response.json().await.unwrap();
            pages += 1;
            assert!(page.items.len() <= size as usize);
            // Forward from the start there is nothing before; from a cursor, its review was.
            assert_eq!(page.page_info.has_previous_page, pages > 1, "{path}");
            all.extend(page.items);
            if !page.page_info.has_next_page {
                break;
            }
            let token = page
                .page_info
                .end_cursor
                .expect("a page with a next has an end");
            path = format!("/products/{product}/reviews?first={size}&after={token}");
        }
        (all, pages)
    }

    /// Every review of `product`, `size` at a time backward with `last`/`before`, in the order
    /// the walk meets them (the oldest first), and how many pages.
    async fn all_reviews_backward(&self, product: &str, size: u32) -> (Vec<ReviewOut>, usize) {
        let (mut met, mut pages) = (Vec::new(), 0);
        let mut path = format!("/products/{product}/reviews?last={size}");
        loop {
            let page = self.page(&path).await;
            pages += 1;
            assert!(page.items.len() <= size as usize, "{path}");
            // Back from the end nothing follows; from a cursor, its review does.
            assert_eq!(page.page_info.has_next_page, pages > 1, "{path}");
            // Each page is newest first: the walk meets its reviews from the bottom up.
            met.extend(page.items.into_iter().rev());
            if !page.page_info.has_previous_page {
                break;
            }
            let token = page
                .page_info
                .start_cursor
                .expect("a page with a previous has a start");
            path = format!("/products/{product}/reviews?last={size}&before={token}");
        }
        (met, pages)
    }

    /// The page at `path`, which must be one.
    async fn page(&self, path: &str) -> ReviewPage {
        let response = self.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let page: ReviewPage = response.json().await.unwrap();
        // The cursors at the ends are the ends' (an empty page has none).
        assert_eq!(
            page.page_info.start_cursor.is_some(),
            !page.items.is_empty()
        );
        assert_eq!(page.page_info.end_cursor.is_some(), !page.items.is_empty());
        page
    }

    /// The status and error body of a response that must be an error.
    async fn error(response: reqwest::Response) -> (StatusCode, ErrorBody) {
        let status = response.status();
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{status}"
        );
        (status, response.json().await.unwrap())
    }
}

/// The JSON a client posts for `review`.
fn request_body(review: &Review) -> serde_json::Value {
    json!({
        "id": review.id.to_hex(),
        "author": review.author,
        "rating": review.rating,
        "comment": review.comment,
        "date": review.date.try_to_rfc3339_string().unwrap(),
    })
}

fn review(millis: i64) -> Review {
    Review {
        id: ObjectId::new(),
        author: format!("customer {millis}"),
        rating: (millis % 5) as i32 + 1,
        comment: format!("review written at {millis}"),
        date: DateTime::from_millis(millis),
        helpful: 0,
        hidden: false,
    }
}

fn out(review: &Review) -> ReviewOut {
    ReviewOut {
        id: review.id.to_hex(),
        author: review.author.clone(),
        rating: review.rating,
        comment: review.comment.clone(),
        date: review.date.try_to_rfc3339_string().unwrap(),
        helpful: review.helpful,
    }
}

/// `reviews` in the subset's order, as the service should list them.
fn newest_first(reviews: &[Review]) -> Vec<ReviewOut> {
    let mut sorted = reviews.to_vec();
    sorted.sort_by(|a, b| Product::expected_order("recent_reviews", a, b));
    sorted.iter().map(out).collect()
}

fn oid(hex: &str) -> ObjectId {
    ObjectId::parse_str(hex).unwrap()
}

/// Every write mode the store has on the replica set, each with a service of its own.
async fn services() -> Vec<(WriteMode, Service)> {
    let mut all = Vec::new();
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        all.push((mode, Service::start(store).await));
    }
    assert_eq!(
        all.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
        [WriteMode::Transactional, WriteMode::Ordered]
    );
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_post_page_edit_delete_and_the_product_page_follows() {
    for (mode, service) in services().await {
        let product = service.create_product("Espresso grinder").await;
        assert_eq!(product.total_reviews, 0);
        assert!(product.recent_reviews.is_empty());
        assert!(product.most_helpful.is_empty());

        // 47 reviews with dates 1 minute apart, some sharing a date, posted in random order.
        let mut reviews: Vec<Review> = (0..47)
            .map(|i| review(1_700_000_000_000 + (i / 3) * 60_000))
            .collect();
        reviews.shuffle(&mut rand::rng());
        for r in &reviews {
            assert_eq!(
                service.post_review(&product.id, r).await,
                out(r),
                "{mode:?}"
            );
        }

        let expected = newest_first(&reviews);
        let page = service.product(&product.id).await;
        assert_eq!(page.total_reviews, 47, "{mode:?}");
        assert_eq!(page.recent_reviews, expected[..5], "{mode:?}");
        // No votes yet: the most helpful are the newest.
        assert_eq!(page.most_helpful, expected[..3], "{mode:?}");

        // Every review exactly once, in order, whatever the page size (3 falls inside the
        // embedded subset, 5 ends on it, 10 and 47 cross it, 100 takes everything).
        // Backward with `last`/`before`, the same reviews in reverse, each once.
        for size in [3, 5, 10, 47, 100] {
            let (all, pages) = service.all_reviews(&product.id, size).await;
            assert_eq!(all, expected, "{mode:?}, pages of {size}");
            assert!(pages >= 47usize.div_ceil(size as usize), "{mode:?}");
            let (back, pages) = service.all_reviews_backward(&product.id, size).await;
            let reversed: Vec<_> = all.iter().rev().cloned().collect();
            assert_eq!(back, reversed, "{mode:?}, back in pages of {size}");
            let ids: HashSet<_> = back.iter().map(|r| &r.id).collect();
            assert_eq!(ids.len(), 47, "{mode:?}, back in pages of {size}");
            assert_eq!(pages, 47usize.div_ceil(size as usize), "{mode:?}");
        }
        // The default page size.
        let first: ReviewPage = service
            .get(&format!("/products/{}/reviews", product.id))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(first.items, expected[..20]);
        assert!(first.page_info.has_next_page);
        assert!(!first.page_info.has_previous_page);
        // `last` alone: the last 20 of all, still newest first.
        let last = service
            .page(&format!("/products/{}/reviews?last=20", product.id))
            .await;
        assert_eq!(last.items, expected[27..], "{mode:?}");
        assert!(last.page_info.has_previous_page && !last.page_info.has_next_page);

        // Edit an old review: newer than all, it moves to the top of the product page.
        let mut edited = reviews
            .iter()
            .find(|r| out(r) == expected[30])
            .unwrap()
            .clone();
        edited.author = "edited".into();
        edited.rating = 1;
        edited.date = DateTime::from_millis(1_800_000_000_000);
        let mut put = request_body(&edited);
        put.as_object_mut().unwrap().remove("id");
        let response = service
            .put(
                &format!("/products/{}/reviews/{}", product.id, edited.id),
                put,
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
        assert_eq!(response.json::<ReviewOut>().await.unwrap(), out(&edited));
        for r in reviews.iter_mut().filter(|r| r.id == edited.id) {
            *r = edited.clone();
        }
        let expected = newest_first(&reviews);
        assert_eq!(expected[0], out(&edited));
        let page = service.product(&product.id).await;
        assert_eq!(page.recent_reviews, expected[..5], "{mode:?}");
        assert_eq!(page.most_helpful, expected[..3], "{mode:?}");
        assert_eq!(page.total_reviews, 47);

        // Delete the newest two: the next ones move up into the product page.
        for r in &expected[..2] {
            let response = service
                .delete(&format!("/products/{}/reviews/{}", product.id, r.id))
                .await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT, "{mode:?}");
        }
        reviews.retain(|r| out(r) != expected[0] && out(r) != expected[1]);
        let expected = newest_first(&reviews);
        let page = service.product(&product.id).await;
        assert_eq!(page.total_reviews, 45, "{mode:?}");
        assert_eq!(page.recent_reviews, expected[..5], "{mode:?}");
        assert_eq!(page.most_helpful, expected[..3], "{mode:?}");
        let (all, _) = service.all_reviews(&product.id, 7).await;
        assert_eq!(all, expected, "{mode:?}");
        let (mut back, _) = service.all_reviews_backward(&product.id, 7).await;
        back.reverse();
        assert_eq!(back, expected, "{mode:?}");
        for view in [Product::RECENT_REVIEWS, Product::MOST_HELPFUL] {
            assert_subset_true(&service.store, view, &Bson::ObjectId(oid(&product.id))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_tokens_and_parameters_are_400_with_a_json_error() {
    let service = Service::start(Store::new(&common::replica_db().await)).await;
    let a = service.create_product("a").await;
    let b = service.create_product("b").await;
    for i in 0..8 {
        service.post_review(&a.id, &review(i * 1_000)).await;
        service.post_review(&b.id, &review(i * 1_000)).await;
    }
    let first: ReviewPage = service
        .get(&format!("/products/{}/reviews?first=2", a.id))
        .await
        .json()
        .await
        .unwrap();
    let token = first.page_info.end_cursor.unwrap().to_string();

    let half = &token[..token.len() / 2];
    let reviews = |product: &str, query: &str| format!("/products/{product}/reviews?{query}");
    for (path, code, says) in [
        (
            reviews(&a.id, "after=!!!"),
            "invalid_cursor",
            "`after` is not a cursor of this product's reviews: invalid page cursor: \
             the token is not base64url",
        ),
        (
            reviews(&a.id, &format!("after={half}")),
            "invalid_cursor",
            "`after`",
        ),
        (reviews(&a.id, "after="), "invalid_cursor", "`after`"),
        // A real token, for another product.
        (
            reviews(&b.id, &format!("after={token}")),
            "invalid_cursor",
            "`after` is not a cursor of this product's reviews: invalid page cursor: it was \
             made for parent",
        ),
        // The same, backward.
        (
            reviews(&a.id, "before=!!!"),
            "invalid_cursor",
            "`before` is not a cursor of this product's reviews: invalid page cursor: \
             the token is not base64url",
        ),
        (
            reviews(&a.id, &format!("last=2&before={half}")),
            "invalid_cursor",
            "`before`",
        ),
        (reviews(&a.id, "before="), "invalid_cursor", "`before`"),
        (
            reviews(&b.id, &format!("last=2&before={token}")),
            "invalid_cursor",
            "`before` is not a cursor of this product's reviews: invalid page cursor: it was \
             made for parent",
        ),
        (reviews(&a.id, "first=0"), "bad_request", "`first`"),
        (reviews(&a.id, "first=101"), "bad_request", "`first`"),
        (reviews(&a.id, "first=twenty"), "bad_request", "first"),
        (
            reviews(&a.id, "last=0"),
            "bad_request",
            "`last` must be from 1 to 100",
        ),
        (
            reviews(&a.id, &format!("last=101&before={token}")),
            "bad_request",
            "`last` must be from 1 to 100",
        ),
        (reviews(&a.id, "last=twenty"), "bad_request", "last"),
        (
            reviews(&a.id, &format!("after={token}&after={token}")),
            "bad_request",
            "duplicate field `after`",
        ),
        // Both directions at once: every parameter of the mix is named.
        (
            reviews(&a.id, "first=2&last=2"),
            "bad_request",
            "`first` and `last` cannot be used together",
        ),
        (
            reviews(&a.id, &format!("after={token}&before={token}")),
            "bad_request",
            "`after` and `before` cannot be used together",
        ),
        (
            reviews(&a.id, &format!("first=2&before={token}")),
            "bad_request",
            "`first` and `before` cannot be used together",
        ),
        (
            reviews(&a.id, &format!("last=2&after={token}")),
            "bad_request",
            "`after` and `last` cannot be used together",
        ),
        (
            reviews(&a.id, &format!("first=2&after={token}&before={token}")),
            "bad_request",
            "`first`, `after` and `before` cannot be used together",
        ),
        (
            reviews(
                &a.id,
                &format!("before={token}&last=3&first=2&after={token}"),
            ),
            "bad_request",
            "`first`, `after`, `last` and `before` cannot be used together: \
             `first`/`after` page forward, `last`/`before` backward",
        ),
        (
            reviews(&a.id, "size=20"),
            "bad_request",
            "unknown field `size`",
        ),
        (
            "/products/not-an-id/reviews".to_owned(),
            "bad_request",
            "`not-an-id` is not an id",
        ),
        ("/products/123".to_owned(), "bad_request", "`123`"),
        ("/products/%FF".to_owned(), "bad_request", ""),
    ] {
        let (status, body) = Service::error(service.get(&path).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body:?}");
        assert_eq!(body.error, code, "{path}: {body:?}");
        assert!(body.message.contains(says), "{path}: {body:?}");
    }

    let posts = format!("/products/{}/reviews", a.id);
    let valid = request_body(&review(1));
    for (change, says) in [
        (
            json!({ "rating": 6 }),
            "`rating` must be from 1 to 5, not 6",
        ),
        (json!({ "author": " " }), "`author`"),
        (json!({ "comment": "x".repeat(4_001) }), "`comment`"),
        (
            json!({ "date": "yesterday" }),
            "`yesterday` is not an RFC 3339 date",
        ),
        (json!({ "id": "xyz" }), "review id `xyz`"),
        (json!({ "stars": 5 }), "unknown field `stars`"),
        (json!({ "rating": "five" }), "rating"),
    ] {
        let mut request = valid.clone();
        for (k, v) in change.as_object().unwrap() {
            request[k] = v.clone();
        }
        let response = service.post(&posts, request).await;
        let (status, body) = Service::error(response).await;
        assert!(status.is_client_error(), "{change}: {status}");
        assert_eq!(body.error, "bad_request", "{change}");
        assert!(body.message.contains(says), "{change}: {body:?}");
    }
    // Not JSON at all, and no date on a PUT.
    let response = service
        .http
        .post(service.url(&posts))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    let (status, body) = Service::error(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
    let some = &first.items[0].id;
    let mut no_date = valid.clone();
    no_date.as_object_mut().unwrap().remove("date");
    no_date.as_object_mut().unwrap().remove("id");
    let (status, body) =
        Service::error(service.put(&format!("{posts}/{some}"), no_date).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.message.contains("`date` is required"), "{body:?}");

    // Nothing above was written.
    assert_eq!(service.product(&a.id).await.total_reviews, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backward_pages_from_the_middle_across_the_embedded_reviews_and_before_the_first() {
    for (mode, service) in services().await {
        let product = service.create_product("middle").await;
        // 23 reviews, pairs sharing a date, so that the `_id` breaks ties.
        let reviews: Vec<Review> = (0..23)
            .map(|i| review(1_700_000_000_000 + (i / 2) * 60_000))
            .collect();
        for r in &reviews {
            service.post_review(&product.id, r).await;
        }
        let expected = newest_first(&reviews);
        let path = |query: String| format!("/products/{}/reviews?{query}", product.id);
        // The cursor of review `i` (0 the newest): the end of the first `i + 1`.
        let cursor_of = |i: usize| {
            let url = path(format!("first={}", i + 1));
            let service = &service;
            async move {
                let page = service.page(&url).await;
                page.page_info
                    .end_cursor
                    .expect("a non-empty page has an end")
            }
        };

        // From the middle of the collection: the 4 reviews just before the 10th.
        let c9 = cursor_of(9).await;
        let page = service.page(&path(format!("last=4&before={c9}"))).await;
        assert_eq!(page.items, expected[5..9], "{mode:?}");
        assert!(page.page_info.has_previous_page, "{mode:?}");
        assert!(page.page_info.has_next_page, "{mode:?}");
        // A backward page's cursors go on either way: forward from its end is the 10th on.
        let end = page.page_info.end_cursor.clone().unwrap();
        let on = service.page(&path(format!("first=3&after={end}"))).await;
        assert_eq!(on.items, expected[9..12], "{mode:?}");
        let start = page.page_info.start_cursor.clone().unwrap();
        let back = service.page(&path(format!("last=2&before={start}"))).await;
        assert_eq!(back.items, expected[3..5], "{mode:?}");

        // Across the seam: from the collection (8th) into the 5 embedded reviews.
        let c7 = cursor_of(7).await;
        let page = service.page(&path(format!("last=4&before={c7}"))).await;
        assert_eq!(page.items, expected[3..7], "{mode:?}");
        // Inside the embedded reviews, asking for more than there are before: what there is.
        let c2 = cursor_of(2).await;
        let page = service.page(&path(format!("last=4&before={c2}"))).await;
        assert_eq!(page.items, expected[..2], "{mode:?}");
        assert!(!page.page_info.has_previous_page, "{mode:?}");
        assert!(page.page_info.has_next_page, "{mode:?}");
        // `before` alone: the default 20.
        let c21 = cursor_of(21).await;
        let page = service.page(&path(format!("before={c21}"))).await;
        assert_eq!(page.items, expected[1..21], "{mode:?}");
        assert!(page.page_info.has_previous_page, "{mode:?}");
        // `last` larger than all: everything, nothing either side.
        let page = service.page(&path("last=100".into())).await;
        assert_eq!(page.items, expected, "{mode:?}");
        assert!(!page.page_info.has_previous_page && !page.page_info.has_next_page);

        // Before the first (newest) review: an empty page that goes nowhere.
        let c0 = cursor_of(0).await;
        for query in [format!("last=5&before={c0}"), format!("before={c0}")] {
            let response = service.get(&path(query.clone())).await;
            assert_eq!(response.status(), StatusCode::OK, "{query}");
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(
                body,
                json!({
                    "items": [],
                    "page_info": {
                        "has_next_page": false,
                        "has_previous_page": false,
                        "start_cursor": null,
                        "end_cursor": null,
                    },
                }),
                "{mode:?}: {query}"
            );
        }
        // And the response's shape for a page with reviews: tokens as strings, in `page_info`.
        let body: serde_json::Value = service
            .get(&path(format!("last=1&before={c2}")))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["items"][0]["id"], expected[1].id);
        let c1 = cursor_of(1).await.to_string();
        assert_eq!(body["page_info"]["start_cursor"], json!(c1));
        assert_eq!(
            body["page_info"]["start_cursor"],
            body["page_info"]["end_cursor"]
        );
        assert_eq!(body["page_info"]["has_next_page"], true);
        assert_eq!(body["page_info"]["has_previous_page"], true);
        assert_eq!(body.as_object().unwrap().len(), 2, "{body}");
        assert_eq!(body["page_info"].as_object().unwrap().len(), 4, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_products_and_reviews_are_404() {
    let service = Service::start(Store::new(&common::replica_db().await)).await;
    let a = service.create_product("a").await;
    let b = service.create_product("b").await;
    let of_a = service.post_review(&a.id, &review(1)).await;
    let nobody = ObjectId::new().to_hex();
    let edit =
        json!({ "author": "x", "rating": 3, "comment": "y", "date": "2024-01-01T00:00:00Z" });

    for (response, says) in [
        (
            service.get(&format!("/products/{nobody}")).await,
            format!("product {nobody} not found"),
        ),
        (
            service.get(&format!("/products/{nobody}/reviews")).await,
            format!("product {nobody} not found"),
        ),
        (
            service
                .post(
                    &format!("/products/{nobody}/reviews"),
                    request_body(&review(2)),
                )
                .await,
            format!("product {nobody} not found"),
        ),
        (
            service
                .put(
                    &format!("/products/{}/reviews/{nobody}", a.id),
                    edit.clone(),
                )
                .await,
            format!("review {nobody} of product {} not found", a.id),
        ),
        (
            service
                .delete(&format!("/products/{}/reviews/{nobody}", a.id))
                .await,
            format!("review {nobody} of product {} not found", a.id),
        ),
        // A's review, under B.
        (
            service
                .delete(&format!("/products/{}/reviews/{}", b.id, of_a.id))
                .await,
            format!("review {} of product {} not found", of_a.id, b.id),
        ),
        (
            service
                .put(&format!("/products/{}/reviews/{}", b.id, of_a.id), edit)
                .await,
            format!("review {} of product {} not found", of_a.id, b.id),
        ),
        // Votes and moderation: no such review, A's review under B, no such product.
        (
            service.vote(&a.id, &nobody).await,
            format!("review {nobody} of product {} not found", a.id),
        ),
        (
            service.vote(&b.id, &of_a.id).await,
            format!("review {} of product {} not found", of_a.id, b.id),
        ),
        (
            service.vote(&nobody, &of_a.id).await,
            format!("product {nobody} not found"),
        ),
        (
            service
                .put(
                    &format!("/products/{}/reviews/{nobody}/hidden", a.id),
                    json!(true),
                )
                .await,
            format!("review {nobody} of product {} not found", a.id),
        ),
        (
            service
                .put(
                    &format!("/products/{}/reviews/{}/hidden", b.id, of_a.id),
                    json!(true),
                )
                .await,
            format!("review {} of product {} not found", of_a.id, b.id),
        ),
    ] {
        let (status, body) = Service::error(response).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{says}: {body:?}");
        assert_eq!(body.error, "not_found");
        assert_eq!(body.message, says);
    }
    // The product is untouched by the attempts: no vote counted, nothing hidden.
    let page = service.product(&a.id).await;
    assert_eq!(page.total_reviews, 1);
    assert_eq!(page.most_helpful, std::slice::from_ref(&of_a));
    assert_eq!(page.recent_reviews, [of_a]);
    assert_eq!(service.product(&b.id).await.total_reviews, 0);
    let (status, body) = Service::error(service.get("/reviews").await).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body.message, "no such route");
    // The nonexistent product was not created by the POST to it.
    let (status, _) = Service::error(service.get(&format!("/products/{nobody}")).await).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn taken_ids_are_409_and_a_retried_post_is_stored_once() {
    for (mode, service) in services().await {
        let id = ObjectId::new().to_hex();
        let created = service
            .post("/products", json!({ "name": "a", "id": id }))
            .await;
        assert_eq!(created.status(), StatusCode::CREATED, "{mode:?}");
        let again = service
            .post("/products", json!({ "name": "b", "id": id }))
            .await;
        let (status, body) = Service::error(again).await;
        assert_eq!(status, StatusCode::CONFLICT, "{mode:?}: {body:?}");
        assert_eq!(body.message, format!("product {id} already exists"));
        assert_eq!(service.product(&id).await.name, "a");

        let other = service.create_product("other").await;
        let r = review(5_000);
        service.post_review(&id, &r).await;
        // The same review posted again (a retry) is stored and counted once.
        service.post_review(&id, &r).await;
        let page = service.product(&id).await;
        assert_eq!(page.total_reviews, 1, "{mode:?}");
        assert_eq!(page.recent_reviews, [out(&r)]);
        assert_eq!(page.most_helpful, [out(&r)]);
        // Its id posted to another product is taken.
        let response = service
            .post(&format!("/products/{}/reviews", other.id), request_body(&r))
            .await;
        let (status, body) = Service::error(response).await;
        assert_eq!(status, StatusCode::CONFLICT, "{mode:?}: {body:?}");
        assert_eq!(
            body.message,
            format!(
                "review {} belongs to another product, not {}",
                r.id, other.id
            )
        );
        assert_eq!(service.product(&other.id).await.total_reviews, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_posts_keep_the_subset_and_the_count_exact() {
    const POSTS: usize = 32;
    for (mode, service) in services().await {
        let product = service.create_product("busy").await;
        let base = 1_700_000_000_000;
        let mut reviews: Vec<Review> = (0..POSTS as i64)
            .map(|i| review(base + (i % 11) * 1_000))
            .collect();
        reviews.shuffle(&mut rand::rng());
        let started = std::time::Instant::now();
        let posted = futures::future::join_all(reviews.iter().map(|r| {
            let service = &service;
            let path = format!("/products/{}/reviews", product.id);
            async move { service.post(&path, request_body(r)).await }
        }))
        .await;
        for response in posted {
            assert_eq!(response.status(), StatusCode::CREATED, "{mode:?}");
        }
        eprintln!(
            "{mode:?}: {POSTS} concurrent POSTs in {:?}",
            started.elapsed()
        );

        let expected = newest_first(&reviews);
        let page = service.product(&product.id).await;
        assert_eq!(page.total_reviews, POSTS as i64, "{mode:?}");
        assert_eq!(page.recent_reviews, expected[..5], "{mode:?}");
        assert_eq!(page.most_helpful, expected[..3], "{mode:?}");
        let (all, _) = service.all_reviews(&product.id, 6).await;
        assert_eq!(all, expected, "{mode:?}");
        let (mut back, _) = service.all_reviews_backward(&product.id, 6).await;
        back.reverse();
        assert_eq!(back, expected, "{mode:?}");
        for view in [Product::RECENT_REVIEWS, Product::MOST_HELPFUL] {
            assert_subset_true(&service.store, view, &Bson::ObjectId(oid(&product.id))).await;
        }
    }
}

/// The visible reviews of `model` in the order of the view `field`, as the service lists them.
fn visible_in(field: &str, model: &[Review]) -> Vec<ReviewOut> {
    let mut visible: Vec<Review> = model.iter().filter(|r| !r.hidden).cloned().collect();
    visible.sort_by(|a, b| Product::expected_order(field, a, b));
    visible.iter().map(out).collect()
}

/// The product page (both views and the count) and every review page, both ways, show what
/// `model` (every review of `product`, with its votes and flag) says; and the stored views
/// pass the store's own check.
async fn assert_shows(service: &Service, product: &str, model: &[Review], when: &str) {
    let latest = visible_in("recent_reviews", model);
    let helpful = visible_in("most_helpful", model);
    let page = service.product(product).await;
    assert_eq!(page.total_reviews, latest.len() as i64, "{when}");
    assert_eq!(page.recent_reviews, latest[..latest.len().min(5)], "{when}");
    assert_eq!(page.most_helpful, helpful[..helpful.len().min(3)], "{when}");
    // Pages of 4 cross from the embedded reviews into the collection.
    let (all, _) = service.all_reviews(product, 4).await;
    assert_eq!(all, latest, "{when}");
    let (mut back, _) = service.all_reviews_backward(product, 4).await;
    back.reverse();
    assert_eq!(back, latest, "{when}");
    for view in [Product::RECENT_REVIEWS.spec(), Product::MOST_HELPFUL.spec()] {
        let drift = service
            .store
            .raw()
            .children(view)
            .check(&Bson::ObjectId(oid(product)))
            .await
            .unwrap();
        assert!(
            drift.is_clean(),
            "{when}: `{}` drifted: {drift:?}",
            view.field
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_votes_all_count_and_rank_the_most_helpful() {
    const CLIENTS: usize = 8;
    const VOTES_EACH: usize = 25;
    for (mode, service) in services().await {
        let product = service.create_product("voted").await;
        // 6 reviews a minute apart, 0 the oldest.
        let mut model: Vec<Review> = (0..6)
            .map(|i| review(1_700_000_000_000 + i * 60_000))
            .collect();
        for r in &model {
            service.post_review(&product.id, r).await;
        }
        // 200 votes on 3 reviews: the oldest leads; 3 and 4 tie, and the newer (4) ranks first.
        let shares = [(0, 80), (3, 60), (4, 60)];
        let mut votes: Vec<usize> = shares
            .iter()
            .flat_map(|&(i, n)| std::iter::repeat_n(i, n))
            .collect();
        assert_eq!(votes.len(), CLIENTS * VOTES_EACH);
        votes.shuffle(&mut rand::rng());

        // Each client votes one at a time; the clients at once.
        let started = std::time::Instant::now();
        let clients = votes.chunks(VOTES_EACH).map(|chunk| {
            let (service, model, product) = (&service, &model, &product.id);
            async move {
                for &i in chunk {
                    let response = service.vote(product, &model[i].id.to_hex()).await;
                    assert_eq!(response.status(), StatusCode::NO_CONTENT, "{mode:?}");
                }
            }
        });
        futures::future::join_all(clients).await;
        eprintln!(
            "{mode:?}: {CLIENTS} clients x {VOTES_EACH} votes in {:?}",
            started.elapsed()
        );

        for (i, n) in shares {
            model[i].helpful = n as i64;
        }
        let page = service.product(&product.id).await;
        let ranked: Vec<_> = page
            .most_helpful
            .iter()
            .map(|r| (r.id.clone(), r.helpful))
            .collect();
        let hex = |i: usize| model[i].id.to_hex();
        assert_eq!(
            ranked,
            [(hex(0), 80), (hex(4), 60), (hex(3), 60)],
            "{mode:?}"
        );
        // The copies in `recent_reviews` and the collection's reviews have every vote too.
        assert_shows(&service, &product.id, &model, &format!("{mode:?}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hidden_review_leaves_the_views_the_count_and_the_pages_and_comes_back_when_shown() {
    for (mode, service) in services().await {
        let product = service.create_product("moderated").await;
        let id = product.id.as_str();
        // 9 reviews a minute apart, 0 the oldest: `recent_reviews` is 8 to 4.
        let mut model: Vec<Review> = (0..9)
            .map(|i| review(1_700_000_000_000 + i * 60_000))
            .collect();
        for r in &model {
            service.post_review(id, r).await;
        }
        // `most_helpful` is 8, 2, 5; 0 is next.
        for (i, n) in [(8, 4), (2, 3), (5, 2), (0, 1)] {
            for _ in 0..n {
                let response = service.vote(id, &model[i].id.to_hex()).await;
                assert_eq!(response.status(), StatusCode::NO_CONTENT);
            }
            model[i].helpful = n;
        }
        assert_shows(&service, id, &model, &format!("{mode:?}, voted")).await;

        // The newest and most helpful: both views backfill (3 and 0 move up), the count drops.
        service.set_hidden(id, &model[8], true).await;
        model[8].hidden = true;
        let page = service.product(id).await;
        assert_eq!(page.total_reviews, 8, "{mode:?}");
        assert_eq!(page.recent_reviews.last().unwrap().id, model[3].id.to_hex());
        assert_eq!(page.most_helpful.last().unwrap().id, model[0].id.to_hex());
        assert_shows(&service, id, &model, &format!("{mode:?}, 8 hidden")).await;

        // One in neither view: only the count and the pages change. Hiding it twice counts once.
        for _ in 0..2 {
            service.set_hidden(id, &model[1], true).await;
        }
        service.set_hidden(id, &model[8], true).await;
        model[1].hidden = true;
        assert_shows(&service, id, &model, &format!("{mode:?}, 1 and 8 hidden")).await;

        // Hidden reviews still take votes and edits, and stay hidden.
        for _ in 0..3 {
            let response = service.vote(id, &model[1].id.to_hex()).await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT);
        }
        model[1].helpful = 3;
        model[8].comment = "edited while hidden".into();
        let mut edit = request_body(&model[8]);
        edit.as_object_mut().unwrap().remove("id");
        let response = service
            .put(&format!("/products/{id}/reviews/{}", model[8].id), edit)
            .await;
        assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
        assert_eq!(response.json::<ReviewOut>().await.unwrap(), out(&model[8]));
        assert_shows(
            &service,
            id,
            &model,
            &format!("{mode:?}, votes while hidden"),
        )
        .await;

        // A body that is not a bool changes nothing.
        let hidden = format!("/products/{id}/reviews/{}/hidden", model[8].id);
        for body in [json!("false"), json!({ "hidden": false }), json!(null)] {
            let (status, error) = Service::error(service.put(&hidden, body.clone()).await).await;
            assert!(status.is_client_error(), "{body}: {status}");
            assert_eq!(error.error, "bad_request", "{body}");
        }

        // Shown again: each back in its place, with the votes it took while hidden (1 ties 2
        // and ranks after it, the newer).
        service.set_hidden(id, &model[1], false).await;
        model[1].hidden = false;
        service.set_hidden(id, &model[8], false).await;
        model[8].hidden = false;
        let page = service.product(id).await;
        let ranked: Vec<_> = page.most_helpful.iter().map(|r| r.id.clone()).collect();
        let hex = |i: usize| model[i].id.to_hex();
        assert_eq!(ranked, [hex(8), hex(2), hex(1)], "{mode:?}");
        assert_eq!(page.total_reviews, 9, "{mode:?}");
        assert_shows(&service, id, &model, &format!("{mode:?}, shown again")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_stored_data_is_a_500_that_names_the_document_only_in_the_log() {
    let service = Service::start(Store::new(&common::replica_db().await)).await;
    let id = ObjectId::new();
    service
        .store
        .database()
        .collection::<bson::Document>("products")
        .insert_one(doc! {
            "_id": id,
            "name": 5,
            "recent_reviews": [],
            "most_helpful": [],
            "total_reviews": 0,
        })
        .await
        .unwrap();

    let response = service.get(&format!("/products/{id}")).await;
    let (status, body) = Service::error(response).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body.error, "internal");
    assert_eq!(body.message, "internal server error");

    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
    let line = log
        .lines()
        .find(|l| l.contains(&id.to_hex()))
        .unwrap_or_else(|| panic!("no log line names {id}:\n{log}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("field=name"), "{line}");
    assert!(line.contains("collection=products"), "{line}");
}
