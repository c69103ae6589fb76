//! Experiment 6, push cost against `keep`: the latency of one `push` into a full subset of 5,
//! 100 and 1,000 children, for children that arrive in order (newer than every embedded one: at
//! keep 100 and 1,000 the head path, `$position: 0` without `$sort`) and out of order (older
//! than the head: there the guarded update fails and the `$sort` fallback sorts the whole
//! array). At keep 5, below the head path's threshold of 32, both kinds are the `$sort` update.
//!
//! Beside them, at keep 1,000, a layout written by hand with the driver: in-order children
//! appended at the tail with a plain `$push` (no `$sort`, `$position` or `$slice`), so that the
//! update's oplog entry holds the new element rather than the whole array, and trimmed back to
//! `keep` only when the array would reach `2·keep` (one push in `keep`); the array holds
//! `keep`..`2·keep` children, oldest first, and a read would take the last `keep`. In a
//! transaction, as the library's push: the child inserted, the parent updated, committed.

use bson::oid::ObjectId;
use bson::{doc, DateTime, Document};
use futures::TryStreamExt;
use mongodb::options::{ReadConcern, WriteConcern};
use mongodb::{Database, IndexModel};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Store, Subset, SubsetField};

use crate::data::{DataSet, Review};
use crate::measure::{time, Rounds, Run};
use crate::stats::Spread;
use crate::Res;

// The derive takes `keep` as a literal: one small parent type per size.

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
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

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
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

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
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

/// The hand-written append-and-trim layout at keep [`APPEND_KEEP`].
#[derive(Debug, Clone)]
pub struct Append {
    /// Per-round median latency of its in-order pushes (a trim among them when a parent's
    /// array reached `2·keep - 1`).
    pub push: Spread,
    pub push_p99: Spread,
    /// Trims among the measured pushes, all rounds.
    pub trims_in_pushes: usize,
    /// Per-round median latency of a push that trims (each parent brought to `2·keep - 1`
    /// first, untimed).
    pub trim: Spread,
    /// Per round: its push p50 over the library's in-order p50 at keep 5.
    pub ratio: Spread,
    /// Per round: a cycle of `keep` pushes, `keep - 1` plain and one trim, at their p50s, per
    /// push, over the library's in-order p50 at keep 5.
    pub amortized_ratio: Spread,
    /// Bytes of the embedded array, smallest and largest over the parents after the rounds.
    pub array_bytes: (f64, f64),
}

#[derive(Debug, Clone)]
pub struct Result {
    /// Pushes of each kind per size and round.
    pub pushes: usize,
    pub rounds: usize,
    pub rows: Vec<Row>,
    /// Per round: head-path p50 at keep 1000 over head-path p50 at keep 5.
    pub head_ratio: Spread,
    pub append: Append,
}

/// `keep` of the hand-written append-and-trim layout.
pub const APPEND_KEEP: usize = 1000;
/// Its parents and children.
const APPEND: &str = "keep_append";
const APPEND_REVIEWS: &str = "keep_append_reviews";

/// One size: its parents, and how to push.
struct Size<P: Subset<Id = ObjectId>> {
    keep: usize,
    store: Store<P>,
    field: SubsetField<P, Review>,
    parents: Vec<ObjectId>,
}

