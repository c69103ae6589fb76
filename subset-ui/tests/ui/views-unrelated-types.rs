use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    votes: i32,
}

#[derive(Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    votes: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    latest: Vec<Review>,
    // The same children, but read as another type, which is no preview of `Review`.
    #[subset(child = "reviews", keep = 5, sort = "votes desc")]
    popular: Vec<Comment>,
}

fn main() {}
