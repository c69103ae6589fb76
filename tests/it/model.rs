//! Model-based property test: random sequences of push, push_many, remove, update, partial
//! updates (`patch`), moves to another parent, retried pushes, concurrent pushes to one parent and reconcile over a few parents, against an in-memory
//! model of "the top `keep` by (sort keys, `_id`)". After every step each parent's embedded array
//! and count and running sum (read raw) equal the model, and full pagination, the `all` stream and `count` equal
//! the model's full list.
//!
//! Sort keys come from a tiny range (6 days × 3 scores) so that ties are the rule and `_id`
//! decides; the two sort keys run in opposite directions. The property runs over two parent
//! types: a short subset (`keep = 4`, every push the `$sort` update) and a long one
//! (`keep = 32`, larger batches so that it overflows its cap too), whose pushes try the head first.
//! Children arrive in random order, so its pushes land at the head (the `$position: 0` update)
//! and behind it (the `$sort` fallback); the test prints how many of each it made.
//!
//! A third parent type keeps three views of one child collection: the short subset's, a preview
//! view in another order, and a filtered preview view (children whose `flag` is set) with its
//! own count and sum. Updates flip the flag, moving children into and out of that view; every
//! view is checked against the model after every step.
//!
//! A fourth ranks its subset by score, with nothing summed: an increment raises a child, which
//! the store re-ranks in place (alone, in a run of one parent's votes, or in a group), and a
//! decrement lowers it, which recomputes the view.

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bson::{doc, Bson, DateTime, Document};
use futures::TryStreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Child, Cursor, Error, PageRequest, Store, Subset, SubsetField, WriteMode};
use subset_testkit::{MongoServer, Topology};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Note {
    #[serde(rename = "_id")]
    id: i64,
    day: DateTime,
    score: i32,
    text: String,
    flag: bool,
}

/// What the preview views embed of a note: no text, no flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Note)]
struct NotePreview {
    #[serde(rename = "_id")]
    id: i64,
    day: DateTime,
    score: i32,
}

// Latest day first; on the same day the lowest score first; then `_id` ascending (the direction
// of the last key).
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "boards")]
struct Short {
    #[serde(rename = "_id")]
    id: i32,
    #[subset(
        child = "notes",
        keep = 4,
        sort = "day desc, score asc",
        count = "total",
        sum = "score_total = score"
    )]
    top: Vec<Note>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    score_total: i64,
}

/// The same order at a `keep` where pushes try the head first (32 and up).
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "long_boards")]
struct Long {
    #[serde(rename = "_id")]
    id: i32,
    #[subset(
        child = "long_notes",
        keep = 32,
        sort = "day desc, score asc",
        count = "total",
        sum = "score_total = score"
    )]
    top: Vec<Note>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    score_total: i64,
}

/// The best scores first, counted and not summed: votes (`inc` of the score) re-rank the view
/// in place, alone and in groups.
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "ranked_boards")]
struct Ranked {
    #[serde(rename = "_id")]
    id: i32,
    #[subset(
        child = "ranked_notes",
        keep = 4,
        sort = "score desc, day desc",
        count = "total"
    )]
    top: Vec<Note>,
    #[serde(default)]
    total: i64,
}

/// Three views of one child collection and key: `top` as `Short` keeps it, the best scores as
/// previews, and the latest flagged notes as previews with their own count and sum.
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "viewed_boards")]
struct Viewed {
    #[serde(rename = "_id")]
    id: i32,
    #[subset(
        child = "viewed_notes",
        keep = 4,
        sort = "day desc, score asc",
        count = "total",
        sum = "score_total = score"
    )]
    top: Vec<Note>,
    #[subset(child = "viewed_notes", keep = 3, sort = "score desc, day desc")]
    best: Vec<NotePreview>,
    #[subset(
        child = "viewed_notes",
        keep = 2,
        sort = "day desc, score asc",
        filter = "flag",
        count = "flagged",
        sum = "flagged_score = score"
    )]
    flagged_top: Vec<NotePreview>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    score_total: i64,
    #[serde(default)]
    flagged: i64,
    #[serde(default)]
    flagged_score: i64,
}

