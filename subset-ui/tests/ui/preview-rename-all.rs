use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::Child;

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author_name: String,
    rating: i32,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    author_name: String,
}

fn main() {}
