use serde::{Deserialize, Serialize};
use subset::Child;

#[derive(Serialize, Deserialize, Child)]
enum Review {
    Good,
    Bad,
}

fn main() {}
