//! The condition a parent update carries (see [`crate::engine::parent_write`]), and how a stored
//! parent's views may be read under a store's definition.

use super::Model;
use crate::bson::raw::RawBsonRef;
use crate::bson::{doc, oid::ObjectId, Bson, Document, RawDocument, RawDocumentBuf};

use super::digest::view_digest;
use super::marker::MARKER;
use super::registry::Registry;
use crate::engine::exec::Ctx;
use crate::engine::query::ReadAhead;
use crate::engine::RawStore;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// `parent`'s marker: `Ok(None)` for none, `Err` for one that is not a document.
fn marker_of(parent: &RawDocument) -> std::result::Result<Option<&RawDocument>, ()> {
    match parent.get(MARKER) {
        Ok(None) => Ok(None),
        Ok(Some(marker)) => marker.as_document().map(Some).ok_or(()),
        Err(_) => Err(()),
    }
}

/// The definition a parent whose marker is `marker` ([`marker_of`]) is marked with: `Ok(None)`
/// for none (no marker, or one holding only a write's touch, see [`touch`]), `Err` for a
/// marker that is not a document.
fn marked_with(
    marker: std::result::Result<Option<&RawDocument>, ()>,
) -> std::result::Result<Option<&str>, ()> {
    marker.map(|m| m.and_then(|m| m.get_str("d").ok()))
}

/// Whether a write of this library has marked `parent` (a stored parent, or a projection
/// holding its marker) as built under some definition, or under none: by [`marked_with`], which
/// decides it for every reader.
pub(crate) fn marked(parent: &RawDocument) -> bool {
    !matches!(marked_with(marker_of(parent)), Ok(None))
}

/// The `$set` a parent update in a transaction adds, `_subset.w` to a new value, so that it
/// always modifies the parent: an update that changes nothing else (a push sliced off at once,
/// copies of a child no view holds) would not write, and a rebuild under another model in a
/// concurrent transaction, which read the children before this one changed them, would not
/// conflict with it.
pub(crate) fn touch() -> (String, Bson) {
    (format!("{MARKER}.w"), Bson::ObjectId(ObjectId::new()))
}

/// How a view of a stored parent may be read under this store's definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ViewState {
    /// Built under this view's definition with at least its `keep`: the first `keep` stored
    /// are the view.
    Fresh,
    /// Built under another definition, or not at all, or left by a writer that stopped
    /// between its writes (an expired lease): compute it from the child collection.
    Stale,
}

