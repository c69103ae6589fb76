use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::spec::{NumberType, SumSpec};
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct Vote {
    #[serde(rename = "_id")]
    id: ObjectId,
    cast_at: bson::DateTime,
    #[serde(rename = "stars")]
    rating: u8,
    helpful_votes: u16,
    weight: f32,
    big: i64,
    amount: bson::Decimal128,
}

// Every kind of sum the derive accepts, with serde renames on both sides.
#[derive(Serialize, Deserialize, Subset)]
#[serde(rename_all = "camelCase")]
#[subset(collection = "polls")]
struct Poll {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "votes",
        keep = 3,
        sort = "cast_at desc",
        sum = "rating_total = rating, helpful_total = helpful_votes, weight_total = weight, big_total = big, amount_total = amount"
    )]
    recent: Vec<Vote>,
    #[serde(default)]
    rating_total: i32,
    #[serde(default, rename = "helpful")]
    helpful_total: u32,
    #[serde(default)]
    weight_total: f64,
    #[serde(default)]
    big_total: i64,
    // A decimal has no `Default`: the insert writes a decimal zero in its place.
    amount_total: bson::Decimal128,
}

#[test]
fn sums() {
    assert_eq!(
        <Poll as Subset>::SUBSETS[0].sums,
        [
            SumSpec {
                parent: "ratingTotal",
                child: "stars",
                ty: NumberType::integer("i32", i32::MIN as i64, i32::MAX as i64)
            },
            SumSpec {
                parent: "helpful",
                child: "helpfulVotes",
                ty: NumberType::integer("u32", 0, u32::MAX as i64)
            },
            SumSpec {
                parent: "weightTotal",
                child: "weight",
                ty: NumberType::Float
            },
            SumSpec {
                parent: "bigTotal",
                child: "big",
                ty: NumberType::integer("i64", i64::MIN, i64::MAX)
            },
            SumSpec {
                parent: "amountTotal",
                child: "amount",
                ty: NumberType::Decimal
            },
        ]
    );
    assert_eq!(<Poll as Subset>::SUBSETS[0].count, None);
    assert_eq!(<Poll as Subset>::SUBSETS[0].count_type, NumberType::Unknown);
}
