use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{spec::FilterSpec, Child, Subset, SubsetField};

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    helpful_votes: i32,
    is_verified: bool,
    hidden: bool,
    date: bson::DateTime,
    body: String,
}

/// The flag of a filtered view need not be in the preview: it is read from the whole review.
#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    helpful_votes: i32,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", count = "total")]
    latest: Vec<ReviewPreview>,
    #[subset(child = "reviews", keep = 3, sort = "helpful_votes desc, date desc")]
    most_helpful: Vec<ReviewPreview>,
    // The same order and keep as `latest`, told apart by the filter.
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc",
        filter = "is_verified",
        count = "verified",
        sum = "verified_rating = rating"
    )]
    latest_verified: Vec<ReviewPreview>,
    #[subset(child = "reviews", keep = 5, sort = "date desc", filter = "!hidden")]
    visible: Vec<Review>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    verified: i64,
    #[serde(default)]
    verified_rating: i64,
}

#[test]
fn views_of_one_collection_and_filters() {
    let specs = <Product as Subset>::SUBSETS;
    assert_eq!(specs.len(), 4);
    assert!(specs.iter().all(|s| s.same_children(&specs[0])));
    assert_eq!(specs[0].filter, None);
    assert_eq!(specs[1].sort[0].field, "helpfulVotes");
    assert_eq!(
        specs[2].filter,
        Some(FilterSpec {
            field: "isVerified",
            equals: true
        })
    );
    assert_eq!(specs[2].count, Some("verified"));
    assert_eq!(specs[2].sums[0].child, "rating");
    assert_eq!(
        specs[3].filter,
        Some(FilterSpec {
            field: "hidden",
            equals: false
        })
    );
    assert!(specs[3].embed.is_none());
    let _: SubsetField<Product, Review> = Product::LATEST_VERIFIED;
    let _: SubsetField<Product, Review> = Product::VISIBLE;
}
