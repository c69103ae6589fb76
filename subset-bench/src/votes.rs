//! Experiment 8, helpful votes: 16 tasks add 1 to the `helpful` count of reviews, on one hot
//! review, over the 100 reviews of one product, and over one review each of 100 products, each
//! vote written one of three ways:
//!
//! - through the library, `Children::patch(..).inc(Review::HELPFUL, 1)`, in transactions and in
//!   ordered writes: `findOneAndUpdate` on the review, then the same `$inc` on the embedded
//!   copy (or, in a view ordered by `helpful`, the view recomputed);
//! - by hand, a driver `$inc` on the review alone, which leaves the embedded copy stale;
//! - by hand, read-modify-replace: the review read, 1 added in Rust, the review replaced and the
//!   embedded copy `$set`, which loses the votes that land between the read and the replace.
//!
//! The products embed their 5 latest reviews whole, ordered by date, which a vote cannot
//! change; a second product type embeds its 5 most helpful, so that a vote may re-rank and the
//! library re-ranks the view in place (library rows only).
//!
//! Every run starts from the same freshly written products. It counts the votes that returned
//! without error, warm-up included, compares them with how much the stored `helpful` counts
//! grew, and checks every embedded copy against the review collection (`Children::check`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Store, Subset, SubsetField, WriteMode};

use crate::data::{DataSet, ProductInfo, Review};
use crate::measure::{closed_loop, Rounds, Run, Task};
use crate::stats::Spread;
use crate::Res;

/// Voting tasks in every configuration.
pub const TASKS: usize = 16;
/// Reviews of the one product, and products of the spread configuration.
pub const CHILDREN: usize = 100;
/// Reviews each product of the spread configuration has (its newest gets the votes).
pub const REVIEWS_EACH: usize = 5;
/// Reviews a product embeds.
pub const KEEP: usize = 5;

/// The reviews are dated one second apart from this instant (2024-01-01) on.
const START_MILLIS: i64 = 1_704_067_200_000;

/// A product embedding its 5 latest reviews whole: a vote does not change their order.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "votes_latest")]
pub struct LatestProduct {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    pub description: String,
    #[subset(
        child = "votes_latest_reviews",
        keep = 5,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

/// A product embedding its 5 most helpful reviews whole: a vote may re-rank them.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "votes_helpful")]
pub struct HelpfulProduct {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    pub description: String,
    #[subset(
        child = "votes_helpful_reviews",
        keep = 5,
        sort = "helpful desc, date desc",
        count = "total_reviews"
    )]
    pub most_helpful: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

/// What the experiment needs of either product type.
trait Voted: Subset<Id = ObjectId> + Send + Sync + 'static {
    const FIELD: SubsetField<Self, Review>;
    fn new(info: &ProductInfo, reviews: Vec<Review>) -> Self;
}

impl Voted for LatestProduct {
    const FIELD: SubsetField<Self, Review> = LatestProduct::RECENT_REVIEWS;
    fn new(info: &ProductInfo, reviews: Vec<Review>) -> Self {
        LatestProduct {
            id: info.id,
            name: info.name.clone(),
            description: info.description.clone(),
            recent_reviews: reviews,
            total_reviews: 0,
        }
    }
}

impl Voted for HelpfulProduct {
    const FIELD: SubsetField<Self, Review> = HelpfulProduct::MOST_HELPFUL;
    fn new(info: &ProductInfo, reviews: Vec<Review>) -> Self {
        HelpfulProduct {
            id: info.id,
            name: info.name.clone(),
            description: info.description.clone(),
            most_helpful: reviews,
            total_reviews: 0,
        }
    }
}

/// Which reviews the votes go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Targets {
    /// Every vote on the newest review of one product (embedded).
    HotChild,
    /// Each vote on one of the [`CHILDREN`] reviews of one product, at random ([`KEEP`] of
    /// them embedded).
    OneParent,
    /// Each vote on the newest review of one of [`CHILDREN`] products, at random.
    Parents,
}

impl Targets {
    pub const ALL: [Targets; 3] = [Targets::HotChild, Targets::OneParent, Targets::Parents];

    pub fn name(self) -> String {
        match self {
            Targets::HotChild => "1 review (hot)".to_owned(),
            Targets::OneParent => format!("{CHILDREN} reviews of 1 product"),
            Targets::Parents => format!("1 review each of {CHILDREN} products"),
        }
    }
}

/// How a vote is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `Children::patch(..).inc(Review::HELPFUL, 1)` in this write mode.
    Library(WriteMode),
    /// `update_one({_id}, {$inc: {helpful: 1}})` on the review alone.
    HandInc,
    /// Find the review, add 1 in Rust, `replace_one` it and `$set` the embedded copy.
    HandReplace,
}

