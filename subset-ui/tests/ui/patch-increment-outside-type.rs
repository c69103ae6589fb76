use serde::Serialize;
use subset::patch::Increment;

// Stored as an int64, but `Increment` is the library's: only its own numbers implement it.
#[derive(Serialize)]
struct Cents(i64);

impl Increment for Cents {
    const RANGE: Option<(i64, i64)> = None;
}

fn main() {}
