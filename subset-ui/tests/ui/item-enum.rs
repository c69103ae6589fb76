use serde::{Deserialize, Serialize};
use subset::Subset;

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
enum Product {
    Lamp,
}

fn main() {}
