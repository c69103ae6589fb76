use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{spec::Direction, Child, Subset};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    rating: i32,
    date: bson::DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
pub struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc",
        count = "total_reviews"
    )]
    recent_reviews: Vec<Review>,
    #[serde(default)]
    total_reviews: i64,
}

#[test]
fn single_subset() {
    assert_eq!(<Product as Subset>::COLLECTION, "products");
    let spec = &<Product as Subset>::SUBSETS[0];
    assert_eq!(spec.field, "recent_reviews");
    assert_eq!(spec.rust_field, "recent_reviews");
    assert_eq!(spec.child_collection, "reviews");
    assert_eq!(spec.key, "product_id");
    assert_eq!(spec.keep, 5);
    assert_eq!(spec.sort.len(), 1);
    assert_eq!(spec.sort[0].field, "date");
    assert_eq!(spec.sort[0].direction, Direction::Desc);
    assert_eq!(spec.count, Some("total_reviews"));
    assert_eq!(Product::RECENT_REVIEWS.spec(), spec);

    let id = ObjectId::new();
    let product = Product {
        id,
        name: "lamp".into(),
        recent_reviews: Vec::new(),
        total_reviews: 0,
    };
    assert_eq!(*product.id(), id);
    let _ = &product.name;
}