/// What the products embed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The 5 latest reviews: a vote does not change the order.
    Latest,
    /// The 5 most helpful: a vote may re-rank.
    MostHelpful,
}

/// One way of voting on one kind of product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub way: Way,
    pub view: View,
}

impl Variant {
    pub fn way_name(self) -> &'static str {
        match self.way {
            Way::Library(WriteMode::Transactional) => "library `patch().inc`, transactions",
            Way::Library(WriteMode::Ordered) => "library `patch().inc`, ordered writes",
            Way::HandInc => "hand: `$inc` on the review only",
            Way::HandReplace => "hand: read, +1, `replace_one` + `$set` copy",
        }
    }

    pub fn view_name(self) -> &'static str {
        match self.view {
            View::Latest => "latest 5 (`date desc`)",
            View::MostHelpful => "most helpful 5 (`helpful desc`)",
        }
    }
}

/// The configurations of each [`Targets`], in the order they run; the hand-written `$inc` is
/// what the others are compared with.
pub const VARIANTS: [Variant; 6] = [
    Variant {
        way: Way::Library(WriteMode::Transactional),
        view: View::Latest,
    },
    Variant {
        way: Way::Library(WriteMode::Ordered),
        view: View::Latest,
    },
    Variant {
        way: Way::HandInc,
        view: View::Latest,
    },
    Variant {
        way: Way::HandReplace,
        view: View::Latest,
    },
    Variant {
        way: Way::Library(WriteMode::Transactional),
        view: View::MostHelpful,
    },
    Variant {
        way: Way::Library(WriteMode::Ordered),
        view: View::MostHelpful,
    },
];

/// The index in [`VARIANTS`] of the hand-written `$inc`.
const HAND_INC: usize = 2;

/// One configuration over the rounds.
#[derive(Debug, Clone)]
pub struct Row {
    pub targets: Targets,
    pub variant: Variant,
    /// Votes that returned without error, warm-up included, all rounds.
    pub votes: u64,
    /// `votes` minus what the stored `helpful` counts grew by, all rounds.
    pub lost: i64,
    pub rate: Spread,
    pub p50: Spread,
    pub p99: Spread,
    /// Per round: embedded copies that differ from the review collection at the end (changed,
    /// or missing from a view), and whether a view was out of order.
    pub stale: Vec<(usize, bool)>,
    /// Per round: votes/s over the hand-written `$inc`'s on the same targets.
    pub over_inc: Option<Spread>,
    /// Per round: operations the server counted per vote, and transactions it committed per
    /// vote (see [`Counters`]).
    pub ops_per_vote: Spread,
    pub commits_per_vote: Spread,
    /// Transactions the server aborted (write conflicts, retried), all rounds.
    pub aborts: i64,
}

#[derive(Debug, Clone)]
pub struct Result {
    pub seconds: f64,
    pub warmup: f64,
    pub rounds: usize,
    pub rows: Vec<Row>,
    /// Why the transactional rows did not run, if they did not.
    pub no_transactions: Option<String>,
}

/// One run: its latencies, and what it left behind.
struct Outcome {
    run: Run,
    votes: u64,
    /// How much the stored `helpful` counts grew.
    counted: i64,
    stale: usize,
    misordered: bool,
    /// What the server counted during the run (warm-up included).
    server: Counters,
}

/// What the server counts (`serverStatus`): operations received (`opcounters`: finds, updates
/// and commands, `findAndModify` and `commitTransaction` among them), and transactions
/// committed and aborted.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    ops: i64,
    commits: i64,
    aborts: i64,
}

impl Counters {
    async fn read(db: &Database) -> Res<Counters> {
        let status = db.run_command(doc! { "serverStatus": 1 }).await?;
        let number = |section: &str, key: &str| match status
            .get_document(section)
            .ok()
            .and_then(|d| d.get(key))
        {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Double(n)) => *n as i64,
            _ => 0,
        };
        Ok(Counters {
            ops: ["insert", "query", "update", "delete", "getmore", "command"]
                .into_iter()
                .map(|k| number("opcounters", k))
                .sum(),
            commits: number("transactions", "totalCommitted"),
            aborts: number("transactions", "totalAborted"),
        })
    }

    fn since(self, before: Counters) -> Counters {
        Counters {
            ops: self.ops - before.ops,
            commits: self.commits - before.commits,
            aborts: self.aborts - before.aborts,
        }
    }
}

/// A product and its reviews, oldest first.
struct Fixture {
    info: ProductInfo,
    reviews: Vec<Review>,
}

impl Fixture {
    /// Product `i` with `n` reviews dated one second apart.
    fn new(data: &DataSet, i: usize, n: usize) -> Fixture {
        let reviews = (0..n)
            .map(|k| {
                let mut review = data.new_review(i, k as u64);
                review.date = DateTime::from_millis(START_MILLIS + 1000 * k as i64);
                review
            })
            .collect();
        Fixture {
            info: data.info(i),
            reviews,
        }
    }

