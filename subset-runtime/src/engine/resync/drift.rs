//! What a check or reconcile reports: how a parent's stored field differs from what the child
//! collection says it should hold, found from the two as plain values.

use crate::bson::{Bson, Document};

use super::malformed::MalformedChild;
use super::state::{Expected, Stored};
use crate::engine::sums;
use crate::model::SubsetSpec;

/// What a check or reconcile found for one parent and one subset field.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Drift {
    /// The parent's `_id`.
    pub parent: Bson,
    /// `_id`s that belong in the subset (the top `keep` of the child collection) but were not
    /// embedded.
    pub missing: Vec<Bson>,
    /// `_id`s that were embedded but do not belong there (evicted, deleted, or out of rank).
    pub stale: Vec<Bson>,
    /// `_id`s embedded with content that differs from the child collection's copy.
    pub changed: Vec<Bson>,
    /// Whether the right children were embedded but in the wrong order.
    pub misordered: bool,
    /// The stored count and the child collection's count, when they differ.
    pub count: Option<(i64, u64)>,
    /// Every running sum whose stored value differs from the sum over the child collection.
    pub sums: Vec<SumDrift>,
    /// Stored children that no subset may embed (a sort key missing or of a type its key
    /// cannot hold, a filter flag that is not a `bool`, a summed field that is not a number),
    /// found by a check or reconcile (up to 100 per parent): left out of the subset and of the
    /// sums they break, still counted, and reported here until they are fixed in the child
    /// collection. A reconcile cannot fix them; the program that wrote them must.
    pub malformed: Vec<MalformedChild>,
    /// `_id`s of malformed children among the first `keep` the child collection gives, in its
    /// order (none for a preview's head, whose embedded form may lack the field at fault).
    /// Left out of the subset, they are where a first page fails with
    /// [`crate::Error::MalformedChild`] on every parent, built or not: the parent's marker
    /// notes them so that a page reads the collection (see the guide's consistency page).
    pub malformed_in_head: Vec<Bson>,
    /// Whether the parent's note of [`Drift::malformed_in_head`] disagrees with the child
    /// collection: missing while some are there, or left from children since fixed. A
    /// reconcile rewrites it. Never set by a store of some fields, which writes no marker.
    pub malformed_note: bool,
    /// Whether the parent's views were built under another definition of the model (another
    /// `keep`, order, filter, preview, count or sum; a view added since), or under none (a
    /// writer of an older definition changed a child of it). Nothing else is compared then:
    /// a reconcile rebuilds every view of the parent, as [`crate::raw::Store::rebuild`]
    /// does, and reads compute such views from the child collection meanwhile.
    pub outdated: bool,
    /// `_id`s of children pushed to the parent but still queued in its fold document
    /// ([`crate::bookkeeping::Names::folds`]): pushes whose caller went away before a fold
    /// wrote them (or, for a moment, pushes waiting for a fold right now). They are in no page,
    /// count or sum. A reconcile in transactions writes them first, with one fold, and the rest
    /// of the drift is of the parent after them; without a transaction (or in the caller's) it
    /// only reports them, since taking them off the queue and writing them must be one
    /// transaction for a crash between the two not to lose them: the parent's next fold, or a
    /// reconcile in transactions, writes them.
    pub queued: Vec<Bson>,
    /// Whether the parent was rewritten to fix what was found.
    pub fixed: bool,
}

impl Drift {
    /// Whether the subset, the count and the sums were exactly right, and no stored child is
    /// malformed.
    pub fn is_clean(&self) -> bool {
        self.is_in_sync() && self.malformed.is_empty() && self.malformed_in_head.is_empty()
    }

    /// Whether the subset, the count, the sums and the note of malformed children were exactly
    /// right, and no push is queued: nothing a reconcile would write. Malformed children
    /// ([`Drift::malformed`], [`Drift::malformed_in_head`]) may still be reported: no reconcile
    /// can fix them.
    pub fn is_in_sync(&self) -> bool {
        !self.outdated
            && !self.malformed_note
            && self.queued.is_empty()
            && self.missing.is_empty()
            && self.stale.is_empty()
            && self.changed.is_empty()
            && !self.misordered
            && self.count.is_none()
            && self.sums.is_empty()
    }

