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
    #[subset(child = "reviews", kepe = 5, sort = "date desc")]
    reviews: Vec<Review>,
}

fn main() {}
