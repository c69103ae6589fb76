//! The service's model, routes and error mapping; `main.rs` serves it and `tests/it/service.rs`
//! starts the same router against the test server.
//!
//! | route | what |
//! |---|---|
//! | `POST /products` | create a product: `{"name": …, "id"?: hex}` → 201 |
//! | `GET /products/{id}` | the product page: the product, its 5 latest and 3 most helpful visible reviews and the count of visible reviews, in one query |
//! | `GET /products/{id}/reviews?first=20&after=<token>` | visible reviews, newest first, forward from a cursor (or the start) |
//! | `GET /products/{id}/reviews?last=20&before=<token>` | visible reviews, newest first, backward from a cursor (or the end) |
//! | `POST /products/{id}/reviews` | push a review: `{"author", "rating", "comment", "date"?, "id"?}` → 201 |
//! | `PUT /products/{id}/reviews/{review_id}` | edit a review: `{"author", "rating", "comment", "date"}`; its votes and flag stay |
//! | `DELETE /products/{id}/reviews/{review_id}` | delete a review → 204 |
//! | `POST /products/{id}/reviews/{review_id}/votes` | one helpful vote → 204 |
//! | `PUT /products/{id}/reviews/{review_id}/hidden` | moderation: `true` hides the review, `false` shows it again → 204 |
//!
//! Only visible reviews are shown: a hidden one is in neither view of the product page, not in
//! `total_reviews` and on no review page, and the next one moves up in its place.
//!
//! A page of reviews is `{"items": [...], "page_info": {"has_next_page", "has_previous_page",
//! "start_cursor", "end_cursor"}}` ([`ReviewPage`]). Ids are 24-digit hex ObjectIds and dates
//! RFC 3339 strings. Every error is a JSON body
//! `{"error": <code>, "message": <text>}` with the status [`ApiError::into_response`] chooses.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use bson::oid::ObjectId;
use bson::{Bson, DateTime};
use serde::{Deserialize, Serialize};
use serde_path_to_error::Segment;
use subset::bson;
use subset::{Child, Children, Cursor, Page, PageRequest, Store, Subset};

/// A review as stored: in the `reviews` collection, and in its product while it is among the
/// latest five or the three most helpful visible ones.
#[derive(Debug, Clone, Serialize, Deserialize, Child)]
pub struct Review {
    /// The review's `_id`.
    #[serde(rename = "_id")]
    pub id: ObjectId,
    /// Who wrote it.
    pub author: String,
    /// From 1 to 5.
    pub rating: i32,
    /// The text.
    pub comment: String,
    /// When it was written; the subset keeps the latest.
    pub date: DateTime,
    /// How many readers found it helpful: one `$inc` per vote, so that concurrent votes all
    /// count. `most_helpful` is ordered by it.
    #[serde(default)]
    pub helpful: i64,
    /// Hidden by a moderator: kept, with its votes, but in no view, count or page until it is
    /// shown again. (`default` only reads a review stored without the field: the views select
    /// `hidden: false`, which a missing field does not match, so every review written here
    /// holds it.)
    #[serde(default)]
    pub hidden: bool,
}

/// A product as stored, with two views of its visible reviews and their count embedded.
///
/// Both views are filtered by `!hidden`: a review a moderator hides leaves them (the next one
/// moves up) and is no longer counted; shown again, it is back in its place.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
pub struct Product {
    /// The product's `_id`.
    #[serde(rename = "_id")]
    pub id: ObjectId,
    /// Its name.
    pub name: String,
    /// The 5 latest visible reviews, newest first; the review pages page this view.
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc",
        filter = "!hidden",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    /// The 3 visible reviews with the most helpful votes, the newest first among equals.
    #[subset(
        child = "reviews",
        keep = 3,
        sort = "helpful desc, date desc",
        filter = "!hidden"
    )]
    pub most_helpful: Vec<Review>,
    /// How many visible reviews the product has: hidden ones are not counted.
    #[serde(default)]
    pub total_reviews: i64,
}

/// The page size when a request names none.
pub const DEFAULT_PAGE_SIZE: u32 = 20;
/// The largest page a request may ask for.
pub const MAX_PAGE_SIZE: u32 = 100;
/// The longest review text accepted; well under what keeps 5 embedded reviews far from
/// MongoDB's 16 MiB document limit.
pub const MAX_COMMENT_CHARS: usize = 4_000;
/// The longest author or product name accepted.
pub const MAX_NAME_CHARS: usize = 200;