    /// How `stored`, the field `spec` of `parent` as stored, differs from `expected`: the
    /// array always, the count and the sums when `expected` holds recounted totals.
    pub(super) fn between(
        spec: &SubsetSpec,
        parent: &Bson,
        stored: &Stored,
        expected: &Expected,
    ) -> Drift {
        let mut drift = compare(parent, stored.embedded(), &expected.top);
        drift.malformed_in_head = expected.head_malformed.clone();
        drift.malformed_note =
            expected.noting && stored.noted as usize != expected.head_malformed.len();
        let Some(totals) = &expected.totals else {
            return drift;
        };
        if spec.count.is_some() {
            let stored_n = stored.count_value();
            if stored_n != Some(totals.count as i64) {
                drift.count = Some((stored_n.unwrap_or(0), totals.count));
            }
        }
        for ((sum, stored), computed) in spec.sums.iter().zip(&stored.sums).zip(&totals.sums) {
            // An int32 and an int64 of one value are the same sum, and so are `1.0` and `1.00`;
            // a missing or non-numeric stored value is never right.
            let same = match (
                stored.as_ref().and_then(sums::Num::of),
                sums::Num::of(computed),
            ) {
                (Some(a), Some(b)) => a.same(b),
                _ => false,
            };
            if !same {
                drift.sums.push(SumDrift {
                    field: sum.parent.to_owned(),
                    stored: stored.clone().unwrap_or(Bson::Null),
                    computed: sums::like_stored(computed.clone(), stored.as_ref()),
                });
            }
        }
        drift
    }
}

/// A running sum (see [`crate::spec::SumSpec`]) that differs from the sum over the child collection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SumDrift {
    /// BSON name of the parent field holding the sum.
    pub field: String,
    /// The value stored in the parent (`Null` when the field is missing).
    pub stored: Bson,
    /// The sum over the child collection.
    pub computed: Bson,
}