impl<P: Subset<Id = ObjectId>> Size<P> {
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
        let handle = store.children(field);
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
        let handle = self.store.children(self.field);
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

/// The hand-written layout: [`PARENTS`] parents whose arrays start at random lengths in
/// `keep..2·keep`, so that the pushes meet trims at the rate a steady state has; and as many
/// others on which the trimming push is measured alone.
struct Appending {
    db: Database,
    parents: Vec<ObjectId>,
    trimming: Vec<ObjectId>,
    /// The next in-order child's date.
    clock: i64,
}

impl Appending {
    /// Writes the parents and their children; the child collection gets the indexes the library
    /// made on `like` (its child collection at the same `keep`).
    async fn prepare(db: &Database, like: &str, rng: &mut StdRng) -> Res<Appending> {
        let keep = APPEND_KEEP;
        let reviews = db.collection::<Document>(APPEND_REVIEWS);
        let mut indexes = db.collection::<Document>(like).list_indexes().await?;
        while let Some(index) = indexes.try_next().await? {
            if index.keys != doc! { "_id": 1 } {
                reviews
                    .create_index(IndexModel::builder().keys(index.keys).build())
                    .await?;
            }
        }
        let data = DataSet {
            products: PARENTS,
            min_reviews: 1,
            max_reviews: 1,
            seed: 7,
        };
        let mut parents = Vec::with_capacity(2 * PARENTS);
        for i in 0..2 * PARENTS {
            let id = ObjectId::new();
            let len = rng.random_range(keep..2 * keep);
            let children: Vec<Document> = (0..len)
                .map(|k| {
                    let mut r = data.new_review(i, k as u64);
                    r.date = DateTime::from_millis(START_MILLIS + 1000 * k as i64);
                    bson_compat::to_document(&r)
                })
                .collect::<std::result::Result<_, _>>()?;
            let stored: Vec<Document> = children
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c.insert("product_id", id);
                    c
                })
                .collect();
            reviews.insert_many(stored).await?;
            db.collection::<Document>(APPEND)
                .insert_one(doc! {
                    "_id": id,
                    "recent_reviews": children,
                    "total_reviews": len as i64,
                })
                .await?;
            parents.push(id);
        }
        let trimming = parents.split_off(PARENTS);
        Ok(Appending {
            db: db.clone(),
            parents,
            trimming,
            clock: START_MILLIS + 1000 * 2 * keep as i64,
        })
    }

    /// One push in a transaction: the child inserted, then a plain `$push` on condition that
    /// the array holds fewer than `2·keep - 1` children; if it holds more, a `$push` that trims
    /// it to the `keep` newest instead. Returns whether it trimmed.
    async fn push(&mut self, parent: ObjectId, review: &Review) -> Res<bool> {
        let keep = APPEND_KEEP;
        let client = self.db.client();
        let mut session = client.start_session().await?;
        session
            .start_transaction()
            .read_concern(ReadConcern::snapshot())
            .write_concern(WriteConcern::majority())
            .await?;
        let mut child = bson_compat::to_document(review)?;
        let embedded = child.clone();
        child.insert("product_id", parent);
        self.db
            .collection::<Document>(APPEND_REVIEWS)
            .insert_one(child)
            .session(&mut session)
            .await?;
        let parents = self.db.collection::<Document>(APPEND);
        let full = format!("recent_reviews.{}", 2 * keep - 2);
        let appended = parents
            .update_one(
                doc! { "_id": parent, full: { "$exists": false } },
                doc! {
                    "$push": { "recent_reviews": &embedded },
                    "$inc": { "total_reviews": 1_i64 },
                },
            )
            .session(&mut session)
            .await?;
        let trimmed = appended.matched_count == 0;
        if trimmed {
            let done = parents
                .update_one(
                    doc! { "_id": parent },
                    doc! {
                        "$push": {
                            "recent_reviews": { "$each": [&embedded], "$slice": -(keep as i64) },
                        },
                        "$inc": { "total_reviews": 1_i64 },
                    },
                )
                .session(&mut session)
                .await?;
            if done.matched_count != 1 {
                return Err(format!("append layout: parent {parent} is missing").into());
            }
        }
        session.commit_transaction().await?;
        Ok(trimmed)
    }

    /// A new review, newer than every stored one.
    fn review(&mut self, i: usize, n: u64) -> Review {
        let data = DataSet {
            products: PARENTS,
            min_reviews: 1,
            max_reviews: 1,
            seed: 11,
        };
        self.clock += 1000;
        let mut r = data.new_review(i, n);
        r.date = DateTime::from_millis(self.clock);
        r
    }

    /// `n` in-order pushes to the parents in turn; then, per trimming parent, its array filled
    /// to `2·keep - 1` (untimed) and one push, which trims. Returns both runs and the trims
    /// among the first.
    async fn pushes(&mut self, n: usize, round: usize) -> Res<(Run, Run, usize)> {
        let (mut plain, mut trims) = (Vec::with_capacity(n), 0);
        for k in 0..n {
            let i = k % PARENTS;
            let review = self.review(i, (round * n + k) as u64);
            let (trimmed, ms) = time(self.push(self.parents[i], &review)).await?;
            plain.push(ms);
            trims += usize::from(trimmed);
        }
        let mut trimming = Vec::with_capacity(PARENTS);
        for i in 0..PARENTS {
            self.fill(i).await?;
            let review = self.review(i, (round * n + n + i) as u64);
            let (trimmed, ms) = time(self.push(self.trimming[i], &review)).await?;
            if !trimmed {
                return Err("append layout: a push into a full array did not trim".into());
            }
            trimming.push(ms);
        }
        Ok((Run::sequential(plain), Run::sequential(trimming), trims))
    }

    /// Appends copies of the newest embedded child until trimming parent `i`'s array holds
    /// `2·keep - 1`; only the array, which is all a push reads.
    async fn fill(&mut self, i: usize) -> Res<()> {
        let parents = self.db.collection::<Document>(APPEND);
        let parent = parents
            .find_one(doc! { "_id": self.trimming[i] })
            .await?
            .ok_or("append layout: missing parent")?;
        let array = parent.get_array("recent_reviews")?;
        let missing = (2 * APPEND_KEEP - 1).saturating_sub(array.len());
        let last = array.last().cloned().ok_or("append layout: empty array")?;
        if missing > 0 {
            parents
                .update_one(
                    doc! { "_id": self.trimming[i] },
                    doc! { "$push": { "recent_reviews": { "$each": vec![last; missing] } } },
                )
                .await?;
        }
        Ok(())
    }

    /// The smallest and largest embedded array of the measured parents, in bytes.
    async fn array_bytes(&self) -> Res<(f64, f64)> {
        let mut cursor = self
            .db
            .collection::<Document>(APPEND)
            .find(doc! { "_id": { "$in": &self.parents } })
            .await?;
        let (mut min, mut max) = (f64::INFINITY, 0.0_f64);
        while let Some(parent) = cursor.try_next().await? {
            let array = parent.get_array("recent_reviews")?;
            let bytes = bson_compat::to_vec(&doc! { "a": array.clone() })?.len() as f64;
            min = min.min(bytes);
            max = max.max(bytes);
        }
        Ok((min, max))
    }
}

