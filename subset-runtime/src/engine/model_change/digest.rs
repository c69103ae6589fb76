//! The digests of a store's definition of the model: of the whole, and of each view.

use crate::bson::{doc, Bson, Document};
use sha2::{Digest, Sha256};

use super::marker::{with_note, ADOPTING, MARKER};
use crate::model::{ParentSpec, SubsetSpec};

/// One store's definition: its digest, and each view's.
#[derive(Debug)]
pub(crate) struct Definition {
    /// Whether the store knows only some fields of a model defined elsewhere
    /// ([`RawStore::for_fields`]): it reads markers but neither registers, checks nor writes
    /// them.
    pub(super) partial: bool,
    pub(super) digest: String,
    /// Per subset field, in declaration order: its digest without `keep`.
    pub(super) views: Vec<String>,
    pub(super) marker: Document,
}

impl Definition {
    pub(crate) fn of(spec: &ParentSpec, partial: bool) -> Self {
        let views: Vec<String> = spec.subsets.iter().map(view_digest).collect();
        let mut whole: Vec<String> = spec
            .subsets
            .iter()
            .zip(&views)
            .map(|(s, v)| format!("{}={v}/{}", s.field, s.keep))
            .collect();
        whole.sort();
        let digest = short_digest(&whole.join(";"));
        let v: Document = spec
            .subsets
            .iter()
            .zip(&views)
            .map(|(s, v)| {
                let view = doc! { "b": v.as_str(), "k": i64::from(s.keep) };
                (s.field.to_owned(), Bson::Document(view))
            })
            .collect();
        let marker = doc! { "d": digest.as_str(), "v": v };
        Definition {
            partial,
            digest,
            views,
            marker,
        }
    }

    /// The whole definition's digest, as parents built under it hold in `_subset.d`.
    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    /// The marker of a parent built under this definition.
    pub(crate) fn marker(&self) -> &Document {
        &self.marker
    }

    /// The update that marks a stored parent as built under this definition, keeping what
    /// else its marker holds (a lease), and dropping a rebuild's nonce and the views' adoption
    /// marks (see [`ADOPTING`]: every view is built now). `notes` says, per view field, how
    /// many malformed children its head holds (see [`with_note`]): the marking sets
    /// `_subset.v` whole, so the notes a rebuild's recomputes wrote are written again here.
    pub(crate) fn marking(&self, notes: &[(&str, u32)]) -> Document {
        let mut marker = self.marker.clone();
        if let Ok(views) = marker.get_document_mut("v") {
            for (field, noted) in notes {
                if let Some(Bson::Document(view)) = views.get_mut(*field) {
                    *view = with_note(std::mem::take(view), *noted);
                }
            }
        }
        let set: Document = marker
            .iter()
            .map(|(k, v)| (format!("{MARKER}.{k}"), v.clone()))
            .collect();
        let mut unset = doc! { format!("{MARKER}.n"): "" };
        if let Ok(views) = marker.get_document("v") {
            for field in views.keys() {
                unset.insert(format!("{MARKER}.{ADOPTING}{field}"), "");
            }
        }
        doc! { "$set": set, "$unset": unset }
    }
}

/// Everything a view's embedded array, count and sums depend on, except `keep`, as text that
/// changes when any of it does.
pub(super) fn view_digest(spec: &SubsetSpec) -> String {
    let order: Vec<String> = spec
        .order()
        .map(|k| format!("{}:{}", k.field, k.direction.as_i32()))
        .collect();
    let embed = match spec.embed {
        None => "*".to_owned(),
        Some(fields) => {
            let mut names: Vec<&str> = fields.iter().map(|f| f.bson).collect();
            names.sort_unstable();
            names.join(",")
        }
    };
    let filter = spec
        .filter
        .map_or(String::new(), |f| format!("{}={}", f.field, f.equals));
    let mut sums: Vec<String> = spec
        .sums
        .iter()
        .map(|s| format!("{}={}", s.parent, s.child))
        .collect();
    sums.sort();
    let mut text = format!(
        "{}|{}|{}|{}|{}|{}|{}",
        spec.child_collection,
        spec.key,
        order.join(","),
        filter,
        embed,
        spec.count.unwrap_or(""),
        sums.join(",")
    );
    // Added only when set, so that every view registered before the key could be embedded
    // keeps its digest.
    if spec.embed_key {
        text.push_str("|key");
    }
    short_digest(&text)
}

