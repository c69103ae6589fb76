use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{spec::Direction, spec::FieldName, Child, Subset};

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    created_at: bson::DateTime,
    // Stored as `stars`; read back under that name too (as the derive requires), or `rating`.
    #[serde(rename(serialize = "stars", deserialize = "rating"), alias = "stars")]
    rating: i32,
    r#type: String,
    // Never stored, so never read: it is here for its missing serde name.
    #[allow(dead_code)]
    #[serde(skip)]
    cached: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "note")]
    short_note: Option<String>,
}

#[derive(Serialize, Deserialize, Subset)]
#[serde(rename_all = "camelCase")]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "created_at desc, rating asc, r#type asc",
        count = "total_reviews"
    )]
    recent_reviews: Vec<Review>,
    #[serde(rename = "n")]
    #[subset(child = "old_reviews", keep = 1, sort = "type asc", key = "productId")]
    oldest: Vec<Review>,
    #[serde(default)]
    total_reviews: i64,
}

#[test]
fn renames() {
    assert_eq!(
        <Review as subset::Child>::FIELDS,
        [
            FieldName {
                rust: "id",
                bson: "_id"
            },
            FieldName {
                rust: "created_at",
                bson: "createdAt"
            },
            FieldName {
                rust: "rating",
                bson: "stars"
            },
            FieldName {
                rust: "type",
                bson: "type"
            },
            FieldName {
                rust: "short_note",
                bson: "shortNote"
            },
        ]
    );

    let [recent, oldest] = <Product as Subset>::SUBSETS else {
        panic!("two subset fields");
    };
    assert_eq!(recent.field, "recentReviews");
    assert_eq!(recent.rust_field, "recent_reviews");
    assert_eq!(recent.count, Some("totalReviews"));
    let sort: Vec<_> = recent.sort.iter().map(|k| (k.field, k.direction)).collect();
    assert_eq!(
        sort,
        [
            ("createdAt", Direction::Desc),
            ("stars", Direction::Asc),
            ("type", Direction::Asc),
        ]
    );

    assert_eq!(oldest.field, "n");
    assert_eq!(oldest.rust_field, "oldest");
    assert_eq!(oldest.key, "productId");
    assert_eq!(oldest.count, None);
    assert_eq!(Product::OLDEST.spec(), oldest);
}
