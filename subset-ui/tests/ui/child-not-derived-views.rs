use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    verified: bool,
}

#[derive(Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
}

// One error, at `Review`: not one per check that reads its fields or compares its type.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", filter = "verified")]
    latest: Vec<Review>,
    #[subset(child = "reviews", keep = 3, sort = "date asc")]
    oldest: Vec<Comment>,
}

fn main() {}