/// 16 hex digits of the SHA-256 of `text`: stable across builds and platforms, which a
/// `Hash` is not promised to be.
fn short_digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC;

    fn parent(subsets: Vec<SubsetSpec>) -> ParentSpec {
        ParentSpec::leak("products", subsets)
    }

    #[test]
    fn every_change_to_a_view_changes_its_digest_and_keep_only_the_whole() {
        let base = Definition::of(&parent(vec![TEST_SPEC]), false);
        let keep = Definition::of(
            &parent(vec![SubsetSpec {
                keep: 10,
                ..TEST_SPEC
            }]),
            false,
        );
        assert_eq!(base.views, keep.views);
        assert_ne!(base.digest, keep.digest);
        let changes = [
            SubsetSpec {
                sort: &TEST_SPEC.sort[..1],
                ..TEST_SPEC
            },
            SubsetSpec {
                count: Some("n"),
                ..TEST_SPEC
            },
            SubsetSpec {
                filter: Some(crate::model::FilterSpec {
                    field: "hidden",
                    equals: false,
                }),
                ..TEST_SPEC
            },
            SubsetSpec {
                embed: Some(&[]),
                ..TEST_SPEC
            },
            SubsetSpec {
                child_collection: "other",
                ..TEST_SPEC
            },
            SubsetSpec {
                embed_key: true,
                ..TEST_SPEC
            },
        ];
        for changed in changes {
            let other = Definition::of(&parent(vec![changed]), false);
            assert_ne!(base.views, other.views, "{changed:?}");
            assert_ne!(base.digest, other.digest);
        }
    }

    #[test]
    fn a_rebuild_marking_keeps_the_notes_of_malformed_heads_and_drops_adoption_marks() {
        let added = SubsetSpec {
            field: "first",
            ..TEST_SPEC
        };
        let def = Definition::of(&parent(vec![TEST_SPEC, added]), false);
        let marking = def.marking(&[(TEST_SPEC.field, 2), ("first", 0)]);
        let v = marking
            .get_document("$set")
            .and_then(|set| set.get_document(format!("{MARKER}.v")))
            .expect("the views set whole");
        let noted = v.get_document(TEST_SPEC.field).expect("the view");
        assert_eq!(noted.get_i64("m").ok(), Some(2));
        assert!(!v.get_document("first").expect("the view").contains_key("m"));
        let unset = marking.get_document("$unset").expect("an unset");
        for field in [TEST_SPEC.field, "first"] {
            assert!(
                unset.contains_key(format!("{MARKER}.{ADOPTING}{field}")),
                "{unset}"
            );
        }
    }

    #[test]
    fn a_new_view_leaves_the_others_digests_alone() {
        let one = Definition::of(&parent(vec![TEST_SPEC]), false);
        let added = SubsetSpec {
            field: "first",
            keep: 3,
            ..TEST_SPEC
        };
        let two = Definition::of(&parent(vec![TEST_SPEC, added]), false);
        assert_eq!(one.views[0], two.views[0]);
        assert_ne!(one.digest, two.digest);
        // The order of declaration does not matter.
        let swapped = Definition::of(&parent(vec![added, TEST_SPEC]), false);
        assert_eq!(two.digest, swapped.digest);
        assert_eq!(
            one.digest,
            Definition::of(&parent(vec![TEST_SPEC]), false).digest
        );
    }
}
