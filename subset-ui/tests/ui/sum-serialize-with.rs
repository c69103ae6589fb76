use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

fn as_text<S: serde::Serializer>(n: &i32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&n.to_string())
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    // Stored as a string, which a sum cannot add up.
    #[serde(serialize_with = "as_text")]
    rating: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", sum = "rating_total = rating")]
    reviews: Vec<Review>,
    #[serde(default)]
    rating_total: i64,
}

fn main() {}
