// After an error the derive still emits a stub `Subset` impl and the field constants, so code
// using them reports nothing more than the one mistake.
use subset::bson::{self, oid::ObjectId};
use serde::{Deserialize, Serialize};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "reviews", keep = 0, sort = "date desc")]
    reviews: Vec<Review>,
}

fn main() {
    let product = Product {
        id: ObjectId::new(),
        reviews: Vec::new(),
    };
    let _: &ObjectId = product.id();
    let _ = <Product as Subset>::SUBSETS;
    let _ = Product::REVIEWS;
}