    /// The (product, review) `_id`s of the newest review.
    fn newest(&self) -> Option<(ObjectId, ObjectId)> {
        self.reviews.last().map(|r| (self.info.id, r.id))
    }
}

/// The products every run starts from: one with [`CHILDREN`] reviews, and [`CHILDREN`] with
/// [`REVIEWS_EACH`].
struct Fixtures {
    hot: Fixture,
    spread: Vec<Fixture>,
}

impl Fixtures {
    fn new(seed: u64) -> Fixtures {
        let data = DataSet {
            products: CHILDREN + 1,
            min_reviews: 1,
            max_reviews: 1,
            seed,
        };
        Fixtures {
            hot: Fixture::new(&data, 0, CHILDREN),
            spread: (1..=CHILDREN)
                .map(|i| Fixture::new(&data, i, REVIEWS_EACH))
                .collect(),
        }
    }

    fn products(&self, targets: Targets) -> &[Fixture] {
        match targets {
            Targets::HotChild | Targets::OneParent => std::slice::from_ref(&self.hot),
            Targets::Parents => &self.spread,
        }
    }

    /// (product, review) `_id`s the votes go to.
    fn targets(&self, targets: Targets) -> Vec<(ObjectId, ObjectId)> {
        match targets {
            Targets::HotChild => self.hot.newest().into_iter().collect(),
            Targets::OneParent => self
                .hot
                .reviews
                .iter()
                .map(|r| (self.hot.info.id, r.id))
                .collect(),
            Targets::Parents => self.spread.iter().filter_map(Fixture::newest).collect(),
        }
    }
}

/// A task voting on random targets.
struct Voter<P> {
    store: Store<P>,
    way: Way,
    parents: Collection<Document>,
    children: Collection<Document>,
    targets: Arc<Vec<(ObjectId, ObjectId)>>,
    rng: StdRng,
    /// Votes that returned, shared by the tasks of a run.
    votes: Arc<AtomicU64>,
}

impl<P: Voted> Task for Voter<P> {
    async fn op(&mut self) -> Res<()> {
        let (parent, child) = self.targets[self.rng.random_range(0..self.targets.len())];
        match self.way {
            Way::Library(_) => {
                let reviews = self.store.children(P::FIELD);
                reviews
                    .patch(&parent, &child)
                    .inc(Review::HELPFUL, 1)
                    .await?;
            }
            Way::HandInc => {
                self.children
                    .update_one(doc! { "_id": child }, doc! { "$inc": { "helpful": 1 } })
                    .await?;
            }
            Way::HandReplace => {
                let mut review = self
                    .children
                    .find_one(doc! { "_id": child })
                    .await?
                    .ok_or("a voted review is missing")?;
                let helpful = review.get_i32("helpful")? + 1;
                review.insert("helpful", helpful);
                self.children
                    .replace_one(doc! { "_id": child }, review)
                    .await?;
                let field = P::FIELD.spec().field;
                self.parents
                    .update_one(
                        doc! { "_id": parent, format!("{field}._id"): child },
                        doc! { "$set": { format!("{field}.$.helpful"): helpful } },
                    )
                    .await?;
            }
        }
        self.votes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// One product type: its stores (the detected write mode, and ordered writes) and collections.
struct Bench<'f, P> {
    store: Store<P>,
    ordered: Store<P>,
    parents: Collection<Document>,
    children: Collection<Document>,
    fixtures: &'f Fixtures,
}

impl<'f, P: Voted> Bench<'f, P> {
    async fn new(db: &Database, fixtures: &'f Fixtures) -> Res<Self> {
        let store = Store::<P>::new(db);
        store.ensure_indexes().await?;
        Ok(Bench {
            ordered: Store::<P>::with_options(
                db,
                subset::StoreOptions::new().mode(WriteMode::Ordered),
            ),
            parents: db.collection(P::COLLECTION),
            children: db.collection(P::FIELD.spec().child_collection),
            store,
            fixtures,
        })
    }

    /// Empties the collections and writes the products `targets` votes on.
    async fn reset(&self, targets: Targets) -> Res<()> {
        self.parents.delete_many(doc! {}).await?;
        self.children.delete_many(doc! {}).await?;
        for product in self.fixtures.products(targets) {
            let parent = P::new(&product.info, product.reviews.clone());
            self.store.insert(&parent).await?;
        }
        Ok(())
    }

    /// The sum of the stored `helpful` counts.
    async fn stored(&self) -> Res<i64> {
        let pipeline = [doc! { "$group": { "_id": Bson::Null, "n": { "$sum": "$helpful" } } }];
        let groups: Vec<Document> = self
            .children
            .aggregate(pipeline)
            .await?
            .try_collect()
            .await?;
        Ok(match groups.first().and_then(|g| g.get("n")) {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            Some(other) => return Err(format!("a sum of {other}").into()),
            None => 0,
        })
    }

