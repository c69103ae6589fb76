//! Experiment 6, push cost against `keep`: the latency of one `push` into a full subset of 5,
//! 100 and 1,000 children, for children that arrive in order (newer than every embedded one: at
//! keep 100 and 1,000 the head path, `$position: 0` without `$sort`) and out of order (older
//! than the head: there the guarded update fails and the `$sort` fallback sorts the whole
//! array). At keep 5, below the head path's threshold of 32, both kinds are the `$sort` update.

use bson::oid::ObjectId;
use bson::{doc, DateTime, Document};
use mongodb::Database;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Parent, Store, SubsetField};

use crate::data::{DataSet, Review};
use crate::measure::{time, Rounds, Run};
use crate::stats::Spread;
use crate::Res;

// The derive takes `keep` as a literal: one small parent type per size.

#[derive(Debug, Clone, Serialize, Deserialize, Parent)]
#[subset(collection = "keep_5")]
pub struct Keep5 {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    #[subset(
        child = "keep_5_reviews",
        keep = 5,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Parent)]
#[subset(collection = "keep_100")]
pub struct Keep100 {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    #[subset(
        child = "keep_100_reviews",
        keep = 100,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Parent)]
#[subset(collection = "keep_1000")]
pub struct Keep1000 {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    #[subset(
        child = "keep_1000_reviews",
        keep = 1000,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

/// The sizes measured.
pub const KEEPS: [usize; 3] = [5, 100, 1000];

/// Parents per size; pushes go to them in turn.
const PARENTS: usize = 20;

/// The prefilled children are dated one second apart from this instant (2024-01-01) on.
const START_MILLIS: i64 = 1_704_067_200_000;

/// Latencies of one size.
#[derive(Debug, Clone)]
pub struct Row {
    pub keep: usize,
    /// Per-round median latency of in-order pushes (the head path from keep 32 up).
    pub head: Spread,
    /// Per-round median latency of out-of-order pushes (the `$sort` fallback from keep 32 up).
    pub sorted: Spread,
    pub head_p99: Spread,
    pub sorted_p99: Spread,
    /// Bytes of the full embedded array.
    pub array_bytes: f64,
}

#[derive(Debug, Clone)]
pub struct Result {
    /// Pushes of each kind per size and round.
    pub pushes: usize,
    pub rounds: usize,
    pub rows: Vec<Row>,
    /// Per round: head-path p50 at keep 1000 over head-path p50 at keep 5.
    pub head_ratio: Spread,
}

/// One size: its parents, and how to push.
struct Size<P: Parent<Id = ObjectId>> {
    keep: usize,
    store: Store<P>,
    field: SubsetField<P, Review>,
    parents: Vec<ObjectId>,
}

impl<P: Parent<Id = ObjectId>> Size<P> {
    /// Writes [`PARENTS`] parents, each with a full subset of `keep` children.
    async fn prepare(db: &Database, keep: usize, field: SubsetField<P, Review>) -> Res<Self> {
        let store = Store::<P>::new(db);
        store.ensure_indexes().await?;
        let data = DataSet {
            products: PARENTS,
            min_reviews: 1,
            max_reviews: 1,
            seed: keep as u64,
        };
        let parents: Vec<ObjectId> = (0..PARENTS).map(|_| ObjectId::new()).collect();
        let docs: Vec<Document> = parents
            .iter()
            .map(|id| doc! { "_id": id, "recent_reviews": [], "total_reviews": 0_i64 })
            .collect();
        db.collection::<Document>(P::COLLECTION)
            .insert_many(docs)
            .await?;
        let handle = store.subset(field);
        for (i, id) in parents.iter().enumerate() {
            let children: Vec<Review> = (0..keep)
                .map(|k| {
                    let mut r = data.new_review(i, k as u64);
                    r.date = DateTime::from_millis(START_MILLIS + 1000 * k as i64);
                    r
                })
                .collect();
            handle.push_many(id, &children).await?;
        }
        Ok(Size {
            keep,
            store,
            field,
            parents,
        })
    }