/// The router of the whole service, over `store`.
pub fn router(store: Store<Product>) -> Router {
    Router::new()
        .route("/products", post(create_product))
        .route("/products/{id}", get(product_page))
        .route("/products/{id}/reviews", get(reviews).post(post_review))
        .route(
            "/products/{id}/reviews/{review_id}",
            put(edit_review).delete(delete_review),
        )
        .route("/products/{id}/reviews/{review_id}/votes", post(vote))
        .route("/products/{id}/reviews/{review_id}/hidden", put(set_hidden))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .layer(middleware::from_fn(log_request))
        .with_state(store)
}

/// Logs each request with its status and time at `info`.
async fn log_request(request: Request, next: Next) -> Response {
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let start = std::time::Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        %method,
        %uri,
        status = response.status().as_u16(),
        micros = start.elapsed().as_micros() as u64,
        "request"
    );
    response
}

// ---- requests and responses ----

/// `POST /products`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewProduct {
    /// Its name.
    pub name: String,
    /// An `_id` chosen by the client (a retry sends the same one); a new one when absent.
    pub id: Option<String>,
}

/// `POST /products/{id}/reviews` and `PUT /products/{id}/reviews/{review_id}`: what the author
/// writes. Votes and the moderation flag have routes of their own; a new review has no votes
/// and is visible.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    /// Who wrote it.
    pub author: String,
    /// From 1 to 5.
    pub rating: i32,
    /// The text.
    pub comment: String,
    /// RFC 3339; now when a POST leaves it out; required by PUT, which sets every field above.
    pub date: Option<String>,
    /// POST only: an `_id` chosen by the client, so that a retried POST is not stored twice.
    pub id: Option<String>,
}

/// A review in responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewOut {
    /// Hex ObjectId.
    pub id: String,
    /// Who wrote it.
    pub author: String,
    /// From 1 to 5.
    pub rating: i32,
    /// The text.
    pub comment: String,
    /// RFC 3339, in UTC.
    pub date: String,
    /// How many readers found it helpful.
    pub helpful: i64,
}

/// The product page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProductOut {
    /// Hex ObjectId.
    pub id: String,
    /// Its name.
    pub name: String,
    /// How many visible reviews it has.
    pub total_reviews: i64,
    /// The latest visible reviews, newest first.
    pub recent_reviews: Vec<ReviewOut>,
    /// The visible reviews with the most helpful votes, the most first.
    pub most_helpful: Vec<ReviewOut>,
}

/// The query of a review page: `?first=20&after=<token>` forward, `?last=20&before=<token>`
/// backward, each parameter optional within its direction.
///
/// Unknown parameters are refused (400) rather than ignored, so that a client asking for
/// something this service does not do learns so. The tokens are read by [`Cursor`]'s serde impl.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Forward: the page size, from 1 to [`MAX_PAGE_SIZE`]; [`DEFAULT_PAGE_SIZE`] when absent.
    pub first: Option<u32>,
    /// Forward: the `end_cursor` of the page before; the first page when absent.
    pub after: Option<Cursor>,
    /// Backward: the page size, as `first`.
    pub last: Option<u32>,
    /// Backward: the `start_cursor` of the page after; the last page when absent.
    pub before: Option<Cursor>,
}

