//! The serde attributes the derives follow rather than refuse (the refusals are in
//! `subset-ui/tests/ui/`; `docs/guide/serde.md` lists both): each struct here compiles, and the
//! descriptors say what the engine reads and writes.

use serde::{Deserialize, Deserializer, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::spec::{CountField, FilterField, SortValues, SortableField, SumField};
use subset::{Child, Subset};

/// A child in a module of its own, with a field of a type private to that module: the parent,
/// elsewhere, names only the child's public fields.
mod model {
    use serde::{Deserialize, Serialize};
    use subset::bson::{self, oid::ObjectId};
    use subset::Child;

    #[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
    enum Mood {
        #[default]
        Calm,
    }

    #[derive(Serialize, Deserialize, Child)]
    pub struct Note {
        #[serde(rename = "_id")]
        pub id: ObjectId,
        pub date: bson::DateTime,
        #[serde(default)]
        mood: Mood,
    }

    impl Note {
        pub fn mood(&self) -> &'static str {
            match self.mood {
                Mood::Calm => "calm",
            }
        }
    }
}

/// A stars rating stored as the integer it wraps: a sort key and a summed field once it says
/// so, by implementing `SortableField` and `SumField`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
struct Stars(i32);

impl SortableField for Stars {
    const VALUES: SortValues = <i32 as SortableField>::VALUES;
}

impl SumField<Stars> for i64 {}

/// A flag stored as the `bool` it wraps: a filter once it says so.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
struct Flag(bool);

impl FilterField for Flag {}

/// A count stored as the integer it wraps.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
struct Tally(i64);

impl CountField for Tally {}

fn lenient_votes<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    // Reads what serde stores for an `i32` (and a double, for older documents).
    f64::deserialize(d).map(|v| v as i32)
}

fn epoch() -> bson::DateTime {
    bson::DateTime::from_millis(0)
}

fn is_empty(s: &str) -> bool {
    s.is_empty()
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    // A default only changes how a document without the field reads: every review is stored
    // with it, so it can be a sort key.
    #[serde(default = "epoch")]
    date: bson::DateTime,
    stars: Stars,
    // How a stored value is read is the type's own business: stored as an `i32`, so it can be
    // a sort key and summed.
    #[serde(deserialize_with = "lenient_votes")]
    votes: i32,
    // Stored, but never read back (its default is what a decoded review holds): still a filter
    // and a sum, which the server evaluates on the stored documents.
    #[serde(skip_deserializing)]
    verified: bool,
    #[serde(skip_deserializing)]
    weight: i32,
    flagged: Flag,
    // Left out when empty, and read back as empty: no parent sorts, filters or sums by it.
    #[serde(default, skip_serializing_if = "is_empty")]
    title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

/// A preview of a field the full type leaves out when empty reads it back as empty too.
#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    #[serde(default)]
    title: String,
    note: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "stars desc, votes desc",
        count = "tally",
        sum = "total_stars = stars, total_weight = weight"
    )]
    best: Vec<Review>,
    #[subset(child = "reviews", keep = 5, sort = "date desc", filter = "verified")]
    verified_reviews: Vec<ReviewPreview>,
    #[subset(child = "reviews", keep = 5, sort = "date desc", filter = "!flagged")]
    unflagged: Vec<Review>,
    // The same order as `unflagged` but for the direction of the `_id` tie-breaker, so not the
    // same view.
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc, id asc",
        filter = "!flagged"
    )]
    unflagged_oldest_first_on_ties: Vec<Review>,
    #[subset(child = "notes", keep = 3, sort = "date desc", count = "notes_count")]
    notes: Vec<model::Note>,
    // The engine writes counts and sums itself (an insert sets them to 0): how serde writes the
    // struct's own value does not matter.
    #[serde(default, skip_serializing_if = "is_zero")]
    notes_count: i64,
    #[serde(default)]
    tally: Tally,
    #[serde(default)]
    total_stars: i64,
    #[serde(default)]
    total_weight: i64,
}

#[test]
fn serde_attrs() {
    let [best, verified, unflagged, ties, notes] = <Product as Subset>::SUBSETS else {
        panic!("five subset fields");
    };
    let sort = |spec: &subset::spec::SubsetSpec| -> Vec<_> {
        spec.order()
            .map(|k| (k.field, k.direction.as_i32()))
            .collect()
    };
    assert_eq!(sort(best), [("stars", -1), ("votes", -1), ("_id", -1)]);
    assert_eq!(best.sort[0].values, <i32 as SortableField>::VALUES);
    assert_eq!(best.count, Some("tally"));
    let sums: Vec<_> = best.sums.iter().map(|s| (s.parent, s.child)).collect();
    assert_eq!(sums, [("total_stars", "stars"), ("total_weight", "weight")]);
    assert_eq!(
        verified.filter.map(|f| (f.field, f.equals)),
        Some(("verified", true))
    );
    assert_eq!(
        unflagged.filter.map(|f| (f.field, f.equals)),
        Some(("flagged", false))
    );
    assert_eq!(sort(unflagged), [("date", -1), ("_id", -1)]);
    assert_eq!(sort(ties), [("date", -1), ("_id", 1)]);
    assert_eq!(notes.count, Some("notes_count"));
    assert_eq!(
        <ReviewPreview as Child>::EMBED.map(|fields| fields.len()),
        Some(4)
    );
    let _ = model::Note::mood;
}