/// A view besides `Board::FIELD`, as the model computes it.
struct View {
    field: &'static str,
    keep: usize,
    /// The view's order, written out here (with `_id` last, in the last key's direction).
    order: fn(&Note, &Note) -> std::cmp::Ordering,
    /// Whether a note is in the view at all.
    admits: fn(&Note) -> bool,
    /// The count and sum fields of the view, if any.
    count: Option<&'static str>,
    sum: Option<&'static str>,
}

/// A parent type the property runs over, with the sizes that make its cap matter.
trait Board: Subset<Id = i32> {
    const FIELD: SubsetField<Self, Note>;
    /// The field's `keep`, as the model cuts the list.
    const KEEP: usize;
    const PARENTS: usize;
    /// Children per `push_many`: batches around `KEEP` make a subset overflow its cap.
    const BATCH: Range<usize>;
    /// Page sizes used to read everything back: around `KEEP`, where a page leaves the embedded
    /// subset for the child collection.
    const PAGE_SIZES: &'static [u32];
    /// Cases per write mode in the long run (`long::`): fewer for the long subset, whose cases
    /// read more back.
    const CASES: u32;
    /// Cases per write mode in the everyday run: enough for every operation to meet every
    /// other, the cap and both push paths; the long run draws four times as many.
    const EVERYDAY_CASES: u32 = Self::CASES / 4;
    /// The other views of `FIELD`'s children, each embedding previews.
    const VIEWS: &'static [View] = &[];
    /// `FIELD`'s order, written out here (with `_id` last, in the last key's direction).
    const ORDER: fn(&Note, &Note) -> std::cmp::Ordering = order;
    fn empty(id: i32) -> Self;
}

impl Board for Viewed {
    const FIELD: SubsetField<Self, Note> = Viewed::TOP;
    const KEEP: usize = 4;
    const PARENTS: usize = 2;
    const BATCH: Range<usize> = 0..6;
    const PAGE_SIZES: &'static [u32] = &[1, 3, 4, 5, 100];
    const CASES: u32 = 24;
    const VIEWS: &'static [View] = &[
        View {
            field: "best",
            keep: 3,
            order: |a, b| {
                b.score
                    .cmp(&a.score)
                    .then(b.day.cmp(&a.day))
                    .then(b.id.cmp(&a.id))
            },
            admits: |_| true,
            count: None,
            sum: None,
        },
        View {
            field: "flagged_top",
            keep: 2,
            order,
            admits: |n| n.flag,
            count: Some("flagged"),
            sum: Some("flagged_score"),
        },
    ];
    fn empty(id: i32) -> Self {
        Viewed {
            id,
            top: Vec::new(),
            best: Vec::new(),
            flagged_top: Vec::new(),
            total: 0,
            score_total: 0,
            flagged: 0,
            flagged_score: 0,
        }
    }
}

impl Board for Short {
    const FIELD: SubsetField<Self, Note> = Short::TOP;
    const KEEP: usize = 4;
    const PARENTS: usize = 3;
    const BATCH: Range<usize> = 0..6;
    const PAGE_SIZES: &'static [u32] = &[1, 2, 3, 4, 5, 9, 100];
    const CASES: u32 = 32;
    fn empty(id: i32) -> Self {
        Short {
            id,
            top: Vec::new(),
            total: 0,
            score_total: 0,
        }
    }
}

impl Board for Ranked {
    const FIELD: SubsetField<Self, Note> = Ranked::TOP;
    const KEEP: usize = 4;
    const PARENTS: usize = 2;
    const BATCH: Range<usize> = 0..6;
    const PAGE_SIZES: &'static [u32] = &[1, 3, 4, 5, 100];
    const CASES: u32 = 32;
    const ORDER: fn(&Note, &Note) -> std::cmp::Ordering = |a, b| {
        b.score
            .cmp(&a.score)
            .then(b.day.cmp(&a.day))
            .then(b.id.cmp(&a.id))
    };
    fn empty(id: i32) -> Self {
        Ranked {
            id,
            top: Vec::new(),
            total: 0,
        }
    }
}

impl Board for Long {
    const FIELD: SubsetField<Self, Note> = Long::TOP;
    const KEEP: usize = 32;
    const PARENTS: usize = 2;
    const BATCH: Range<usize> = 8..80;
    const PAGE_SIZES: &'static [u32] = &[5, 16, 31, 32, 33, 50, 200];
    const CASES: u32 = 16;
    fn empty(id: i32) -> Self {
        Long {
            id,
            top: Vec::new(),
            total: 0,
            score_total: 0,
        }
    }
}

