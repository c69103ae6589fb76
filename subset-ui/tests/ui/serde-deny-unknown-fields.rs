use serde::{Deserialize, Serialize};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: u32,
    date: i64,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
#[serde(deny_unknown_fields)]
struct Product {
    #[serde(rename = "_id")]
    id: u32,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    recent: Vec<Review>,
}

fn main() {}
