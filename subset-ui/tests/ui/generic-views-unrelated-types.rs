use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Child)]
struct Question {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
}

// Checked where the parent is declared, not only where a build uses `Product<T>`.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    extra: T,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    latest: Vec<Review>,
    #[subset(child = "reviews", keep = 3, sort = "date asc")]
    oldest: Vec<Question>,
}

fn main() {}