    /// One run from fresh products: `TASKS` tasks vote `way` on `targets`.
    async fn votes(
        &self,
        way: Way,
        targets: Targets,
        warmup: Duration,
        duration: Duration,
        seed: u64,
    ) -> Res<Outcome> {
        self.reset(targets).await?;
        let before = self.stored().await?;
        let store = match way {
            Way::Library(WriteMode::Ordered) => &self.ordered,
            _ => &self.store,
        };
        let votes = Arc::new(AtomicU64::new(0));
        let ids = Arc::new(self.fixtures.targets(targets));
        let voters = (0..TASKS).map(|task| Voter {
            store: store.clone(),
            way,
            parents: self.parents.clone(),
            children: self.children.clone(),
            targets: ids.clone(),
            rng: StdRng::seed_from_u64(seed ^ (task as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            votes: votes.clone(),
        });
        let db = self.store.database();
        let start = Counters::read(db).await?;
        let run = closed_loop(voters, warmup, duration).await?;
        let server = Counters::read(db).await?.since(start);
        let counted = self.stored().await? - before;
        let (mut stale, mut misordered) = (0, false);
        let handle = self.store.children(P::FIELD);
        for product in self.fixtures.products(targets) {
            let drift = handle.check(&product.info.id).await?;
            stale += drift.changed.len() + drift.missing.len();
            misordered |= drift.misordered;
        }
        Ok(Outcome {
            run,
            votes: votes.load(Ordering::Relaxed),
            counted,
            stale,
            misordered,
            server,
        })
    }
}

/// The experiment on `db` (dropped first and last).
pub async fn run(
    db: &Database,
    rounds: usize,
    warmup: Duration,
    duration: Duration,
    seed: u64,
) -> Res<Result> {
    db.drop().await?;
    let fixtures = Fixtures::new(seed);
    let latest = Bench::<LatestProduct>::new(db, &fixtures).await?;
    let helpful = Bench::<HelpfulProduct>::new(db, &fixtures).await?;
    let no_transactions = (latest.store.mode().await? != WriteMode::Transactional)
        .then(|| "the server has no transactions (standalone)".to_owned());

    // Side `t × VARIANTS + v` is variant `v` on targets `t`; the variants of one target run
    // back to back, and which goes first rotates between rounds.
    let variants = VARIANTS.len();
    let side = |t: usize, v: usize| t * variants + v;
    let schedule = Rounds {
        rounds,
        sides: Targets::ALL.len() * variants,
        shift: 1,
    };
    let runs = schedule
        .run(async |turn| {
            let (t, v) = (turn.side / variants, turn.side % variants);
            let Variant { way, view } = VARIANTS[v];
            if way == Way::Library(WriteMode::Transactional) && no_transactions.is_some() {
                return Ok(None);
            }
            let targets = Targets::ALL[t];
            let seed = seed ^ ((turn.round * 1000 + turn.side) as u64);
            let outcome = match view {
                View::Latest => latest.votes(way, targets, warmup, duration, seed).await?,
                View::MostHelpful => helpful.votes(way, targets, warmup, duration, seed).await?,
            };
            Ok(Some(outcome))
        })
        .await?;
    db.drop().await?;

    let mut rows = Vec::new();
    for (t, targets) in Targets::ALL.into_iter().enumerate() {
        for (v, variant) in VARIANTS.into_iter().enumerate() {
            let s = side(t, v);
            if runs.of(s).next().is_none() {
                continue;
            }
            let votes: u64 = runs.of(s).map(|o| o.votes).sum();
            let counted: i64 = runs.of(s).map(|o| o.counted).sum();
            rows.push(Row {
                targets,
                variant,
                votes,
                lost: votes as i64 - counted,
                rate: runs.spread(s, |o| o.run.rate()),
                p50: runs.spread(s, |o| o.run.p50()),
                p99: runs.spread(s, |o| o.run.p99()),
                stale: runs.of(s).map(|o| (o.stale, o.misordered)).collect(),
                over_inc: (v != HAND_INC)
                    .then(|| runs.ratio(s, side(t, HAND_INC), |o| o.run.rate())),
                ops_per_vote: runs.spread(s, |o| o.server.ops as f64 / o.votes as f64),
                commits_per_vote: runs.spread(s, |o| o.server.commits as f64 / o.votes as f64),
                aborts: runs.of(s).map(|o| o.server.aborts).sum(),
            });
        }
    }
    Ok(Result {
        seconds: duration.as_secs_f64(),
        warmup: warmup.as_secs_f64(),
        rounds,
        rows,
        no_transactions,
    })
}
