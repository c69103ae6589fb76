use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{spec::SumSpec, Child, Subset};

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
                child: "stars"
            },
            SumSpec {
                parent: "helpful",
                child: "helpfulVotes"
            },
            SumSpec {
                parent: "weightTotal",
                child: "weight"
            },
            SumSpec {
                parent: "bigTotal",
                child: "big"
            },
            SumSpec {
                parent: "amountTotal",
                child: "amount"
            },
        ]
    );
    assert_eq!(<Poll as Subset>::SUBSETS[0].count, None);
}