impl PageQuery {
    /// The one place a query string becomes the runtime's [`PageRequest`]: parses `query`,
    /// refuses a mix of directions, and checks the page size.
    ///
    /// # Errors
    ///
    /// [`ApiError::InvalidCursor`] naming `after` or `before` when its token is not a cursor;
    /// [`ApiError::BadRequest`] for an unknown or repeated parameter, a size that is not from 1
    /// to [`MAX_PAGE_SIZE`], or parameters of both directions.
    pub fn request(query: Option<&str>) -> Result<PageRequest, ApiError> {
        let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes());
        let parsed = serde_path_to_error::deserialize::<_, PageQuery>(
            serde_urlencoded::Deserializer::new(pairs),
        );
        let query = parsed.map_err(|e| {
            // Only a cursor's own `Deserialize` fails at `after` or `before`: a bad token.
            let parameter = match e.path().iter().next() {
                Some(Segment::Map { key }) if key == "after" => Some("after"),
                Some(Segment::Map { key }) if key == "before" => Some("before"),
                _ => None,
            };
            match parameter {
                Some(parameter) => ApiError::InvalidCursor {
                    parameter,
                    message: e.into_inner().to_string(),
                },
                None => ApiError::BadRequest(format!("bad query: {e}")),
            }
        })?;
        query.into_request()
    }

    fn into_request(self) -> Result<PageRequest, ApiError> {
        let given = |pairs: [(&str, bool); 2]| -> Vec<String> {
            pairs
                .into_iter()
                .filter(|(_, given)| *given)
                .map(|(name, _)| format!("`{name}`"))
                .collect()
        };
        let forward = given([
            ("first", self.first.is_some()),
            ("after", self.after.is_some()),
        ]);
        let backward = given([
            ("last", self.last.is_some()),
            ("before", self.before.is_some()),
        ]);
        if !forward.is_empty() && !backward.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "{} cannot be used together: `first`/`after` page forward, `last`/`before` backward",
                and_list(&[forward, backward].concat())
            )));
        }
        Ok(match (self.after, self.before) {
            (Some(after), _) => PageRequest::after(after, page_size("first", self.first)?),
            (_, Some(before)) => PageRequest::before(before, page_size("last", self.last)?),
            (None, None) if self.last.is_some() => PageRequest::last(page_size("last", self.last)?),
            (None, None) => PageRequest::first(page_size("first", self.first)?),
        })
    }
}

/// The parameter that carried `request`'s cursor, for an error about it.
fn cursor_parameter(request: &PageRequest) -> &'static str {
    if request.is_backward() {
        "before"
    } else {
        "after"
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(names: &[String]) -> String {
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((only, _)) => only.clone(),
        None => String::new(),
    }
}

/// The page size a parameter asks for, [`DEFAULT_PAGE_SIZE`] when absent.
fn page_size(parameter: &str, value: Option<u32>) -> Result<u32, ApiError> {
    let size = value.unwrap_or(DEFAULT_PAGE_SIZE);
    if !(1..=MAX_PAGE_SIZE).contains(&size) {
        return Err(ApiError::BadRequest(format!(
            "`{parameter}` must be from 1 to {MAX_PAGE_SIZE}, not {size}"
        )));
    }
    Ok(size)
}

/// A page of reviews, newest first (a backward page too), shaped as a Relay connection:
/// `{"items": [...], "page_info": {...}}`.
///
/// `items` rather than Relay's `edges` with a cursor each: a token is some 110 characters, about
/// as long as a short review, so edges would nearly double every page for the sake of resuming
/// from its middle, which a client paging through reviews does not do; it goes on from the
/// page's ends, `page_info`'s cursors. (The runtime has a cursor per item, [`Page::cursors`],
/// should a route need them.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewPage {
    /// The reviews on this page.
    pub items: Vec<ReviewOut>,
    /// Where the page stands and how to go on from it.
    pub page_info: PageInfo,
}

/// Relay's `PageInfo`, with the cursors as tokens ([`Cursor`]'s serde impl).
///
/// The direction the page was read in is exact; the other way is `true` for a page read from a
/// cursor (its child was there) and `false` for one read from either end (see [`Page`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageInfo {
    /// Whether reviews follow: pass `end_cursor` as `after` for them.
    pub has_next_page: bool,
    /// Whether reviews come before: pass `start_cursor` as `before` for them.
    pub has_previous_page: bool,
    /// The first review's cursor; `null` on an empty page.
    pub start_cursor: Option<Cursor>,
    /// The last review's cursor; `null` on an empty page.
    pub end_cursor: Option<Cursor>,
}

impl ReviewPage {
    /// The response for `page`: the one place a runtime page becomes JSON.
    fn new(page: &Page<Review>) -> Result<Self, ApiError> {
        Ok(ReviewPage {
            items: page
                .items
                .iter()
                .map(ReviewOut::new)
                .collect::<Result<_, _>>()?,
            page_info: PageInfo {
                has_next_page: page.has_next(),
                has_previous_page: page.has_previous(),
                start_cursor: page.cursors().first().cloned(),
                end_cursor: page.cursors().last().cloned(),
            },
        })
    }
}

impl ReviewOut {
    fn new(review: &Review) -> Result<Self, ApiError> {
        Ok(ReviewOut {
            id: review.id.to_hex(),
            author: review.author.clone(),
            rating: review.rating,
            comment: review.comment.clone(),
            date: rfc3339(review)?,
            helpful: review.helpful,
        })
    }
}

