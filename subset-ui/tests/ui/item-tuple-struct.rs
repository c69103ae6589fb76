use subset::bson::oid::ObjectId;
use serde::{Deserialize, Serialize};
use subset::Subset;

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product(ObjectId);

fn main() {}
