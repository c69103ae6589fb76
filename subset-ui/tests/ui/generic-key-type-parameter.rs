use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

// The key field's type is a parameter: not the parent's `_id` type for every `K`.
#[derive(Serialize, Deserialize, Child)]
struct Review<K> {
    #[serde(rename = "_id")]
    id: ObjectId,
    product_id: K,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<K> {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    reviews: Vec<Review<K>>,
}

fn main() {}