impl ProductOut {
    fn new(product: &Product) -> Result<Self, ApiError> {
        Ok(ProductOut {
            id: product.id.to_hex(),
            name: product.name.clone(),
            total_reviews: product.total_reviews,
            recent_reviews: outs(&product.recent_reviews)?,
            most_helpful: outs(&product.most_helpful)?,
        })
    }
}

fn outs(reviews: &[Review]) -> Result<Vec<ReviewOut>, ApiError> {
    reviews.iter().map(ReviewOut::new).collect()
}

/// A review's date as RFC 3339. A stored date outside the years 0 to 9999 has none: a 500, with
/// the review named in the log.
fn rfc3339(review: &Review) -> Result<String, ApiError> {
    review.date.try_to_rfc3339_string().map_err(|_| {
        ApiError::Internal(format!(
            "review {}: field `date` is {}, which RFC 3339 cannot express",
            review.id, review.date
        ))
    })
}

fn object_id(what: &str, hex: &str) -> Result<ObjectId, ApiError> {
    ObjectId::parse_str(hex).map_err(|_| {
        ApiError::BadRequest(format!(
            "{what} `{hex}` is not an id: ids are 24 hexadecimal digits"
        ))
    })
}

fn text(what: &str, value: String, max: usize) -> Result<String, ApiError> {
    let chars = value.chars().count();
    if value.trim().is_empty() || chars > max {
        return Err(ApiError::BadRequest(format!(
            "`{what}` must be from 1 to {max} characters, not {chars}"
        )));
    }
    Ok(value)
}

impl ReviewBody {
    /// The review this body describes, with `id`, and `date` when the body has none.
    fn into_review(self, id: ObjectId, default_date: Option<DateTime>) -> Result<Review, ApiError> {
        if !(1..=5).contains(&self.rating) {
            return Err(ApiError::BadRequest(format!(
                "`rating` must be from 1 to 5, not {}",
                self.rating
            )));
        }
        let date = match (self.date, default_date) {
            (Some(date), _) => DateTime::parse_rfc3339_str(&date).map_err(|_| {
                ApiError::BadRequest(format!(
                    "`date` `{date}` is not an RFC 3339 date, e.g. `2024-05-01T12:00:00Z`"
                ))
            })?,
            (None, Some(now)) => now,
            (None, None) => {
                return Err(ApiError::BadRequest(
                    "`date` is required: a PUT replaces the whole review".into(),
                ))
            }
        };
        Ok(Review {
            id,
            author: text("author", self.author, MAX_NAME_CHARS)?,
            rating: self.rating,
            comment: text("comment", self.comment, MAX_COMMENT_CHARS)?,
            date,
            helpful: 0,
            hidden: false,
        })
    }
}

// ---- handlers ----

type Reviews<'a> = Children<'a, Product, Review>;

fn reviews_of(store: &Store<Product>) -> Reviews<'_> {
    store.children(Product::RECENT_REVIEWS)
}

async fn create_product(
    State(store): State<Store<Product>>,
    body: Result<Json<NewProduct>, JsonRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Json(body) = body?;
    let id = match &body.id {
        Some(hex) => object_id("product id", hex)?,
        None => ObjectId::new(),
    };
    let product = Product {
        id,
        name: text("name", body.name, MAX_NAME_CHARS)?,
        recent_reviews: Vec::new(),
        most_helpful: Vec::new(),
        total_reviews: 0,
    };
    store.insert(&product).await.map_err(|e| match e {
        subset::Error::ParentExists { .. } => {
            ApiError::Conflict(format!("product {id} already exists"))
        }
        other => other.into(),
    })?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/products/{id}"))],
        Json(ProductOut::new(&product)?),
    ))
}

