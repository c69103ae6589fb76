use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    extra: T,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "dat desc")]
    reviews: Vec<Review<T>>,
}

fn main() {}