impl Model<'_> {
    /// Whether this store knows only some fields of its model ([`RawStore::for_fields`]).
    pub(crate) fn is_partial(&self) -> bool {
        self.shared.definition.partial
    }
    /// The condition every in-place parent update adds to its filter: that the parent was
    /// built under this store's definition.
    pub(crate) fn marked(&self, registry: &Registry) -> Document {
        let own = self.shared.definition.digest();
        if self.shared.definition.partial {
            return fields_marked(self);
        }
        let path = format!("{MARKER}.d");
        if registry.legacy == own {
            doc! { path: { "$in": [own, Bson::Null] } }
        } else {
            doc! { path: own }
        }
    }

    /// The filter an in-place parent update adds: [`RawStore::marked`], and every subset field
    /// present, so that a write never creates a field in place (a parent written without it,
    /// or whose field was removed, is settled instead, which builds it whole).
    pub(crate) async fn in_place(&self) -> Result<Document> {
        let mut filter = self.marked(&*self.registry().await?);
        for spec in self.spec().subsets {
            filter.insert(spec.field, doc! { "$exists": true });
        }
        Ok(filter)
    }

    /// Whether `parent` (a stored parent, or a projection holding its marker) was built under
    /// this store's definition.
    pub(crate) fn built_here(&self, parent: &RawDocument, registry: &Registry) -> bool {
        let own = self.shared.definition.digest();
        if self.shared.definition.partial {
            return fields_built_here(self, parent);
        }
        match marked_with(marker_of(parent)) {
            Ok(None) => registry.legacy == own,
            Ok(Some(d)) => d == own,
            Err(()) => false,
        }
    }

    /// How the view `spec` of the stored `parent` may be read. The registry is read only for
    /// a parent without a marker.
    pub(crate) async fn view_state(
        &self,
        parent: &RawDocument,
        spec: &SubsetSpec,
    ) -> Result<ViewState> {
        // One lookup of the marker, which every answer below reads: a read pays it each time.
        let found = marker_of(parent);
        let marker = found.ok().flatten();
        // A writer stopped between its writes: whatever the marker says, the views may lag.
        if marker.is_some_and(crate::engine::exec::lease::abandoned) {
            return Ok(ViewState::Stale);
        }
        let unmarked = matches!(marked_with(found), Ok(None));
        // Unmarked: written before markers, or around this library. A store of some fields
        // takes such a parent as built under them, as every tool did before.
        if unmarked && self.shared.definition.partial {
            return Ok(ViewState::Fresh);
        }
        // Built under the first model, if this is it and the field is there: a field missing
        // from an unmarked parent is a view added since (or never built), which the child
        // collection answers.
        if unmarked {
            let registry = self.registry_to_read().await?;
            let legacy = registry.legacy == self.shared.definition.digest();
            let present = matches!(parent.get(spec.field), Ok(Some(_)));
            return Ok(if legacy && present {
                ViewState::Fresh
            } else {
                ViewState::Stale
            });
        }
        // A descriptor the store does not list (made at run time) has its digest made here.
        let listed = self
            .field_index(spec)
            .and_then(|i| self.shared.definition.views.get(i));
        let made;
        let own = match listed {
            Some(own) => own.as_str(),
            None => {
                made = view_digest(spec);
                made.as_str()
            }
        };
        let view = marker
            .and_then(|m| m.get_document("v").ok())
            .and_then(|v| v.get_document(spec.field).ok());
        let Some(view) = view else {
            return Ok(ViewState::Stale);
        };
        if view.get_str("b").ok() != Some(own) {
            return Ok(ViewState::Stale);
        }
        let stored_keep = match view.get("k") {
            Ok(Some(k)) => crate::decode::count_value(k).unwrap_or(0),
            _ => 0,
        };
        if stored_keep >= i64::from(spec.keep) {
            return Ok(ViewState::Fresh);
        }
        // Built with a smaller `keep`: enough when the array holds fewer than that, which is
        // then every child there is.
        let held = parent
            .get_array(spec.field)
            .map_or(i64::MAX, |a| a.into_iter().count() as i64);
        Ok(if held < stored_keep {
            ViewState::Fresh
        } else {
            ViewState::Stale
        })
    }

    /// The stored `parent` as a reader of this definition sees it: each view built under
    /// another definition replaced by what the child collection says ([`RawStore::computed`]:
    /// from `ahead` when the parent was read ahead, else one `aggregate` per child collection
    /// for all of them), each built with a larger `keep` cut to this one. A parent whose views
    /// are all this definition's is returned as it is, without a copy. Counted for the
    /// store's [`Lookahead`](super::Lookahead).
    pub(crate) async fn served(
        &self,
        ctx: &mut Ctx<'_>,
        parent: RawDocumentBuf,
        ahead: Option<&ReadAhead>,
    ) -> Result<RawDocumentBuf> {
        let mut stale = Vec::new();
        let mut long = Vec::new();
        for (i, spec) in self.spec().subsets.iter().enumerate() {
            let state = self.view_state(&parent, spec).await?;
            self.shared.lookahead.saw(i, state == ViewState::Stale);
            match state {
                ViewState::Stale => stale.push(spec),
                ViewState::Fresh => {
                    let held = parent
                        .get_array(spec.field)
                        .map_or(0, |a| a.into_iter().count());
                    if held > spec.keep as usize {
                        long.push(spec);
                    }
                }
            }
        }
        if stale.is_empty() && long.is_empty() {
            return Ok(parent);
        }
        let id = crate::decode::id_of(&parent);
        let malformed = |problem: String| Error::MalformedParent {
            collection: self.collection_name().to_owned(),
            id: Box::new(id.clone()),
            field: MARKER.to_owned(),
            problem,
        };
        let mut doc = Document::try_from(parent.as_ref())
            .map_err(|e| malformed(format!("is unreadable: {e}")))?;
        for spec in long {
            if let Ok(array) = doc.get_array_mut(spec.field) {
                array.truncate(spec.keep as usize);
            }
        }
        let computed = self.computed(ctx, &id, &stale, ahead).await?;
        for (spec, mut fields) in stale.into_iter().zip(computed) {
            // The sum of no children is an integer 0: in the type the parent stores the sum
            // in, so that a `Decimal128` sum reads as one.
            for sum in spec.sums {
                if let Some(value) = fields.get_mut(sum.parent) {
                    let computed = std::mem::replace(value, Bson::Null);
                    *value = crate::engine::sums::like_stored(computed, doc.get(sum.parent));
                }
            }
            doc.extend(fields);
        }
        RawDocumentBuf::try_from(&doc).map_err(|e| malformed(format!("cannot be re-encoded: {e}")))
    }
}

