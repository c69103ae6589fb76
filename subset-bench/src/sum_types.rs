//! Experiment 10, sum types: the latency of one `push` into an account that keeps a running
//! `Decimal128` balance against one that keeps it as an `i64` (cents), both with the same
//! subset (the 10 latest payments) and count. The pushes alternate between the two, which goes
//! first alternating too, so that both see the same load; each round's medians give a ratio.

use bson::oid::ObjectId;
use bson::{DateTime, Decimal128};
use mongodb::Database;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Child, Store, Subset};

use crate::measure::{side_by_side, Rounds};
use crate::stats::{quantile, sorted, Spread};
use crate::Res;

/// Accounts per layout; pushes go to them in turn.
pub const ACCOUNTS: usize = 100;

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
pub struct Payment {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub at: DateTime,
    pub cents: i64,
    pub amount: Decimal128,
    pub memo: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "sum_i64")]
pub struct CentsAccount {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    #[subset(
        child = "sum_i64_payments",
        keep = 10,
        sort = "at desc",
        count = "payments",
        sum = "balance = cents"
    )]
    pub recent: Vec<Payment>,
    #[serde(default)]
    pub payments: i64,
    #[serde(default)]
    pub balance: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "sum_decimal")]
pub struct DecimalAccount {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    #[subset(
        child = "sum_decimal_payments",
        keep = 10,
        sort = "at desc",
        count = "payments",
        sum = "balance = amount"
    )]
    pub recent: Vec<Payment>,
    #[serde(default)]
    pub payments: i64,
    pub balance: Decimal128,
}

/// Push latency (ms) of each layout: each round's median, then the median (min–max) of those.
#[derive(Debug, Clone)]
pub struct Result {
    pub pushes: usize,
    pub cents: Spread,
    pub decimal: Spread,
    /// Decimal over `i64`, round by round.
    pub ratio: Spread,
}

/// One round's medians: `i64` first.
type Medians = [f64; 2];

pub async fn run(db: &Database, pushes: usize, rounds: usize, seed: u64) -> Res<Result> {
    db.drop().await?;
    let cents = Store::<CentsAccount>::new(db);
    let decimal = Store::<DecimalAccount>::new(db);
    cents.ensure_indexes().await?;
    decimal.ensure_indexes().await?;
    let ids: Vec<ObjectId> = (0..ACCOUNTS).map(|_| ObjectId::new()).collect();
    let zero: Decimal128 = "0.00".parse()?;
    for id in &ids {
        cents
            .insert(&CentsAccount {
                id: *id,
                recent: Vec::new(),
                payments: 0,
                balance: 0,
            })
            .await?;
        decimal
            .insert(&DecimalAccount {
                id: *id,
                recent: Vec::new(),
                payments: 0,
                balance: zero,
            })
            .await?;
    }
    let (to_cents, to_decimal) = (
        cents.children(CentsAccount::RECENT),
        decimal.children(DecimalAccount::RECENT),
    );
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5117);
    let mut at = 0_i64;
    // One "side" per round: a round is `pushes` pairs, alternating which layout goes first.
    let schedule = Rounds {
        rounds,
        sides: 1,
        shift: 0,
    };
    let runs = schedule
        .run(async |_| {
            let mut latencies: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for n in 0..pushes {
                let id = &ids[n % ACCOUNTS];
                let cents = rng.random_range(1..100_000_i64);
                at += 1;
                let payment = Payment {
                    id: ObjectId::new(),
                    at: DateTime::from_millis(at),
                    cents,
                    amount: format!("{}.{:02}", cents / 100, cents % 100).parse()?,
                    memo: "payment".to_owned(),
                };
                let [a, b] = side_by_side(
                    n % 2 == 0,
                    to_cents.push(id, &payment),
                    to_decimal.push(id, &payment),
                )
                .await?;
                latencies[0].push(a);
                latencies[1].push(b);
            }
            let median = |v: &[f64]| quantile(&sorted(v.to_vec()), 0.5);
            Ok(Some([median(&latencies[0]), median(&latencies[1])]))
        })
        .await?;
    // Both layouts must have kept the same balance, to the cent.
    for id in &ids {
        let (Some(c), Some(d)) = (cents.get(id).await?, decimal.get(id).await?) else {
            return Err(format!("account {id} is missing").into());
        };
        let expected = format!("{}.{:02}", c.balance / 100, c.balance % 100);
        if d.balance.to_string() != expected || c.payments != d.payments {
            return Err(format!(
                "account {id}: decimal balance {} and {} payments, i64 balance {expected} and {} payments",
                d.balance, d.payments, c.payments
            )
            .into());
        }
    }
    let of = |i: usize| runs.of(0).map(|m: &Medians| m[i]).collect::<Vec<_>>();
    let ratios: Vec<f64> = runs.of(0).map(|m| m[1] / m[0]).collect();
    Ok(Result {
        pushes,
        cents: Spread::of(&of(0)),
        decimal: Spread::of(&of(1)),
        ratio: Spread::of(&ratios),
    })
}
