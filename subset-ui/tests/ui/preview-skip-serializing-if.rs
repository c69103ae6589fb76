use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::Child;

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
    // Embedded from a review stored without it, this preview could not be read.
    votes: i32,
}

fn main() {}