const MAX_STEPS: usize = 30;

#[derive(Debug, Clone)]
enum Op {
    Push {
        parent: usize,
        day: i64,
        score: i32,
    },
    PushMany {
        parent: usize,
        items: Vec<(i64, i32)>,
    },
    /// `pick` indexes the parent's children in order; one past the end names a child that is
    /// not the parent's (another parent's, or none at all).
    Remove {
        parent: usize,
        pick: usize,
    },
    /// New text always; a new day and/or score sometimes (the child may enter or leave), and
    /// the flag flipped sometimes (the child enters or leaves a filtered view).
    Update {
        parent: usize,
        pick: usize,
        day: Option<i64>,
        score: Option<i32>,
        flip: bool,
    },
    /// A partial update: the score incremented or decremented (a sort key and a summed
    /// field), sometimes a new day, the flag flipped, the text edited (a field only whole
    /// copies hold).
    Patch {
        parent: usize,
        pick: usize,
        by: i32,
        day: Option<i64>,
        flip: bool,
        edit: bool,
    },
    /// A child moved to the next parent.
    Move {
        parent: usize,
        pick: usize,
    },
    /// A child pushed again, as a client retry does: nothing may change.
    Repush {
        parent: usize,
        pick: usize,
    },
    Reconcile {
        parent: usize,
    },
    /// Several pushes to one parent at once: in a transaction they queue behind each other and
    /// share transactions (group commit).
    Concurrent {
        parent: usize,
        items: Vec<(i64, i32)>,
    },
    /// Different writers of one parent at once: pushes, increments of a sort key (each may
    /// re-rank), a removal, a move out and a reconcile. They commute, so the model applies them
    /// in any order; the store must end the same whatever the interleaving (in transactions
    /// they conflict and retry, without them they take turns on the parent).
    Interleaved {
        parent: usize,
        items: Vec<(i64, i32)>,
        votes: Vec<(usize, i32)>,
        remove: usize,
        out: usize,
    },
}

fn op<B: Board>() -> impl Strategy<Value = Op> {
    let parent = 0..B::PARENTS;
    let day = 0_i64..6;
    let score = 0_i32..3;
    prop_oneof![
        4 => (parent.clone(), day.clone(), score.clone())
            .prop_map(|(parent, day, score)| Op::Push { parent, day, score }),
        2 => (parent.clone(), prop::collection::vec((day.clone(), score.clone()), B::BATCH))
            .prop_map(|(parent, items)| Op::PushMany { parent, items }),
        3 => (parent.clone(), any::<usize>()).prop_map(|(parent, pick)| Op::Remove { parent, pick }),
        3 => (parent.clone(), any::<usize>(), prop::option::of(day.clone()), prop::option::of(score.clone()), any::<bool>())
            .prop_map(|(parent, pick, day, score, flip)| Op::Update { parent, pick, day, score, flip }),
        3 => (parent.clone(), any::<usize>(), -2_i32..=2, prop::option::of(day.clone()), any::<bool>(), any::<bool>())
            .prop_map(|(parent, pick, by, day, flip, edit)| Op::Patch { parent, pick, by, day, flip, edit }),
        2 => (parent.clone(), any::<usize>()).prop_map(|(parent, pick)| Op::Move { parent, pick }),
        1 => (parent.clone(), any::<usize>()).prop_map(|(parent, pick)| Op::Repush { parent, pick }),
        1 => parent.clone().prop_map(|parent| Op::Reconcile { parent }),
        2 => (parent.clone(), prop::collection::vec((day.clone(), score.clone()), 2..6))
            .prop_map(|(parent, items)| Op::Concurrent { parent, items }),
        3 => (parent, prop::collection::vec((day, score), 1..4), prop::collection::vec((any::<usize>(), -2_i32..=2), 1..6), any::<usize>(), any::<usize>())
            .prop_map(|(parent, items, votes, remove, out)| Op::Interleaved { parent, items, votes, remove, out }),
    ]
}

/// A case: the operations, and the page size used to read everything back after each step.
fn case<B: Board>() -> impl Strategy<Value = Vec<(Op, u32)>> {
    prop::collection::vec(
        (op::<B>(), prop::sample::select(B::PAGE_SIZES.to_vec())),
        1..=MAX_STEPS,
    )
}

