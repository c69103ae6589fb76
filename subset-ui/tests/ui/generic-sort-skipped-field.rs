use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    #[serde(skip)]
    cached: i64,
}

// Checked where the parent is declared, not only where a build uses `Product<T>`.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    extra: T,
    #[subset(child = "reviews", keep = 5, sort = "cached desc")]
    reviews: Vec<Review>,
}

fn main() {}
