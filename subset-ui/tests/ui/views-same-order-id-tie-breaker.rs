use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    latest: Vec<Review>,
    // `date desc` ends with `_id desc` too: the same order, so always the same children.
    #[subset(child = "reviews", keep = 5, sort = "date desc, id desc")]
    newest: Vec<Review>,
}

fn main() {}