/// What one round measured of a side: the library's (in order, out of order) at one size, or
/// the hand-written layout's (pushes, trim pushes, trims among the pushes).
enum Measured {
    Library(Run, Run),
    Append(Run, Run, usize),
}

impl Measured {
    /// In-order pushes; the hand-written layout's pushes.
    fn first(&self) -> &Run {
        match self {
            Measured::Library(a, _) | Measured::Append(a, _, _) => a,
        }
    }

    /// Out-of-order pushes; the hand-written layout's trim pushes.
    fn second(&self) -> &Run {
        match self {
            Measured::Library(_, b) | Measured::Append(_, b, _) => b,
        }
    }
}

/// The experiment on `db` (dropped first and last): `pushes` of each kind per size and round.
pub async fn run(db: &Database, pushes: usize, rounds: usize, seed: u64) -> Res<Result> {
    db.drop().await?;
    let k5 = Size::prepare(db, 5, Keep5::RECENT_REVIEWS).await?;
    let k100 = Size::prepare(db, 100, Keep100::RECENT_REVIEWS).await?;
    let k1000 = Size::prepare(db, 1000, Keep1000::RECENT_REVIEWS).await?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut append = Appending::prepare(db, "keep_1000_reviews", &mut rng).await?;
    // Warm-up: connections, and the parents in the cache.
    let warm = PARENTS.min(pushes);
    k5.pushes(warm, rounds, &mut rng).await?;
    k100.pushes(warm, rounds, &mut rng).await?;
    k1000.pushes(warm, rounds, &mut rng).await?;
    append.pushes(warm, rounds).await?;
    // Side `s < 3` is the size `KEEPS[s]`, side 3 the hand-written layout; which goes first
    // rotates between rounds.
    let schedule = Rounds {
        rounds,
        sides: KEEPS.len() + 1,
        shift: 1,
    };
    let runs = schedule
        .run(async |turn| {
            let measured = match turn.side {
                0 => {
                    let (a, b) = k5.pushes(pushes, turn.round, &mut rng).await?;
                    Measured::Library(a, b)
                }
                1 => {
                    let (a, b) = k100.pushes(pushes, turn.round, &mut rng).await?;
                    Measured::Library(a, b)
                }
                2 => {
                    let (a, b) = k1000.pushes(pushes, turn.round, &mut rng).await?;
                    Measured::Library(a, b)
                }
                _ => {
                    let (a, b, trims) = append.pushes(pushes, turn.round).await?;
                    Measured::Append(a, b, trims)
                }
            };
            Ok(Some(measured))
        })
        .await?;
    let bytes = [
        k5.array_bytes().await?,
        k100.array_bytes().await?,
        k1000.array_bytes().await?,
    ];
    let append_bytes = append.array_bytes().await?;
    db.drop().await?;

    let rows = KEEPS
        .iter()
        .zip(bytes)
        .enumerate()
        .map(|(s, (&keep, array_bytes))| Row {
            keep,
            head: runs.spread(s, |m| m.first().p50()),
            sorted: runs.spread(s, |m| m.second().p50()),
            head_p99: runs.spread(s, |m| m.first().p99()),
            sorted_p99: runs.spread(s, |m| m.second().p99()),
            array_bytes,
        })
        .collect();
    let head_ratio = runs.ratio(2, 0, |m| m.first().p50());
    let side = KEEPS.len();
    let append = Append {
        push: runs.spread(side, |m| m.first().p50()),
        push_p99: runs.spread(side, |m| m.first().p99()),
        trims_in_pushes: runs
            .of(side)
            .map(|m| match m {
                Measured::Append(_, _, trims) => *trims,
                Measured::Library(..) => 0,
            })
            .sum(),
        trim: runs.spread(side, |m| m.second().p50()),
        ratio: runs.ratio(side, 0, |m| m.first().p50()),
        // Keep 5's side is `Library`: its in-order p50.
        amortized_ratio: runs.ratio(side, 0, |m| match m {
            Measured::Append(plain, trim, _) => {
                let keep = APPEND_KEEP as f64;
                ((keep - 1.0) * plain.p50() + trim.p50()) / keep
            }
            Measured::Library(head, _) => head.p50(),
        }),
        array_bytes: append_bytes,
    };
    Ok(Result {
        pushes,
        rounds,
        rows,
        head_ratio,
        append,
    })
}
