use subset::bson::oid::ObjectId;
use serde::{Deserialize, Serialize};
use subset::Parent;

#[derive(Serialize, Deserialize, Parent)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
}

fn main() {}
