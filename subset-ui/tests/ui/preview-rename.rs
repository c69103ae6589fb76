use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    rating: i32,
    body: String,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    #[serde(rename = "stars")]
    rating: i32,
}

// A parent embedding the preview: the mistake is still reported once, at the preview.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "rating desc")]
    latest: Vec<ReviewPreview>,
}

fn main() {}