/// [`RawStore::marked`] of a store of some fields: the parent's marker has no entry for
/// them (no marker, or one of a model without them), or entries that are exactly their
/// definitions and `keep`s; never one marked as built under none. Without `$or`, which other conditions of a
/// filter use.
fn fields_marked(store: &RawStore) -> Document {
    // Not a parent marked as built under none (a rebuild under way, or one to come).
    let mut exact = doc! { format!("{MARKER}.d"): { "$ne": "" } };
    for (spec, b) in store
        .spec()
        .subsets
        .iter()
        .zip(&store.shared.definition.views)
    {
        let view = format!("{MARKER}.v.{}", spec.field);
        exact.insert(
            format!("{view}.b"),
            doc! { "$in": [b.as_str(), Bson::Null] },
        );
        let keep = i64::from(spec.keep);
        exact.insert(format!("{view}.k"), doc! { "$in": [keep, Bson::Null] });
    }
    exact
}

/// [`RawStore::built_here`] of a store of some fields (see [`fields_marked`]).
fn fields_built_here(store: &RawStore, parent: &RawDocument) -> bool {
    entries_built_here(store.spec().subsets, &store.shared.definition.views, parent)
}

/// Whether `parent`'s marker takes the views `subsets` (of digests `views`) as built under
/// them, as [`fields_marked`] does: not marked as built under none, and each view's entry
/// absent or holding their digest and `keep` where it holds one.
fn entries_built_here(subsets: &[SubsetSpec], views: &[String], parent: &RawDocument) -> bool {
    let marker = match parent.get(MARKER) {
        Ok(Some(m)) => m.as_document(),
        _ => None,
    };
    if marker.is_some_and(|m| m.get_str("d").ok() == Some("")) {
        return false;
    }
    let entries = marker.and_then(|m| m.get_document("v").ok());
    subsets.iter().zip(views).all(|(spec, b)| {
        let Some(Ok(view)) = entries.map(|v| v.get_document(spec.field)) else {
            return true;
        };
        // A missing `b` or `k` matches the filter's `null` (an entry holding only a note, on
        // an unmarked parent).
        let b_here = match view.get("b").ok().flatten() {
            None | Some(RawBsonRef::Null) => true,
            Some(other) => other.as_str() == Some(b.as_str()),
        };
        let k_here = match view.get("k").ok().flatten() {
            None | Some(RawBsonRef::Null) => true,
            Some(k) => crate::decode::count_value(k) == Some(i64::from(spec.keep)),
        };
        b_here && k_here
    })
}

#[cfg(test)]
mod tests {
    use super::super::marker::{malformed_note, noted_malformed, with_note};
    use super::*;
    use crate::model::TEST_SPEC;

    fn raw(d: Document) -> RawDocumentBuf {
        RawDocumentBuf::try_from(&d).expect("a document")
    }

    #[test]
    fn a_note_is_read_where_it_is_written() {
        let field = TEST_SPEC.field;
        assert_eq!(malformed_note(&TEST_SPEC), format!("_subset.v.{field}.m"));
        let view = with_note(doc! { "b": "x", "k": 5_i64 }, 2);
        let parent = raw(doc! { "_id": 1, MARKER: { "d": "y", "v": { field: view.clone() } } });
        assert_eq!(noted_malformed(&parent, &TEST_SPEC), 2);
        // Cleared by a count of none; absent, or a marker of another shape, reads as none.
        let cleared = with_note(view, 0);
        assert_eq!(cleared, doc! { "b": "x", "k": 5_i64 });
        let parent = raw(doc! { "_id": 1, MARKER: { "v": { field: cleared } } });
        assert_eq!(noted_malformed(&parent, &TEST_SPEC), 0);
        assert_eq!(
            noted_malformed(&raw(doc! { "_id": 1, MARKER: 3 }), &TEST_SPEC),
            0
        );
        assert_eq!(noted_malformed(&raw(doc! { "_id": 1 }), &TEST_SPEC), 0);
    }

    #[test]
    fn a_view_entry_holding_only_a_note_is_no_other_definition() {
        let field = TEST_SPEC.field;
        let views = ["own".to_owned()];
        let built = |marker: Document| {
            entries_built_here(
                &[TEST_SPEC],
                &views,
                &raw(doc! { "_id": 1, MARKER: marker }),
            )
        };
        assert!(built(doc! { "v": { field: { "m": 1_i64 } } }));
        let keep = i64::from(TEST_SPEC.keep);
        assert!(built(
            doc! { "v": { field: { "b": "own", "k": keep, "m": 1_i64 } } }
        ));
        assert!(!built(
            doc! { "v": { field: { "b": "other", "m": 1_i64 } } }
        ));
        assert!(!built(
            doc! { "v": { field: { "b": "own", "k": keep + 1 } } }
        ));
        assert!(!built(doc! { "d": "" }));
    }
}
