use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Store, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    rating: i32,
    note: Option<String>,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    reviews: Vec<Review>,
}

async fn edit(store: Store<Product>, product: ObjectId, review: ObjectId) {
    let reviews = store.children(Product::REVIEWS);
    let _ = reviews.patch(&product, &review).set(Review::TITLE, "x".to_owned()).await;
}

fn main() {}