/// The model: every parent's children, kept in the subset's order.
#[derive(Debug)]
struct Model {
    children: BTreeMap<usize, Vec<Note>>,
    next_id: i64,
    order: fn(&Note, &Note) -> std::cmp::Ordering,
}

fn order(a: &Note, b: &Note) -> std::cmp::Ordering {
    b.day
        .cmp(&a.day)
        .then(a.score.cmp(&b.score))
        .then(a.id.cmp(&b.id))
}

impl Model {
    fn new(order: fn(&Note, &Note) -> std::cmp::Ordering) -> Self {
        Model {
            children: BTreeMap::new(),
            next_id: 0,
            order,
        }
    }

    fn note(&mut self, day: i64, score: i32) -> Note {
        self.next_id += 1;
        Note {
            id: self.next_id,
            day: DateTime::from_millis(day),
            score,
            text: format!("note {} v0", self.next_id),
            flag: self.next_id % 3 != 0,
        }
    }

    fn list(&self, parent: usize) -> &[Note] {
        self.children.get(&parent).map_or(&[], Vec::as_slice)
    }

    fn insert(&mut self, parent: usize, notes: &[Note]) {
        let list = self.children.entry(parent).or_default();
        list.extend_from_slice(notes);
        list.sort_by(self.order);
    }

    fn pick(&self, parent: usize, pick: usize) -> Option<Note> {
        let list = self.list(parent);
        list.get(pick % (list.len() + 1)).cloned()
    }

    /// A child id that `parent` does not have: another parent's child if there is one.
    fn foreign(&self, parent: usize) -> i64 {
        self.children
            .iter()
            .filter(|(p, _)| **p != parent)
            .find_map(|(_, l)| l.first().map(|n| n.id))
            .unwrap_or(1_000_000)
    }
}

/// What the cases exercised, to show that the property reached the cap and both push paths.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    /// Cases in which some parent had more children than `keep`.
    over_cap: usize,
    /// Pushes (`push`, `push_many`) whose children all sort ahead of the stored head, and those
    /// with one behind it.
    at_head: usize,
    behind: usize,
}

impl Tally {
    fn add(&mut self, case: Tally) {
        self.cases += case.cases;
        self.over_cap += case.over_cap;
        self.at_head += case.at_head;
        self.behind += case.behind;
    }

    /// Counts a push of `batch` to `parent` before the model takes it.
    fn push(&mut self, model: &Model, parent: usize, batch: &[Note]) {
        if batch.is_empty() {
            return;
        }
        let ahead = match model.list(parent).first() {
            Some(head) => batch.iter().all(|n| (model.order)(n, head).is_lt()),
            None => true,
        };
        if ahead {
            self.at_head += 1;
        } else {
            self.behind += 1;
        }
    }
}

/// The note's text, `note N vK`, with the next version.
fn next_version(note: &Note) -> String {
    let version = note.text.rsplit('v').next().unwrap();
    let version = version.parse::<u32>().unwrap();
    format!("note {} v{}", note.id, version + 1)
}

fn board_id(parent: usize) -> i32 {
    parent as i32 + 1
}

