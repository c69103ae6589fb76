use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::Child;

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[serde(skip)]
    score: i32,
    rating: i32,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    score: i32,
}

fn main() {}