async fn product_page(
    State(store): State<Store<Product>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<ProductOut>, ApiError> {
    let Path(id) = path?;
    let id = object_id("product id", &id)?;
    match store.get(&id).await? {
        Some(product) => Ok(Json(ProductOut::new(&product)?)),
        None => Err(ApiError::NotFound(format!("product {id} not found"))),
    }
}

async fn reviews(
    State(store): State<Store<Product>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<ReviewPage>, ApiError> {
    let Path(id) = path?;
    let id = object_id("product id", &id)?;
    let request = PageQuery::request(query.as_deref())?;
    let page = reviews_of(&store)
        .page(&id, &request)
        .await
        .map_err(|e| match e {
            // A token that decodes but is not this product's: name the parameter it came in.
            subset::Error::InvalidCursor { .. } => ApiError::InvalidCursor {
                parameter: cursor_parameter(&request),
                message: e.to_string(),
            },
            other => other.into(),
        })?;
    Ok(Json(ReviewPage::new(&page)?))
}

async fn post_review(
    State(store): State<Store<Product>>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<ReviewBody>, JsonRejection>,
) -> Result<(StatusCode, Json<ReviewOut>), ApiError> {
    let Path(id) = path?;
    let id = object_id("product id", &id)?;
    let Json(body) = body?;
    let review_id = match &body.id {
        Some(hex) => object_id("review id", hex)?,
        None => ObjectId::new(),
    };
    let review = body.into_review(review_id, Some(DateTime::now()))?;
    reviews_of(&store).push(&id, &review).await?;
    Ok((StatusCode::CREATED, Json(ReviewOut::new(&review)?)))
}

/// The product and review ids of a `/products/{id}/reviews/{review_id}…` path.
fn review_path(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(ObjectId, ObjectId), ApiError> {
    let Path((id, review_id)) = path?;
    Ok((
        object_id("product id", &id)?,
        object_id("review id", &review_id)?,
    ))
}

async fn edit_review(
    State(store): State<Store<Product>>,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Result<Json<ReviewBody>, JsonRejection>,
) -> Result<Json<ReviewOut>, ApiError> {
    let (id, review_id) = review_path(path)?;
    let Json(body) = body?;
    if body.id.is_some() {
        return Err(ApiError::BadRequest(
            "`id` cannot be changed: the review's id is in its path".into(),
        ));
    }
    let edit = body.into_review(review_id, None)?;
    // A patch of what the author wrote rather than a replacement of the review: its votes and
    // its moderation flag stay, and votes cast meanwhile are not lost.
    let reviews = reviews_of(&store);
    reviews
        .patch(&id, &review_id)
        .set(Review::AUTHOR, edit.author)
        .set(Review::RATING, edit.rating)
        .set(Review::COMMENT, edit.comment)
        .set(Review::DATE, edit.date)
        .await?;
    Ok(Json(ReviewOut::new(
        &stored_review(&store, &reviews, id, review_id).await?,
    )?))
}

/// The review as stored in the child collection, for a response that shows its votes (a patch
/// returns nothing).
async fn stored_review(
    store: &Store<Product>,
    reviews: &Reviews<'_>,
    id: ObjectId,
    review_id: ObjectId,
) -> Result<Review, ApiError> {
    let spec = reviews.spec();
    let stored = store
        .database()
        .collection::<Review>(spec.child_collection)
        .find_one(bson::doc! { "_id": review_id, spec.key: id })
        .await
        .map_err(|source| subset::Error::Mongo {
            collection: spec.child_collection.to_owned(),
            source: Box::new(source),
        })?;
    // Deleted since the patch.
    stored
        .ok_or_else(|| ApiError::NotFound(format!("review {review_id} of product {id} not found")))
}

async fn delete_review(
    State(store): State<Store<Product>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let (id, review_id) = review_path(path)?;
    reviews_of(&store).remove(&id, &review_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One helpful vote: an increment on the server, so that votes cast at once all count; the
/// review moves up in `most_helpful` past those it now outnumbers.
async fn vote(
    State(store): State<Store<Product>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let (id, review_id) = review_path(path)?;
    reviews_of(&store)
        .patch(&id, &review_id)
        .inc(Review::HELPFUL, 1)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Moderation: the body `true` hides the review, `false` shows it again. Both views, the count
/// and the review pages follow; setting the flag it already has changes nothing.
async fn set_hidden(
    State(store): State<Store<Product>>,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Result<Json<bool>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let (id, review_id) = review_path(path)?;
    let Json(hidden) = body?;
    reviews_of(&store)
        .patch(&id, &review_id)
        .set(Review::HIDDEN, hidden)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- errors ----

/// Why a request failed; [`ApiError::into_response`] turns it into a status and a JSON body.
#[derive(Debug)]
pub enum ApiError {
    /// A path, query or body this service cannot take.
    BadRequest(String),
    /// The token in `after` or `before` is not a cursor of this product's reviews.
    InvalidCursor {
        /// `after` or `before`.
        parameter: &'static str,
        /// Why, in the runtime's words (`invalid page cursor: …`).
        message: String,
    },
    /// A JSON body axum could not read, with the status it chose (400, 415, 422).
    Rejected(StatusCode, String),
    /// No such product, review or route.
    NotFound(String),
    /// The id is taken.
    Conflict(String),
    /// A stored value the responses cannot express.
    Internal(String),
    /// The store's error, mapped to a status by its variant.
    Store(subset::Error),
}

impl From<subset::Error> for ApiError {
    fn from(error: subset::Error) -> Self {
        ApiError::Store(error)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        ApiError::Rejected(rejection.status(), rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        // A path that matched a route but does not decode (bad percent-encoding): the client's.
        ApiError::BadRequest(rejection.body_text())
    }
}

/// The body of every error response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable code: `bad_request`, `invalid_cursor`, `not_found`, `conflict`,
    /// `outcome_unknown` (503: the write may or may not have happened), `internal`.
    pub error: String,
    /// What went wrong, for people; never the content of stored documents.
    pub message: String,
}

/// How an `_id` reads in a message: the hex of an ObjectId, else its extended JSON.
fn show(id: &Bson) -> String {
    match id {
        Bson::ObjectId(id) => id.to_hex(),
        other => other.to_string(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        use subset::Error as E;
        let (status, code, message) = match self {
            ApiError::BadRequest(message) => (StatusCode::BAD_REQUEST, "bad_request", message),
            ApiError::Rejected(status, message) => (status, "bad_request", message),
            ApiError::NotFound(message) => (StatusCode::NOT_FOUND, "not_found", message),
            ApiError::Conflict(message) => (StatusCode::CONFLICT, "conflict", message),
            ApiError::InvalidCursor { parameter, message } => (
                StatusCode::BAD_REQUEST,
                "invalid_cursor",
                format!("`{parameter}` is not a cursor of this product's reviews: {message}"),
            ),
            // Every route that takes a cursor names its parameter above; this is the fallback.
            ApiError::Store(e @ E::InvalidCursor { .. }) => {
                (StatusCode::BAD_REQUEST, "invalid_cursor", e.to_string())
            }
            ApiError::Store(e @ (E::InvalidPageSize { .. } | E::InvalidId { .. })) => {
                (StatusCode::BAD_REQUEST, "bad_request", e.to_string())
            }
            ApiError::Store(E::ParentNotFound { id, .. }) => (
                StatusCode::NOT_FOUND,
                "not_found",
                format!("product {} not found", show(&id)),
            ),
            ApiError::Store(E::ChildNotFound { parent, id, .. }) => (
                StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "review {} of product {} not found",
                    show(&id),
                    show(&parent)
                ),
            ),
            // The write may or may not have happened: the client may retry (a review posted
            // with its id is stored once; a vote retried may count twice).
            ApiError::Store(e @ E::OutcomeUnknown { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "outcome_unknown",
                e.to_string(),
            ),
            // The write asked more than the product can hold (a review too large to embed, a
            // total past its type): refused whole, nothing written; retrying cannot help.
            ApiError::Store(e @ (E::SubsetTooLarge { .. } | E::NumberOverflow { .. })) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "unprocessable",
                e.to_string(),
            ),
            ApiError::Store(E::ChildOwnedElsewhere { id, parent, .. }) => (
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "review {} belongs to another product, not {}",
                    show(&id),
                    show(&parent)
                ),
            ),
            // Stored data of the wrong shape: the document and field go to the log, for the
            // operator; the client learns only that the server failed.
            ApiError::Store(
                E::MalformedParent {
                    collection,
                    id,
                    field,
                    problem,
                }
                | E::MalformedChild {
                    collection,
                    id,
                    field,
                    problem,
                    ..
                },
            ) => {
                tracing::error!(
                    %collection,
                    id = %show(&id),
                    %field,
                    %problem,
                    "stored document does not match the model"
                );
                internal()
            }
            ApiError::Internal(message) => {
                tracing::error!(%message, "stored data the response cannot express");
                internal()
            }
            ApiError::Store(other) => {
                tracing::error!(error = %other, "request failed");
                internal()
            }
        };
        let body = ErrorBody {
            error: code.to_owned(),
            message,
        };
        (status, Json(body)).into_response()
    }
}

/// The status and body of every server-side failure: nothing about the data.
fn internal() -> (StatusCode, &'static str, String) {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal server error".to_owned(),
    )
}
