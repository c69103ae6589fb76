use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::spec::{FieldName, NumberType, SumSpec};
use subset::{Child, Subset, SubsetField};

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author_name: String,
    rating: i32,
    created_at: bson::DateTime,
    body: String,
    helpful_votes: u16,
}

// The same fields as `Review`, fewer of them, under the same BSON names.
#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    author_name: String,
    rating: i32,
    created_at: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    // `helpful_votes` is not in the preview: a sum adds up the full children.
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "created_at desc",
        count = "n",
        sum = "rating_total = rating, helpful_total = helpful_votes"
    )]
    latest: Vec<ReviewPreview>,
    #[subset(child = "reviews", key = "best_of", keep = 3, sort = "rating desc")]
    best: Vec<Review>,
    #[serde(default)]
    n: i64,
    #[serde(default)]
    rating_total: i64,
    #[serde(default)]
    helpful_total: i64,
}

#[test]
fn previews() {
    let latest = &<Product as Subset>::SUBSETS[0];
    let names: Vec<&str> = latest.embed.unwrap().iter().map(|f| f.bson).collect();
    assert_eq!(names, ["_id", "authorName", "rating", "createdAt"]);
    assert_eq!(latest.sort[0].field, "createdAt");
    assert_eq!(
        latest.sums,
        [
            SumSpec {
                parent: "rating_total",
                child: "rating",
                ty: NumberType::integer("i64", i64::MIN, i64::MAX)
            },
            SumSpec {
                parent: "helpful_total",
                child: "helpfulVotes",
                ty: NumberType::integer("i64", i64::MIN, i64::MAX)
            },
        ]
    );
    assert_eq!(
        <ReviewPreview as Child>::EMBED,
        Some(<ReviewPreview as Child>::FIELDS)
    );
    assert_eq!(
        <ReviewPreview as Child>::FIELDS[1],
        FieldName {
            rust: "author_name",
            bson: "authorName"
        }
    );

    // The constant names the full child, which the store pushes and pages.
    let _: SubsetField<Product, Review> = Product::LATEST;
    assert_eq!(Product::LATEST.spec(), latest);

    // A child embedded whole.
    assert_eq!(<Product as Subset>::SUBSETS[1].embed, None);
    assert_eq!(<Review as Child>::EMBED, None);
    let _: SubsetField<Product, Review> = Product::BEST;
}

#[derive(Serialize, Deserialize, Child)]
struct Note<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    rank: i32,
    extra: T,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Note<T>)]
struct NotePreview<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    rank: i32,
    extra: T,
}

// Generic on both sides: in a generic parent a sum's field is looked up on the preview.
#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "boards")]
struct Board<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "notes",
        keep = 2,
        sort = "rank desc",
        sum = "rank_total = rank"
    )]
    top: Vec<NotePreview<T>>,
    #[serde(default)]
    rank_total: i64,
}

#[test]
fn generic_previews() {
    let spec = &<Board<String> as Subset>::SUBSETS[0];
    let names: Vec<&str> = spec.embed.unwrap().iter().map(|f| f.bson).collect();
    assert_eq!(names, ["_id", "rank", "extra"]);
    let _: SubsetField<Board<String>, Note<String>> = Board::<String>::TOP;
}
