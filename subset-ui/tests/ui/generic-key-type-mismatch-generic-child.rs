use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    product_id: String,
    date: bson::DateTime,
    extra: T,
}

// The child type names the parent's parameter.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    reviews: Vec<Review<T>>,
}

fn main() {}
