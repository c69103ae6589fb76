use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::Child;

#[derive(Clone, Serialize, Deserialize)]
struct Extra {
    score: i64,
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    // Nothing is stored under `extra`: its fields are stored in place of it.
    extra: Extra,
}

fn main() {}
