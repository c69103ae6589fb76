//! A `#[serde(skip_deserializing)]` field is stored, so it can be a sort key: the engine reads
//! sort values from the stored documents, never from decoded children.

use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[serde(skip_deserializing)]
    score: i64,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "score desc")]
    reviews: Vec<Review>,
}

#[test]
fn sort_skip_deserializing() {
    assert_eq!(Product::SUBSETS[0].sort[0].field, "score");
}
