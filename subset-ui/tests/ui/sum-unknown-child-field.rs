use subset::bson::{self, oid::ObjectId};
use serde::{Deserialize, Serialize};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    rating: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc",
        count = "review_count",
        sum = "rating_total = ratings"
    )]
    reviews: Vec<Review>,
    #[serde(default)]
    review_count: i64,
    #[serde(default)]
    rating_total: i64,
}

fn main() {}
