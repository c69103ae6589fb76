// After an error in a preview the derive still emits a stub `Child` impl whose `Full` is the
// `preview_of` type, so a parent's constant keeps its type and nothing more is reported.
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::{Child, Subset, SubsetField};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    id: ObjectId,
    rating: i32,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "rating desc")]
    latest: Vec<ReviewPreview>,
}

fn main() {
    let _: SubsetField<Product, Review> = Product::LATEST;
}
