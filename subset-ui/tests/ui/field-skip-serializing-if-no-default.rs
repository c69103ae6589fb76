use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    // A review stored without `votes` could not be read back.
    #[serde(skip_serializing_if = "is_zero")]
    votes: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    reviews: Vec<Review>,
}

fn main() {}
