//! The write that makes a parent's field what it should be: the `$set` of what drifted, the
//! `$inc` a removal or replacement brings, and the filter that makes the write conditional on
//! the field being as read.

use crate::bson::{doc, Bson, Document};

use super::state::{Expected, Stored};
use super::{CountFix, Drift};
use crate::engine::model_change::{adoption_mark, malformed_note};
use crate::model::SubsetSpec;

/// One parent update: which parent, in which state, and what changes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Fix {
    pub(super) filter: Document,
    pub(super) update: Document,
}

impl Fix {
    /// The update that turns `stored` (field `spec` of `parent`) into `expected`, given the
    /// `drift` found between them, together with `count_fix`'s `$inc`; `None` when there is
    /// nothing to write.
    ///
    /// The `$set` is conditional on the array, and on the count and sums when they were
    /// recounted, still being as read: a concurrent push changes one of them, so the update
    /// misses rather than overwriting that push, and the resync reads again. A bare `$inc` is
    /// relative, and applies whatever the field holds.
    pub(super) fn of(
        spec: &SubsetSpec,
        parent: &Bson,
        stored: &Stored,
        expected: &Expected,
        drift: &Drift,
        count_fix: &CountFix,
    ) -> Option<Fix> {
        let mut set = Document::new();
        if stored.embedded.as_ref() != Some(&expected.top) {
            set.insert(spec.field, expected.top.clone());
        }
        if let (Some(count), Some(totals)) = (spec.count, &expected.totals) {
            if drift.count.is_some() {
                set.insert(count, totals.count as i64);
            }
        }
        for wrong in &drift.sums {
            set.insert(wrong.field.clone(), wrong.computed.clone());
        }
        let mut filter = doc! { "_id": parent.clone() };
        if !set.is_empty() {
            filter.extend(as_read(spec, stored, expected));
        }
        // The note needs no condition of its own: it says what the child collection holds,
        // which no write of this library makes malformed.
        let mut unset = Document::new();
        if drift.malformed_note {
            match expected.head_malformed.len() {
                0 => unset.insert(malformed_note(spec), ""),
                n => set.insert(malformed_note(spec), n as i64),
            };
        }
        // An adoption's last step (or a reconcile that finished it for it: either checked that
        // the view drops no child that is not stored, see `Model::would_empty`) removes its
        // mark with the view it builds.
        if stored.adopting && matches!(count_fix, CountFix::Recount) {
            unset.insert(adoption_mark(spec), "");
        }
        let mut update = Document::new();
        if !set.is_empty() {
            update.insert("$set", set);
        }
        if !unset.is_empty() {
            update.insert("$unset", unset);
        }
        if let CountFix::Inc(inc) = count_fix {
            if !inc.is_empty() {
                update.insert("$inc", inc.clone());
            }
        }
        (!update.is_empty()).then_some(Fix { filter, update })
    }
}

