use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    product_id: i64,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: i64,
    #[subset(child = "reviews", keep = 5, sort = "date desc", sum = "ids = product_id")]
    reviews: Vec<Review>,
    ids: i64,
}

fn main() {}
