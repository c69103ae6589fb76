use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    // Left out when false: a query for `hidden: false` never matches a missing field.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    hidden: bool,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc", filter = "!hidden")]
    reviews: Vec<Review>,
}

fn main() {}