    /// `n` pushes of each kind, alternating, to the parents in turn: (in order, out of order).
    async fn pushes(&self, n: usize, round: usize, rng: &mut StdRng) -> Res<(Run, Run)> {
        let handle = self.store.subset(self.field);
        let data = DataSet {
            products: PARENTS,
            min_reviews: 1,
            max_reviews: 1,
            seed: round as u64,
        };
        let (mut head, mut late) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for k in 0..2 * n {
            let i = k % PARENTS;
            let mut review = data.new_review(i, (round * 2 * n + k) as u64);
            let in_order = k % 2 == 0;
            review.date = if in_order {
                DateTime::now()
            } else {
                // Within the prefilled span: older than the head, so (from keep 32 up) the
                // guarded head update does not apply and the sorted one does.
                let span = 1000 * self.keep as i64;
                DateTime::from_millis(START_MILLIS + rng.random_range(0..span))
            };
            let ((), ms) = time(handle.push(&self.parents[i], &review)).await?;
            if in_order {
                head.push(ms);
            } else {
                late.push(ms);
            }
        }
        Ok((Run::sequential(head), Run::sequential(late)))
    }

    /// The size in bytes of a full array, from the first parent.
    async fn array_bytes(&self) -> Res<f64> {
        let parent = self
            .store
            .database()
            .collection::<Document>(P::COLLECTION)
            .find_one(doc! { "_id": self.parents[0] })
            .await?
            .ok_or("missing parent")?;
        let array = parent.get_array("recent_reviews")?;
        if array.len() != self.keep {
            return Err(format!("keep {}: {} embedded", self.keep, array.len()).into());
        }
        let bytes = bson_compat::to_vec(&doc! { "a": array.clone() })?;
        Ok(bytes.len() as f64)
    }
}

/// The experiment on `db` (dropped first and last): `pushes` of each kind per size and round.
pub async fn run(db: &Database, pushes: usize, rounds: usize, seed: u64) -> Res<Result> {
    db.drop().await?;
    let k5 = Size::prepare(db, 5, Keep5::RECENT_REVIEWS).await?;
    let k100 = Size::prepare(db, 100, Keep100::RECENT_REVIEWS).await?;
    let k1000 = Size::prepare(db, 1000, Keep1000::RECENT_REVIEWS).await?;
    let mut rng = StdRng::seed_from_u64(seed);
    // Warm-up: connections, and the parents in the cache.
    let warm = PARENTS.min(pushes);
    k5.pushes(warm, rounds, &mut rng).await?;
    k100.pushes(warm, rounds, &mut rng).await?;
    k1000.pushes(warm, rounds, &mut rng).await?;
    // Side `s` is the size `KEEPS[s]`; which goes first rotates between rounds.
    let schedule = Rounds {
        rounds,
        sides: KEEPS.len(),
        shift: 1,
    };
    let runs = schedule
        .run(async |turn| {
            let kinds = match turn.side {
                0 => k5.pushes(pushes, turn.round, &mut rng).await?,
                1 => k100.pushes(pushes, turn.round, &mut rng).await?,
                _ => k1000.pushes(pushes, turn.round, &mut rng).await?,
            };
            Ok(Some(kinds))
        })
        .await?;
    let bytes = [
        k5.array_bytes().await?,
        k100.array_bytes().await?,
        k1000.array_bytes().await?,
    ];
    db.drop().await?;

    let rows = KEEPS
        .iter()
        .zip(bytes)
        .enumerate()
        .map(|(s, (&keep, array_bytes))| Row {
            keep,
            head: runs.spread(s, |(head, _)| head.p50()),
            sorted: runs.spread(s, |(_, late)| late.p50()),
            head_p99: runs.spread(s, |(head, _)| head.p99()),
            sorted_p99: runs.spread(s, |(_, late)| late.p99()),
            array_bytes,
        })
        .collect();
    let head_ratio = runs.ratio(2, 0, |(head, _)| head.p50());
    Ok(Result {
        pushes,
        rounds,
        rows,
        head_ratio,
    })
}
