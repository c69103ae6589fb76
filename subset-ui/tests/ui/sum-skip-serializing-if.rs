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
    // Left out when 0: a push of such a review has no `votes` to add up.
    #[serde(default, skip_serializing_if = "is_zero")]
    votes: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", sum = "total_votes = votes")]
    reviews: Vec<Review>,
    #[serde(default)]
    total_votes: i64,
}

fn main() {}