async fn run_case<B: Board>(store: &Store<B>, steps: &[(Op, u32)]) -> Tally {
    store.ensure_indexes().await.unwrap();
    for parent in 0..B::PARENTS {
        store.insert(&B::empty(board_id(parent))).await.unwrap();
    }
    let notes = store.children(B::FIELD);
    let mut model = Model::new(B::ORDER);
    let mut tally = Tally {
        cases: 1,
        ..Tally::default()
    };
    for (step, (op, size)) in steps.iter().enumerate() {
        let context = format!("step {step}: {op:?}");
        match op {
            Op::Push { parent, day, score } => {
                let note = model.note(*day, *score);
                tally.push(&model, *parent, std::slice::from_ref(&note));
                notes.push(&board_id(*parent), &note).await.unwrap();
                model.insert(*parent, &[note]);
            }
            Op::PushMany { parent, items } => {
                let batch: Vec<Note> = items.iter().map(|(d, s)| model.note(*d, *s)).collect();
                tally.push(&model, *parent, &batch);
                notes.push_many(&board_id(*parent), &batch).await.unwrap();
                model.insert(*parent, &batch);
            }
            Op::Remove { parent, pick } => match model.pick(*parent, *pick) {
                Some(note) => {
                    notes.remove(&board_id(*parent), &note.id).await.unwrap();
                    let list = model.children.get_mut(parent).unwrap();
                    list.retain(|n| n.id != note.id);
                }
                None => {
                    let id = model.foreign(*parent);
                    let err = notes.remove(&board_id(*parent), &id).await.unwrap_err();
                    assert!(
                        matches!(err, Error::ChildNotFound { .. }),
                        "{context}: {err}"
                    );
                }
            },
            Op::Update {
                parent,
                pick,
                day,
                score,
                flip,
            } => match model.pick(*parent, *pick) {
                Some(mut note) => {
                    note.text = next_version(&note);
                    if let Some(day) = day {
                        note.day = DateTime::from_millis(*day);
                    }
                    if let Some(score) = score {
                        note.score = *score;
                    }
                    note.flag ^= *flip;
                    notes.update(&board_id(*parent), &note).await.unwrap();
                    let list = model.children.get_mut(parent).unwrap();
                    list.retain(|n| n.id != note.id);
                    model.insert(*parent, &[note]);
                }
                None => {
                    let mut stranger = model.note(0, 0);
                    stranger.id = model.foreign(*parent);
                    let err = notes
                        .update(&board_id(*parent), &stranger)
                        .await
                        .unwrap_err();
                    assert!(
                        matches!(err, Error::ChildNotFound { .. }),
                        "{context}: {err}"
                    );
                }
            },
            Op::Patch {
                parent,
                pick,
                by,
                day,
                flip,
                edit,
            } => match model.pick(*parent, *pick) {
                Some(mut note) => {
                    let id = board_id(*parent);
                    let mut patch = notes.patch(&id, &note.id);
                    if *by != 0 {
                        patch = patch.inc(Note::SCORE, *by);
                        note.score += by;
                    }
                    if let Some(day) = day {
                        note.day = DateTime::from_millis(*day);
                        patch = patch.set(Note::DAY, note.day);
                    }
                    if *flip {
                        note.flag = !note.flag;
                        patch = patch.set(Note::FLAG, note.flag);
                    }
                    if *edit {
                        note.text = next_version(&note);
                        patch = patch.set(Note::TEXT, note.text.clone());
                    }
                    patch.await.unwrap();
                    let list = model.children.get_mut(parent).unwrap();
                    list.retain(|n| n.id != note.id);
                    model.insert(*parent, &[note]);
                }
                None => {
                    let (id, foreign) = (board_id(*parent), model.foreign(*parent));
                    let patch = notes.patch(&id, &foreign).inc(Note::SCORE, 1);
                    let err = patch.await.unwrap_err();
                    assert!(
                        matches!(err, Error::ChildNotFound { .. }),
                        "{context}: {err}"
                    );
                }
            },
            Op::Move { parent, pick } => {
                let to = (parent + 1) % B::PARENTS;
                match model.pick(*parent, *pick) {
                    Some(note) => {
                        let (from_id, to_id) = (board_id(*parent), board_id(to));
                        notes.move_child(&from_id, &note.id, &to_id).await.unwrap();
                        let list = model.children.get_mut(parent).unwrap();
                        list.retain(|n| n.id != note.id);
                        model.insert(to, &[note]);
                    }
                    None => {
                        let (id, from_id, to_id) =
                            (model.foreign(*parent), board_id(*parent), board_id(to));
                        let moved = notes.move_child(&from_id, &id, &to_id);
                        let err = moved.await.unwrap_err();
                        assert!(
                            matches!(err, Error::ChildNotFound { .. }),
                            "{context}: {err}"
                        );
                    }
                }
            }
            Op::Repush { parent, pick } => {
                if let Some(note) = model.pick(*parent, *pick) {
                    notes.push(&board_id(*parent), &note).await.unwrap();
                }
            }
            Op::Concurrent { parent, items } => {
                let batch: Vec<Note> = items.iter().map(|(d, s)| model.note(*d, *s)).collect();
                let id = board_id(*parent);
                let pushes = batch
                    .iter()
                    .map(|note| std::future::IntoFuture::into_future(notes.push(&id, note)));
                for pushed in futures::future::join_all(pushes).await {
                    pushed.unwrap();
                }
                model.insert(*parent, &batch);
            }
            Op::Interleaved {
                parent,
                items,
                votes,
                remove,
                out,
            } => {
                let (id, to) = (board_id(*parent), (parent + 1) % B::PARENTS);
                let to_id = board_id(to);
                let listed = model.list(*parent).to_vec();
                // The removed, the moved and the voted notes are distinct, so that the writes
                // commute.
                let removed = model.pick(*parent, *remove);
                let others = |taken: &[Option<&Note>]| -> Vec<Note> {
                    listed
                        .iter()
                        .filter(|n| !taken.iter().flatten().any(|t| t.id == n.id))
                        .cloned()
                        .collect()
                };
                let movable = others(&[removed.as_ref()]);
                let moved = (!movable.is_empty()).then(|| movable[out % movable.len()].clone());
                let votable = others(&[removed.as_ref(), moved.as_ref()]);
                let voted: Vec<(i64, i32)> = match votable.is_empty() {
                    true => Vec::new(),
                    false => votes
                        .iter()
                        .filter(|(_, by)| *by != 0)
                        .map(|(pick, by)| (votable[pick % votable.len()].id, *by))
                        .collect(),
                };
                let batch: Vec<Note> = items.iter().map(|(d, s)| model.note(*d, *s)).collect();
                tally.push(&model, *parent, &batch);
                let pushes = futures::future::join_all(
                    batch
                        .iter()
                        .map(|n| IntoFuture::into_future(notes.push(&id, n))),
                );
                let voting = futures::future::join_all(voted.iter().map(|(note, by)| {
                    IntoFuture::into_future(notes.patch(&id, note).inc(Note::SCORE, *by))
                }));
                let removal = async {
                    match &removed {
                        Some(note) => notes.remove(&id, &note.id).await,
                        None => Ok(()),
                    }
                };
                let moving = async {
                    match &moved {
                        Some(note) => notes.move_child(&id, &note.id, &to_id).await,
                        None => Ok(()),
                    }
                };
                let reconcile = IntoFuture::into_future(notes.reconcile(&id));
                let (pushed, voted_all, removal, moving, reconciled) =
                    futures::join!(pushes, voting, removal, moving, reconcile);
                for result in pushed.into_iter().chain(voted_all).chain([removal, moving]) {
                    result.unwrap_or_else(|e| panic!("{context}: {e}"));
                }
                reconciled.unwrap_or_else(|e| panic!("{context}: {e}"));
                model.insert(*parent, &batch);
                let order = model.order;
                let list = model.children.entry(*parent).or_default();
                for (note, by) in &voted {
                    if let Some(n) = list.iter_mut().find(|n| n.id == *note) {
                        n.score += by;
                    }
                }
                list.retain(|n| Some(n.id) != removed.as_ref().map(|r| r.id));
                if let Some(note) = &moved {
                    list.retain(|n| n.id != note.id);
                }
                list.sort_by(order);
                if let Some(note) = moved {
                    model.insert(to, &[note]);
                }
            }
            Op::Reconcile { parent } => {
                let drift = notes.reconcile(&board_id(*parent)).await.unwrap();
                assert!(drift.is_clean() && !drift.fixed, "{context}: {drift:?}");
            }
        }
        for parent in 0..B::PARENTS {
            check_parent(store, &model, parent, *size, &context).await;
        }
        if model.children.values().any(|l| l.len() > B::KEEP) {
            tally.over_cap = 1;
        }
    }
    let report = store.check_all().await.unwrap();
    assert_eq!(report.progress.checked, B::PARENTS as u64);
    assert_eq!(report.progress.drifted, 0, "{:?}", report.drifts);
    tally
}

