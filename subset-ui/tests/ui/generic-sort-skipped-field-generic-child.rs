use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    #[serde(skip)]
    cached: i64,
    extra: T,
}

// A child type that names the parent's parameter is checked where `Product<T>` is used with a
// type for `T`.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "cached desc")]
    reviews: Vec<Review<T>>,
}

const VIEWS: usize = <Product<String> as Subset>::SUBSETS.len();

fn main() {}
