use subset::bson::{self, oid::ObjectId};
use serde::{Deserialize, Serialize};
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
    #[subset(child = "reviews", keep = 5, sort = "_id desc")]
    reviews: Vec<Review>,
}

fn main() {}
