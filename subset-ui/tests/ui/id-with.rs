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
    // Stored as an ObjectId, but `push(&id, …)` would look for the string.
    #[serde(rename = "_id", with = "bson::serde_helpers::hex_string_as_object_id")]
    id: String,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    reviews: Vec<Review>,
}

fn main() {}