/// The conditions that hold while the parent is as `stored` says: its array, and, when they
/// were recounted, its count and sums (each missing one as missing).
fn as_read(spec: &SubsetSpec, stored: &Stored, expected: &Expected) -> Document {
    let exact = |value: &Option<Bson>| match value {
        Some(v) => v.clone(),
        None => Bson::Document(doc! { "$exists": false }),
    };
    let mut filter = Document::new();
    match &stored.embedded {
        Some(array) => filter.insert(spec.field, array.clone()),
        None => filter.insert(spec.field, doc! { "$exists": false }),
    };
    if expected.totals.is_none() {
        return filter;
    }
    if let Some(count) = spec.count {
        filter.insert(count, exact(&stored.count));
    }
    for (sum, value) in spec.sums.iter().zip(&stored.sums) {
        filter.insert(sum.parent, exact(value));
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::resync::state::Totals;

    use crate::engine::resync::fixtures::latest;

    fn review(id: i32, date: i64, rating: i32) -> Document {
        doc! { "_id": id, "date": date, "rating": rating }
    }

    fn fix(stored: &Stored, expected: &Expected, count_fix: &CountFix) -> Option<Fix> {
        let drift = Drift::between(latest(), &Bson::Int32(7), stored, expected);
        Fix::of(
            latest(),
            &Bson::Int32(7),
            stored,
            expected,
            &drift,
            count_fix,
        )
    }

    fn recounted(top: Vec<Document>, count: u64, stars: i64) -> Expected {
        Expected {
            top,
            totals: Some(Totals {
                count,
                sums: vec![Bson::Int64(stars)],
            }),
            ..Expected::default()
        }
    }

    #[test]
    fn nothing_drifted_and_nothing_to_count_writes_nothing() {
        let top = vec![review(2, 20, 4)];
        let right = Stored {
            embedded: Some(top.clone()),
            count: Some(Bson::Int64(1)),
            sums: vec![Some(Bson::Int32(4))],
            noted: 0,
            adopting: false,
        };
        let expected = recounted(top, 1, 4);
        assert_eq!(fix(&right, &expected, &CountFix::Recount), None);
        assert_eq!(
            fix(&right, &expected, &CountFix::Inc(Document::new())),
            None
        );
    }

    #[test]
    fn a_drifted_array_count_and_sum_are_set_if_still_as_read() {
        let top = vec![review(3, 30, 5), review(2, 20, 4)];
        let behind = Stored {
            embedded: Some(vec![review(2, 20, 4)]),
            count: Some(Bson::Int32(1)),
            sums: vec![None],
            noted: 0,
            adopting: false,
        };
        let fix = fix(&behind, &recounted(top.clone(), 2, 9), &CountFix::Recount).expect("a write");
        assert_eq!(
            fix.update,
            doc! { "$set": { "latest": top, "n": 2_i64, "stars": 9_i64 } }
        );
        assert_eq!(
            fix.filter,
            doc! {
                "_id": 7,
                "latest": [review(2, 20, 4)],
                "n": 1,
                "stars": { "$exists": false },
            }
        );
    }

    #[test]
    fn an_absent_field_is_set_even_to_an_empty_array() {
        let absent = Stored {
            embedded: None,
            count: None,
            sums: vec![None],
            noted: 0,
            adopting: false,
        };
        let array_only = Expected {
            top: Vec::new(),
            totals: None,
            ..Expected::default()
        };
        let fix = fix(&absent, &array_only, &CountFix::Recount).expect("a write");
        assert_eq!(fix.update, doc! { "$set": { "latest": [] } });
        // Not recounted: the count and sums are neither set nor part of the condition.
        assert_eq!(
            fix.filter,
            doc! { "_id": 7, "latest": { "$exists": false } }
        );
    }

    #[test]
    fn a_removal_counts_with_a_bare_inc_or_alongside_the_set() {
        let top = vec![review(2, 20, 4)];
        let array_only = Expected {
            top: top.clone(),
            totals: None,
            ..Expected::default()
        };
        let removal = CountFix::Inc(doc! { "n": -1_i64, "stars": -5_i64 });
        let right = Stored {
            embedded: Some(top.clone()),
            count: Some(Bson::Int64(2)),
            sums: vec![Some(Bson::Int64(9))],
            noted: 0,
            adopting: false,
        };
        let fix_right = fix(&right, &array_only, &removal).expect("a write");
        assert_eq!(fix_right.filter, doc! { "_id": 7 });
        assert_eq!(
            fix_right.update,
            doc! { "$inc": { "n": -1_i64, "stars": -5_i64 } }
        );

        let with_removed = Stored {
            embedded: Some(vec![review(3, 30, 5), review(2, 20, 4)]),
            ..right
        };
        let fix_drifted = fix(&with_removed, &array_only, &removal).expect("a write");
        assert_eq!(
            fix_drifted.update,
            doc! {
                "$set": { "latest": top },
                "$inc": { "n": -1_i64, "stars": -5_i64 },
            }
        );
        assert_eq!(
            fix_drifted.filter,
            doc! { "_id": 7, "latest": [review(3, 30, 5), review(2, 20, 4)] }
        );
    }

    #[test]
    fn a_note_is_set_to_the_malformed_head_or_unset_when_none() {
        let top = vec![review(2, 20, 4)];
        let right = Stored {
            embedded: Some(top.clone()),
            count: Some(Bson::Int64(2)),
            sums: vec![Some(Bson::Int64(4))],
            noted: 0,
            adopting: false,
        };
        let mut expected = recounted(top, 2, 4);
        expected.noting = true;
        expected.head_malformed = vec![Bson::Int32(9)];
        let noting = fix(&right, &expected, &CountFix::Recount).expect("a write");
        assert_eq!(
            noting.update,
            doc! { "$set": { "_subset.v.latest.m": 1_i64 } }
        );
        assert_eq!(noting.filter, doc! { "_id": 7 });
        let noted = Stored { noted: 1, ..right };
        expected.head_malformed.clear();
        let clearing = fix(&noted, &expected, &CountFix::Recount).expect("a write");
        assert_eq!(
            clearing.update,
            doc! { "$unset": { "_subset.v.latest.m": "" } }
        );
        expected.noting = false;
        assert_eq!(fix(&noted, &expected, &CountFix::Recount), None);
    }
}
