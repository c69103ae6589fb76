use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
}

fn from_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(serde::de::Error::custom)
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", count = "total")]
    reviews: Vec<Review>,
    // The engine writes the count as a number, which this could not read back.
    #[serde(default, deserialize_with = "from_text")]
    total: i64,
}

fn main() {}
