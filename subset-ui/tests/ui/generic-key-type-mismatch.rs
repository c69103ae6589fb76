use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    product_id: String,
    date: bson::DateTime,
}

// Generic in a field other than its children: the key is checked as in any parent.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    extra: T,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    reviews: Vec<Review>,
}

fn main() {}
