use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{spec::Direction, Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    helpful: Option<u32>,
    created_at: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reviews",
        keep = 10,
        sort = "rating desc, created_at asc,id desc"
    )]
    best_reviews: Vec<Review>,
}

#[test]
fn multi_key_sort() {
    let sort = <Product as Subset>::SUBSETS[0].sort;
    let sort: Vec<_> = sort.iter().map(|k| (k.field, k.direction)).collect();
    assert_eq!(
        sort,
        [
            ("rating", Direction::Desc),
            ("created_at", Direction::Asc),
            ("_id", Direction::Desc),
        ]
    );
    assert_eq!(<Product as Subset>::SUBSETS[0].keep, 10);
}
