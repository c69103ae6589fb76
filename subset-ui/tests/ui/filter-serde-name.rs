use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    is_verified: bool,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    // The BSON name; `filter` takes the Rust one, `is_verified`.
    #[subset(child = "reviews", keep = 5, sort = "date desc", filter = "isVerified")]
    verified: Vec<Review>,
}

fn main() {}
