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
    // The count would be written over the `_id`: an insert stores 0 there.
    #[serde(rename = "_id")]
    id: i64,
    #[subset(child = "reviews", keep = 5, sort = "date desc", count = "id")]
    reviews: Vec<Review>,
}

fn main() {}
