use subset::bson::oid::ObjectId;
use serde::{Deserialize, Serialize};
use subset::Subset;

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
}

fn main() {}
