use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
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
    #[subset(child = "reviews", keep = 5, sort = "date desc", sum = "total = rating")]
    recent_reviews: Vec<Review>,
    #[subset(child = "reviews", keep = 3, sort = "rating desc", sum = "total = rating")]
    best_reviews: Vec<Review>,
    #[serde(default)]
    total: i64,
}

fn main() {}