/// The parent as stored and as read equals the model.
async fn check_parent<B: Board>(
    store: &Store<B>,
    model: &Model,
    parent: usize,
    size: u32,
    context: &str,
) {
    let id = board_id(parent);
    let expected = model.list(parent);
    let context = format!("{context}, parent {id}, page size {size}");

    // The stored document, raw: the embedded array is the model's top `keep`, exactly (no
    // parent key, no stale content), and the count is the number of children.
    let raw = store
        .database()
        .collection::<Document>(B::COLLECTION)
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .unwrap();
    let spec = B::FIELD.spec();
    let embedded: Vec<Document> = raw
        .get_array(spec.field)
        .unwrap()
        .iter()
        .map(|e| e.as_document().unwrap().clone())
        .collect();
    let top: Vec<Document> = expected
        .iter()
        .take(B::KEEP)
        .map(|n| subset::bson_compat::to_document(n).unwrap())
        .collect();
    assert_eq!(embedded, top, "{context}: embedded array");
    assert_eq!(spec.keep as usize, B::KEEP, "the model's keep");
    let count = match raw.get(spec.count.unwrap()) {
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => i64::from(*n),
        other => panic!("{context}: count is {other:?}"),
    };
    assert_eq!(count, expected.len() as i64, "{context}: count");
    // The running sum of scores, where the board keeps one.
    if let Some(sum) = spec.sums.first() {
        let sum = match raw.get(sum.parent) {
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            other => panic!("{context}: score_total is {other:?}"),
        };
        let scores: i64 = expected.iter().map(|n| i64::from(n.score)).sum();
        assert_eq!(sum, scores, "{context}: running sum of scores");
    }
    for view in B::VIEWS {
        check_view(store, &raw, view, expected, size, &context).await;
    }

    // Every page, following cursors through their URL-safe encoding.
    let notes = store.children(B::FIELD);
    let mut paged = Vec::new();
    let mut request = PageRequest::first(size);
    let mut pages = 0;
    loop {
        let page = notes.page(&id, &request).await.unwrap();
        pages += 1;
        assert!(
            pages <= expected.len() + 2,
            "{context}: pagination does not end"
        );
        paged.extend(page.items);
        match page.next {
            Some(next) => {
                let next = Cursor::decode(&next.encode()).unwrap();
                request = PageRequest::after(next, size);
            }
            None => break,
        }
    }
    assert_eq!(paged, expected, "{context}: pagination");
    let all: Vec<Note> = notes.all(&id).await.unwrap().try_collect().await.unwrap();
    assert_eq!(all, expected, "{context}: all");
    assert_eq!(
        notes.count(&id).await.unwrap(),
        expected.len() as u64,
        "{context}: count()"
    );
}

