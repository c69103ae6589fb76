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
#[subset(collection = "system.products")]
struct Product {
    id: ObjectId,
    #[subset(child = "", keep = 0, sort = "date sideways,", kepp = 5)]
    reviews: Vec<Review>,
    #[subset(child = "reviews", sort = "date desc", count = "total")]
    others: Option<Review>,
}

fn main() {}
