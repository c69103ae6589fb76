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
    #[serde(default, skip_serializing_if = "is_zero")]
    votes: i32,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    #[serde(default)]
    votes: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    // The full reviews leave `votes` out when 0: the preview cannot be sorted by it either.
    #[subset(child = "reviews", keep = 5, sort = "votes desc")]
    reviews: Vec<ReviewPreview>,
}

fn main() {}