/// How an embedded subset differs from the top `keep` of the collection.
fn compare(parent: &Bson, embedded: &[Document], top: &[Document]) -> Drift {
    let id = |d: &Document| d.get("_id").cloned().unwrap_or(Bson::Null);
    let embedded_ids: Vec<Bson> = embedded.iter().map(id).collect();
    let top_ids: Vec<Bson> = top.iter().map(id).collect();
    let missing = top_ids
        .iter()
        .filter(|i| !embedded_ids.contains(i))
        .cloned()
        .collect();
    // Not in the top `keep`, or embedded a second time.
    let stale = embedded_ids
        .iter()
        .enumerate()
        .filter(|(n, i)| !top_ids.contains(i) || embedded_ids[..*n].contains(i))
        .map(|(_, i)| i.clone())
        .collect();
    let changed = embedded
        .iter()
        .filter_map(|e| {
            let t = top.iter().find(|t| id(t) == id(e))?;
            (t != e).then(|| id(e))
        })
        .collect();
    let in_embedded_order: Vec<&Bson> = embedded_ids
        .iter()
        .filter(|i| top_ids.contains(i))
        .collect();
    let in_top_order: Vec<&Bson> = top_ids
        .iter()
        .filter(|i| embedded_ids.contains(i))
        .collect();
    Drift {
        parent: parent.clone(),
        missing,
        stale,
        changed,
        misordered: in_embedded_order != in_top_order,
        count: None,
        sums: Vec::new(),
        malformed: Vec::new(),
        malformed_in_head: Vec::new(),
        malformed_note: false,
        outdated: false,
        queued: Vec::new(),
        fixed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::doc;
    use crate::engine::query;
    use crate::engine::resync::state::Totals;
    use crate::spec::SpecBuilder;

    fn child(id: i32, v: i32) -> Document {
        doc! { "_id": id, "v": v }
    }

    use crate::engine::resync::fixtures::latest;

    fn review(id: i32, date: i64, rating: i32) -> Document {
        doc! { "_id": id, "date": date, "rating": rating, "body": "long text" }
    }

    fn stored(embedded: Vec<Document>, n: Option<Bson>, stars: Option<Bson>) -> Stored {
        Stored {
            embedded: Some(embedded),
            count: n,
            sums: vec![stars],
            noted: 0,
            adopting: false,
        }
    }

    fn expected(top: Vec<Document>, count: u64, stars: Bson) -> Expected {
        Expected {
            top,
            totals: Some(Totals {
                count,
                sums: vec![stars],
            }),
            head_malformed: Vec::new(),
            noting: true,
        }
    }

    #[test]
    fn compare_names_every_kind_of_drift() {
        let top = [child(1, 1), child(2, 2), child(3, 3)];
        assert!(compare(&Bson::Null, &top, &top).is_clean());
        let d = compare(&Bson::Null, &[child(2, 2), child(1, 1), child(9, 9)], &top);
        assert_eq!(d.missing, [Bson::Int32(3)]);
        assert_eq!(d.stale, [Bson::Int32(9)]);
        assert!(d.misordered);
        let d = compare(&Bson::Null, &[child(1, 1), child(1, 1), child(2, 5)], &top);
        assert_eq!(d.stale, [Bson::Int32(1)]);
        assert_eq!(d.changed, [Bson::Int32(2)]);
        assert_eq!(d.missing, [Bson::Int32(3)]);
    }

    #[test]
    fn a_field_as_it_should_be_has_no_drift() {
        let top = vec![review(3, 30, 5), review(2, 20, 4)];
        let right = stored(top.clone(), Some(Bson::Int32(2)), Some(Bson::Int64(9)));
        // Stored as int32 or int64, a count and a sum of one value are right.
        let drift = Drift::between(
            latest(),
            &Bson::Int32(7),
            &right,
            &expected(top, 2, 9.into()),
        );
        assert!(drift.is_clean(), "{drift:?}");
        assert_eq!(drift.parent, Bson::Int32(7));
        assert!(!drift.fixed);
    }

    #[test]
    fn a_child_missing_from_the_array_is_drift() {
        let top = vec![review(3, 30, 5), review(2, 20, 4), review(1, 10, 1)];
        let behind = stored(
            vec![review(2, 20, 4), review(1, 10, 1)],
            Some(Bson::Int64(3)),
            Some(Bson::Int64(10)),
        );
        let drift = Drift::between(
            latest(),
            &Bson::Int32(7),
            &behind,
            &expected(top, 3, 10.into()),
        );
        assert_eq!(drift.missing, [Bson::Int32(3)]);
        assert!(drift.stale.is_empty() && drift.changed.is_empty() && !drift.misordered);
        assert_eq!((drift.count, drift.sums.len()), (None, 0));
    }

    #[test]
    fn a_wrong_count_or_sum_is_drift_and_a_missing_one_is_read_as_zero_or_null() {
        let top = vec![review(3, 30, 5)];
        let wrong = stored(top.clone(), Some(Bson::Int32(2)), Some(Bson::Double(4.5)));
        let drift = Drift::between(
            latest(),
            &Bson::Int32(7),
            &wrong,
            &expected(top.clone(), 5, 12.into()),
        );
        assert_eq!(drift.count, Some((2, 5)));
        assert_eq!(
            drift.sums,
            [SumDrift {
                field: "stars".into(),
                stored: Bson::Double(4.5),
                computed: Bson::Int32(12),
            }]
        );
        assert!(drift.missing.is_empty() && !drift.is_clean());

        let bare = stored(top.clone(), None, None);
        let drift = Drift::between(
            latest(),
            &Bson::Int32(7),
            &bare,
            &expected(top, 1, 5.into()),
        );
        assert_eq!(drift.count, Some((0, 1)));
        assert_eq!(drift.sums[0].stored, Bson::Null);
    }

    #[test]
    fn without_recounted_totals_only_the_array_is_compared() {
        let top = vec![review(3, 30, 5)];
        let wrong = stored(top.clone(), Some(Bson::Int32(40)), None);
        let array_only = Expected {
            top,
            totals: None,
            ..Expected::default()
        };
        let drift = Drift::between(latest(), &Bson::Int32(7), &wrong, &array_only);
        assert!(drift.is_clean(), "{drift:?}");
    }

    #[test]
    fn a_note_that_disagrees_with_the_malformed_head_is_drift() {
        let top = vec![review(3, 30, 5)];
        let mut noted = stored(top.clone(), Some(Bson::Int64(2)), Some(Bson::Int64(5)));
        let mut should = expected(top, 2, 5.into());
        should.head_malformed = vec![Bson::Int32(9)];
        let drift = Drift::between(latest(), &Bson::Int32(7), &noted, &should);
        assert_eq!(drift.malformed_in_head, [Bson::Int32(9)]);
        assert!(drift.malformed_note && !drift.is_in_sync(), "{drift:?}");
        noted.noted = 1;
        let drift = Drift::between(latest(), &Bson::Int32(7), &noted, &should);
        // Noted: nothing to write, but a malformed child in the head is never clean.
        assert!(drift.is_in_sync() && !drift.is_clean(), "{drift:?}");
        // A note left from children since fixed is drift too.
        should.head_malformed.clear();
        let drift = Drift::between(latest(), &Bson::Int32(7), &noted, &should);
        assert!(drift.malformed_note, "{drift:?}");
        // A store that writes no marker compares no note.
        should.noting = false;
        let drift = Drift::between(latest(), &Bson::Int32(7), &noted, &should);
        assert!(drift.is_clean(), "{drift:?}");
    }

    #[test]
    fn a_whole_child_where_a_preview_belongs_has_changed() {
        let previews = SpecBuilder::new("latest", "reviews", "product_id")
            .keep(3)
            .sort("date desc")
            .embed(["rating"])
            .build()
            .expect("a valid descriptor");
        let whole = review(3, 30, 5);
        // What the child collection's projection gives: `_id`, the sort key, the preview field.
        let preview = query::embedded(previews, whole.clone());
        assert_eq!(preview, doc! { "_id": 3, "date": 30_i64, "rating": 5 });
        let embedded_whole = Stored {
            embedded: Some(vec![whole]),
            ..Stored::default()
        };
        let should = Expected {
            top: vec![preview],
            totals: None,
            ..Expected::default()
        };
        let drift = Drift::between(previews, &Bson::Int32(7), &embedded_whole, &should);
        assert_eq!(drift.changed, [Bson::Int32(3)]);
        assert!(drift.missing.is_empty() && drift.stale.is_empty() && !drift.misordered);
    }
}
