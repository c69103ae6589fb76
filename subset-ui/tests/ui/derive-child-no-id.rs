use serde::{Deserialize, Serialize};
use subset::Child;

#[derive(Serialize, Deserialize, Child)]
struct Review {
    id: String,
    rating: i32,
}

fn main() {}
