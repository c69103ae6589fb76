//! The benchmark's data: products and reviews, generated deterministically from a seed so that
//! every layout holds exactly the same reviews, and the four layouts that store them.

use bson::oid::ObjectId;
use bson::DateTime;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Child, Subset};

/// The parent collection of the fully embedded layout: every review inside its product.
pub const EMBEDDED: &str = "products_embedded";
/// The parent collection of the subset layout (this library); its children are in [`REVIEWS`].
pub const SUBSET: &str = "products";
/// The parent collection of the referenced layout: no review inside, all of them in [`REVIEWS`].
pub const REFERENCED: &str = "products_referenced";
/// The review collection, shared by the subset and the referenced layouts (the same documents,
/// with the same index, so that both read exactly the same reviews).
pub const REVIEWS: &str = "reviews";

/// How many reviews the product page shows, and the subset keeps.
pub const PAGE_REVIEWS: usize = 10;

/// Reviews are written in chunks of this many per product, and the chunks of all products
/// interleaved, so that one product's reviews end up spread over the collection as they would
/// when they arrive over months.
pub const CHUNK: usize = 50;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
pub struct Review {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub author: String,
    pub rating: i32,
    pub helpful: i32,
    pub comment: String,
    pub date: DateTime,
}

/// The subset layout's product: the library's model.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
pub struct Product {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    pub description: String,
    pub category: String,
    pub price: f64,
    #[subset(
        child = "reviews",
        keep = 10,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

/// The product fields every layout shares, and the referenced layout's whole product.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProductInfo {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    pub description: String,
    pub category: String,
    pub price: f64,
    pub total_reviews: i64,
}

/// The fully embedded product (all reviews, newest first), or a product page read from the
/// referenced layout with its latest reviews attached.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProductWithReviews {
    #[serde(flatten)]
    pub info: ProductInfo,
    pub reviews: Vec<Review>,
}

/// A review as stored in the review collection by hand-written code: the review and its
/// product's `_id`.
#[derive(Debug, Clone, Serialize)]
pub struct StoredReview<'a> {
    #[serde(flatten)]
    pub review: &'a Review,
    pub product_id: ObjectId,
}

const WORDS: &[&str] = &[
    "grinds",
    "evenly",
    "a",
    "bit",
    "loud",
    "but",
    "worth",
    "it",
    "the",
    "burrs",
    "are",
    "sharp",
    "and",
    "easy",
    "to",
    "clean",
    "espresso",
    "tastes",
    "sweeter",
    "than",
    "before",
    "hopper",
    "holds",
    "enough",
    "beans",
    "for",
    "week",
    "motor",
    "runs",
    "cool",
    "after",
    "months",
    "of",
    "daily",
    "use",
    "would",
    "buy",
    "again",
    "fine",
    "setting",
    "clumps",
    "slightly",
    "retention",
    "is",
    "low",
    "build",
    "quality",
    "feels",
    "solid",
];