/// One of the other views, as stored (previews of the model's top `keep` of the notes it
/// admits, in its order, with its count and sum) and as paged (whole notes, raw).
async fn check_view<B: Board>(
    store: &Store<B>,
    raw: &Document,
    view: &View,
    all: &[Note],
    size: u32,
    context: &str,
) {
    let context = format!("{context}, view {}", view.field);
    let mut expected: Vec<&Note> = all.iter().filter(|n| (view.admits)(n)).collect();
    expected.sort_by(|a, b| (view.order)(a, b));
    let previews: Vec<Document> = expected
        .iter()
        .take(view.keep)
        .map(|n| doc! { "_id": n.id, "day": n.day, "score": n.score })
        .collect();
    let embedded: Vec<Document> = raw
        .get_array(view.field)
        .unwrap()
        .iter()
        .map(|e| e.as_document().unwrap().clone())
        .collect();
    assert_eq!(embedded, previews, "{context}: embedded previews");
    let number = |field: &str| match raw.get(field) {
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => i64::from(*n),
        other => panic!("{context}: `{field}` is {other:?}"),
    };
    if let Some(count) = view.count {
        assert_eq!(number(count), expected.len() as i64, "{context}: count");
    }
    if let Some(sum) = view.sum {
        let scores: i64 = expected.iter().map(|n| i64::from(n.score)).sum();
        assert_eq!(number(sum), scores, "{context}: sum");
    }
    let spec = B::SUBSETS
        .iter()
        .find(|s| s.field == view.field)
        .expect("the view's descriptor");
    let handle = store.raw().children(spec);
    let id = raw.get("_id").unwrap().clone();
    let mut paged: Vec<i64> = Vec::new();
    let mut request = PageRequest::first(size);
    loop {
        let page = handle.page(&id, &request).await.unwrap();
        for item in &page.items {
            paged.push(item.get_i64("_id").unwrap());
            // Pages hold whole notes.
            assert!(item.get_str("text").is_ok(), "{context}: {item:?}");
        }
        match page.next {
            Some(next) => request = PageRequest::after(next, size),
            None => break,
        }
    }
    let ids: Vec<i64> = expected.iter().map(|n| n.id).collect();
    assert_eq!(paged, ids, "{context}: pagination");
    assert_eq!(
        handle.count(&id).await.unwrap(),
        ids.len() as u64,
        "{context}: count()"
    );
}

