use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Store, Subset};

mod as_text {
    pub fn serialize<S: serde::Serializer>(n: &i32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[serde(with = "as_text")]
    code: i32,
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
    let _ = reviews.patch(&product, &review).set(Review::CODE, 7).await;
}

fn main() {}
