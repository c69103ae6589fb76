use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::Child;

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    rating: i32,
    body: String,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    autor: String,
    rating: i32,
}

fn main() {}