/// Words from [`WORDS`] until the text is at least a random length from `min..=max` (it ends
/// within one word of it).
pub fn sentence(rng: &mut StdRng, min: usize, max: usize) -> String {
    let len = rng.random_range(min..=max);
    let mut s = String::with_capacity(len + 12);
    while s.len() < len {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    s
}

/// The data set: `products` products with `min..=max` reviews each, from `seed`.
#[derive(Debug, Clone, Copy)]
pub struct DataSet {
    pub products: usize,
    pub min_reviews: usize,
    pub max_reviews: usize,
    pub seed: u64,
}

/// Reviews are dated within the three years before this instant (2025-01-01), so that runs are
/// reproducible and new reviews written by the benchmark sort first.
const NOW_MILLIS: i64 = 1_735_689_600_000;
const SPAN_MILLIS: i64 = 3 * 365 * 24 * 3_600_000;

impl DataSet {
    fn rng(&self, a: u64, b: u64) -> StdRng {
        StdRng::seed_from_u64(
            self.seed
                ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
        )
    }

    /// The `_id` of product `i`.
    pub fn product_id(&self, i: usize) -> ObjectId {
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
        bytes[4..12].copy_from_slice(&(i as u64).to_be_bytes());
        ObjectId::from_bytes(bytes)
    }

    /// How many reviews product `i` has.
    pub fn review_count(&self, i: usize) -> usize {
        self.rng(i as u64, u64::MAX)
            .random_range(self.min_reviews..=self.max_reviews)
    }

    /// How many chunks of [`CHUNK`] reviews product `i` is written in.
    pub fn chunks(&self, i: usize) -> usize {
        self.review_count(i).div_ceil(CHUNK)
    }

    /// The total number of reviews.
    pub fn total_reviews(&self) -> usize {
        (0..self.products).map(|i| self.review_count(i)).sum()
    }

    /// Product `i`'s own fields.
    pub fn info(&self, i: usize) -> ProductInfo {
        let mut rng = self.rng(i as u64, u64::MAX - 1);
        ProductInfo {
            id: self.product_id(i),
            name: format!("Product {i:06} {}", sentence(&mut rng, 10, 30)),
            description: sentence(&mut rng, 250, 400),
            category: ["coffee", "kitchen", "garden", "tools", "audio"][i % 5].to_owned(),
            price: f64::from(rng.random_range(500..50_000)) / 100.0,
            total_reviews: self.review_count(i) as i64,
        }
    }

    /// Chunk `c` of product `i`'s reviews, in no particular order.
    pub fn chunk(&self, i: usize, c: usize) -> Vec<Review> {
        let total = self.review_count(i);
        let start = c * CHUNK;
        let n = total.saturating_sub(start).min(CHUNK);
        let mut rng = self.rng(i as u64, c as u64);
        (0..n)
            .map(|k| {
                let date = NOW_MILLIS - rng.random_range(0..SPAN_MILLIS);
                review(&mut rng, date, i, start + k)
            })
            .collect()
    }

    /// All of product `i`'s reviews, newest first (ties by `_id`, as the library sorts them).
    pub fn reviews(&self, i: usize) -> Vec<Review> {
        let mut all: Vec<Review> = (0..self.chunks(i)).flat_map(|c| self.chunk(i, c)).collect();
        all.sort_by(|a, b| b.date.cmp(&a.date).then(b.id.cmp(&a.id)));
        all
    }

    /// A new review of product `i`, dated after every generated one; `n` makes it unique.
    pub fn new_review(&self, i: usize, n: u64) -> Review {
        let mut rng = self.rng(i as u64 ^ 0xFFFF_0000, n);
        let mut r = review(&mut rng, NOW_MILLIS + n as i64 + 1, i, 0);
        r.id = ObjectId::new();
        r
    }
}

fn review(rng: &mut StdRng, date: i64, product: usize, k: usize) -> Review {
    // Unique and deterministic: seconds of the date, product index, review index.
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&((date / 1000) as u32).to_be_bytes());
    bytes[4..9].copy_from_slice(&(product as u64).to_be_bytes()[3..]);
    bytes[9..12].copy_from_slice(&(k as u32).to_be_bytes()[1..]);
    Review {
        id: ObjectId::from_bytes(bytes),
        author: format!("customer{:05}", rng.random_range(0..100_000)),
        rating: rng.random_range(1..=5),
        helpful: rng.random_range(0..50),
        comment: sentence(rng, 20, 110),
        date: DateTime::from_millis(date),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use subset::bson_compat;

    fn set() -> DataSet {
        DataSet {
            products: 3,
            min_reviews: 200,
            max_reviews: 800,
            seed: 7,
        }
    }

    #[test]
    fn generation_is_deterministic_and_ids_unique() {
        let d = set();
        assert_eq!(d.reviews(1), d.reviews(1));
        let mut ids: Vec<ObjectId> = (0..3).flat_map(|i| d.reviews(i)).map(|r| r.id).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for i in 0..3 {
            assert!((200..=800).contains(&d.review_count(i)));
            assert_eq!(d.reviews(i).len(), d.review_count(i));
        }
    }

    #[test]
    fn a_review_embeds_in_about_170_bytes() {
        let d = set();
        let reviews = d.reviews(0);
        let bytes: usize = reviews
            .iter()
            .map(|r| {
                bson_compat::to_vec(&bson_compat::to_document(r).unwrap())
                    .unwrap()
                    .len()
            })
            .sum();
        let avg = bytes / reviews.len();
        assert!((140..=200).contains(&avg), "{avg}");
    }
}
