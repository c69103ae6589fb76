use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    verified: bool,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", sum = "tally = rating")]
    recent_reviews: Vec<Review>,
    #[subset(child = "reviews", keep = 3, sort = "rating desc", count = "tally")]
    best_reviews: Vec<Review>,
    #[serde(default)]
    tally: i64,
}

fn main() {}
