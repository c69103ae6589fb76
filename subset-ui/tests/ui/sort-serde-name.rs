use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    created_at: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "createdAt desc")]
    reviews: Vec<Review>,
}

fn main() {}