/// Runs the property on a fresh database per case, on one runtime for the whole test (a client
/// must stay on the runtime that made it).
fn run<B: Board>(mode: Option<WriteMode>, cases: u32) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let base = runtime.block_on(async {
        MongoServer::shared(Topology::ReplicaSet)
            .await
            .expect("start the test mongod")
            .database()
            .await
            .expect("connect to the test mongod")
    });
    let config = Config {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    };
    let started = Instant::now();
    let cases = AtomicUsize::new(0);
    let tally = std::sync::Mutex::new(Tally::default());
    let result = TestRunner::new(config).run(&case::<B>(), |steps| {
        let n = cases.fetch_add(1, Ordering::Relaxed);
        runtime.block_on(async {
            let db = base.client().database(&format!("{}_{n}", base.name()));
            let options = match mode {
                Some(mode) => subset::StoreOptions::new().mode(mode),
                None => subset::StoreOptions::new(),
            };
            let store = Store::<B>::with_options(&db, options);
            let expected = mode.unwrap_or(WriteMode::Transactional);
            assert_eq!(store.mode().await.unwrap(), expected);
            let case = run_case(&store, &steps).await;
            tally.lock().unwrap().add(case);
            db.drop().await.unwrap();
        });
        Ok(())
    });
    let tally = tally.into_inner().unwrap();
    eprintln!(
        "keep {}, {mode:?}: {} cases (with shrinking) in {:.2?}; over the cap in {} of {} \
         cases; {} pushes at the head, {} behind it",
        B::KEEP,
        cases.into_inner(),
        started.elapsed(),
        tally.over_cap,
        tally.cases,
        tally.at_head,
        tally.behind,
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn a_short_subset_follows_the_model_with_transactions() {
    run::<Short>(None, Short::EVERYDAY_CASES);
}

#[test]
fn a_short_subset_follows_the_model_with_ordered_writes() {
    run::<Short>(Some(WriteMode::Ordered), Short::EVERYDAY_CASES);
}

#[test]
fn a_long_subset_follows_the_model_with_transactions() {
    run::<Long>(None, Long::EVERYDAY_CASES);
}

#[test]
fn a_long_subset_follows_the_model_with_ordered_writes() {
    run::<Long>(Some(WriteMode::Ordered), Long::EVERYDAY_CASES);
}

#[test]
fn three_views_of_one_collection_follow_the_model_with_transactions() {
    run::<Viewed>(None, Viewed::EVERYDAY_CASES);
}

#[test]
fn a_subset_ranked_by_votes_follows_the_model_with_transactions() {
    run::<Ranked>(None, Ranked::EVERYDAY_CASES);
}

#[test]
fn a_subset_ranked_by_votes_follows_the_model_with_ordered_writes() {
    run::<Ranked>(Some(WriteMode::Ordered), Ranked::EVERYDAY_CASES);
}

#[test]
fn three_views_of_one_collection_follow_the_model_with_ordered_writes() {
    run::<Viewed>(Some(WriteMode::Ordered), Viewed::EVERYDAY_CASES);
}

/// The same properties with every case count whole, which `.ci/run` runs
/// (`cargo test --test it ::long:: -- --ignored`).
mod long {
    use super::*;

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn a_short_subset_follows_the_model_with_transactions() {
        run::<Short>(None, Short::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn a_short_subset_follows_the_model_with_ordered_writes() {
        run::<Short>(Some(WriteMode::Ordered), Short::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn a_long_subset_follows_the_model_with_transactions() {
        run::<Long>(None, Long::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn a_long_subset_follows_the_model_with_ordered_writes() {
        run::<Long>(Some(WriteMode::Ordered), Long::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn three_views_of_one_collection_follow_the_model_with_transactions() {
        run::<Viewed>(None, Viewed::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn three_views_of_one_collection_follow_the_model_with_ordered_writes() {
        run::<Viewed>(Some(WriteMode::Ordered), Viewed::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn a_subset_ranked_by_votes_follows_the_model_with_transactions() {
        run::<Ranked>(None, Ranked::CASES);
    }

    #[test]
    #[ignore = "long: the full case counts; .ci/run runs it"]
    fn a_subset_ranked_by_votes_follows_the_model_with_ordered_writes() {
        run::<Ranked>(Some(WriteMode::Ordered), Ranked::CASES);
    }
}
