//! Adopting a parent that embeds all its children (the fully-embedded layout) into the subset
//! layout: its children go into the child collection, and its views are built from there.
//!
//! Per parent:
//!
//! 1. elements without an `_id` get one, written into the parent by one update that gives ids
//!    only to elements that still have none, so a rerun reads the same ids back; the parent is
//!    marked as being adopted through this view in the same update (`_subset.a_<field>`, see
//!    [`ADOPTING`]), or, when every element has an `_id`, by an update of its own;
//! 2. every element goes into the child collection with the parent key, unordered; a duplicate
//!    `_id` under the same parent is a copy an interrupted run already made, and is left as is;
//! 3. the view is reconciled: its array becomes the top `keep` of the child collection and
//!    its count and sums are set, and the mark removed, in one conditional update.
//!
//! A parent without the field has nothing to move: step 3 builds the field from the child
//! collection. That is how a second view of children adopted before is added, touching nothing
//! but the new field, its count and its sums.
//!
//! The array is trimmed only in step 3, after every element is in the child collection, so a
//! run killed at any point leaves the parent untouched, or marked with the full array and some
//! children copied, or done. A rerun repeats the steps, which change nothing where they are
//! done. The mark is what tells the second state from drift: a rebuild, reconcile or check
//! refuses such a parent while a child of its array is not stored (see
//! [`crate::Error::NotMigrated`]), rather than drop the children only the array holds.
//!
//! A parent whose array holds `keep` elements or fewer may be one adopted before: it is marked
//! only when a count finds one of them not stored under it, so that adopting a parent again
//! writes nothing. One holding more was not (step 3 trims it), and is marked without asking.
//!
//! None of this runs in a transaction, so not through [`super::exec`]: a rerun finds the
//! children an interrupted run copied as duplicate keys, which abort a transaction, and the
//! steps are safe to cut off between any two writes. Step 3 is the engine's reconcile, which
//! runs as every resync does.

use std::collections::HashMap;
use std::fmt;

use crate::bson::oid::ObjectId;
use crate::bson::{doc, Bson, Document, RawBsonRef, RawDocument, RawDocumentBuf};
use futures::TryStreamExt;

use super::model_change::{adopting, adoption_mark, ADOPTING, MARKER};
use super::RawChildren;
use crate::error::driver::InsertFailure;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// Rereads of a parent whose array changed while ids were given before [`Refusal::Changing`].
const ATTEMPTS: usize = 8;

/// What [`RawChildren::adopt`] did with a parent: done, gone, or left as it is for a reason
/// (a [`Refusal`], the one of the two that may grow).
#[derive(Debug, Clone, PartialEq)]
pub enum Adopted {
    /// Every child the parent embedded is in the child collection, and the view is built from
    /// it (see [`RawChildren::reconcile`]). Adopting the parent again changes nothing: its
    /// embedded children are found there already.
    Done {
        /// Children written to the child collection by this call.
        inserted: u64,
        /// Children found in the child collection under this parent already: copies an
        /// interrupted earlier call made, or the embedded ones of a parent adopted before.
        already: u64,
        /// Elements given an `_id` by this call.
        assigned: u64,
        /// Whether the parent had no such field: the view was built from the child collection
        /// alone.
        built: bool,
    },
    /// No parent has this `_id` (deleted meanwhile, say).
    Gone,
    /// The parent is left as it is: adopting it would lose or change a child. Some of its
    /// children may be in the child collection already (a later adoption finds them there).
    Refused(Refusal),
}

/// Why [`RawChildren::adopt`] left a parent as it is.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// The field or one of its elements is not a child: not an array, an element that is not a
    /// document, an `_id` no child can have, two elements with one `_id`.
    Malformed {
        /// The BSON path at fault: the field, or an element (`reviews.3`), or its `_id`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A child `_id` of the parent is in the child collection under another parent.
    OwnedElsewhere {
        /// The child's `_id`.
        child: Box<Bson>,
        /// The parent it is stored under.
        owner: Box<Bson>,
    },
    /// In a preview subset ([`SubsetSpec::embed`]), an element that holds nothing but the
    /// preview's fields, whose child is not in the child collection: the preview of a child
    /// deleted around the engine after an earlier adoption. Copied, it would become a partial
    /// child; dropped, it would be lost.
    LostPreview {
        /// The element's `_id`.
        child: Box<Bson>,
    },
    /// An element already carries the parent key with another value than the parent's `_id`:
    /// adopting it would overwrite the key, and so move the child to this parent silently.
    KeyMismatch {
        /// The parent's `_id`.
        parent: Box<Bson>,
        /// The element's `_id` (`null` when it has none yet).
        child: Box<Bson>,
        /// The BSON path of the key in the element (`reviews.3.product_id`).
        field: String,
        /// The value the element holds there.
        found: Box<Bson>,
    },
    /// The array changed between every read and the update that gives ids to its elements.
    Changing,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Malformed { field, problem } => write!(f, "`{field}` {problem}"),
            Refusal::OwnedElsewhere { child, owner } => {
                write!(f, "child {child} is already stored under parent {owner}")
            }
            Refusal::LostPreview { child } => write!(
                f,
                "element {child} holds only the preview fields and its child is not stored"
            ),
            Refusal::KeyMismatch {
                parent,
                child,
                field,
                found,
            } => write!(
                f,
                "child {child} of parent {parent} holds `{field}` = {found}, another parent's key: adopting it would overwrite the key"
            ),
            Refusal::Changing => f.write_str("the array kept changing while ids were given"),
        }
    }
}

impl RawChildren<'_> {
    /// Moves the children that `parent` embeds (the fully-embedded layout, where its field holds
    /// every child) into the child collection, and builds the view from there: the array
    /// becomes the top `keep` and the count and sums are set. Elements without an `_id` get an
    /// ObjectId first. A parent without the field gets the view from the child collection.
    ///
    /// Resumable and idempotent: cut off anywhere and run again, it ends as one uninterrupted
    /// call would, and a parent adopted before is left as it is (see [`Adopted::Done`]). It
    /// runs without a transaction and takes no session (a rerun meets the children it copied
    /// as duplicate keys, which would abort one). Other views of the same children are built
    /// by adopting the parent through each of them. Create the child collection's index first
    /// ([`RawChildren::ensure_index`]), and stop the programs that write the array directly
    /// (or have them write through the engine): an element such a program adds after the copy
    /// is not in the child collection, and the last step drops it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a parent `_id` no document can have; as
    /// [`RawChildren::reconcile`] for the last step; [`Error::Mongo`]. A parent that cannot be
    /// adopted as it is is not an error: it is [`Adopted::Refused`].
    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field, parent = %parent))]
    pub async fn adopt(&self, parent: &Bson) -> Result<Adopted> {
        self.store().check_parent_id(parent)?;
        let adoption = Adoption {
            subset: self,
            parent,
        };
        let mut assigned = 0;
        for _ in 0..ATTEMPTS {
            let Some(raw) = adoption.read().await? else {
                return Ok(Adopted::Gone);
            };
            let found = match Found::of(&raw, self.spec()) {
                Ok(found) => found,
                Err(refusal) => return Ok(Adopted::Refused(refusal)),
            };
            if found.without_id > 0 {
                assigned += adoption.assign_ids(&found).await?;
                // Read again: the ids as stored, whether ours or a concurrent run's.
                continue;
            }
            let marked = adopting(&raw, self.spec());
            let copied = if !marked && adoption.all_stored(&found.elements).await? {
                // Adopted before: nothing to copy, and nothing to mark.
                Copied::Done {
                    inserted: 0,
                    already: found.elements.len() as u64,
                }
            } else if let Some(child) = adoption.lost_preview(&found.elements).await? {
                // Before the mark, which would keep a rebuild from dropping the preview.
                return Ok(Adopted::Refused(Refusal::LostPreview {
                    child: Box::new(child),
                }));
            } else {
                if !marked && !adoption.mark().await? {
                    return Ok(Adopted::Gone);
                }
                adoption.copy(found.elements).await?
            };
            let (inserted, already) = match copied {
                Copied::Done { inserted, already } => (inserted, already),
                Copied::Refused(refusal) => {
                    // Every other child is stored: nothing is left that only the array holds.
                    adoption.unmark().await?;
                    return Ok(Adopted::Refused(refusal));
                }
            };
            self.reconcile(parent).await?;
            return Ok(Adopted::Done {
                inserted,
                already,
                assigned,
                built: found.absent,
            });
        }
        Ok(Adopted::Refused(Refusal::Changing))
    }
}

/// The field of a parent as read, made of children.
#[derive(Debug)]
struct Found {
    elements: Vec<Document>,
    /// Elements without an `_id`.
    without_id: u64,
    /// The parent has no such field.
    absent: bool,
}

impl Found {
    /// `spec.field` of `parent`, or why it cannot be adopted: all that would lose or change a
    /// child (an element dropped, or taken for a copy of another). Sort values are not checked:
    /// a child that no view may embed is left out of it and reported by a check, as one
    /// written around the engine is.
    fn of(parent: &RawDocument, spec: &SubsetSpec) -> std::result::Result<Found, Refusal> {
        let field = spec.field;
        let malformed = |field: String, problem: String| Refusal::Malformed { field, problem };
        let value = parent
            .get(field)
            .map_err(|e| malformed(field.to_owned(), format!("cannot be read: {e}")))?;
        let mut found = Found {
            elements: Vec::new(),
            without_id: 0,
            absent: value.is_none(),
        };
        let Some(value) = value else {
            return Ok(found);
        };
        let RawBsonRef::Array(array) = value else {
            return Err(malformed(
                field.to_owned(),
                format!(
                    "is {}, not an array",
                    crate::values::type_name(value.element_type())
                ),
            ));
        };
        // Each `_id` as text, which conflates 1, 1.0 and 1L as the `_id` index does.
        let mut seen: HashMap<String, usize> = HashMap::new();
        let parent_id = crate::decode::id_of(parent);
        for (i, element) in array.into_iter().enumerate() {
            let path = format!("{field}.{i}");
            let unreadable =
                |e: &dyn fmt::Display| malformed(path.clone(), format!("cannot be read: {e}"));
            let element = element.map_err(|e| unreadable(&e))?;
            let RawBsonRef::Document(child) = element else {
                return Err(malformed(
                    path,
                    format!(
                        "is {}, not a document",
                        crate::values::type_name(element.element_type())
                    ),
                ));
            };
            let child = Document::try_from(child).map_err(|e| unreadable(&e))?;
            match child.get("_id") {
                None => found.without_id += 1,
                Some(id) => {
                    if let Err(Error::InvalidId { reason, .. }) =
                        crate::encode::check_id(id, "child", spec.child_collection)
                    {
                        return Err(malformed(
                            format!("{path}._id"),
                            format!("is not a usable `_id`: {reason}"),
                        ));
                    }
                    if let Some(first) = seen.insert(id.to_string(), i) {
                        return Err(malformed(
                            format!("{path}._id"),
                            format!("repeats `{field}.{first}._id` ({id}): each child needs its own `_id`"),
                        ));
                    }
                }
            }
            // A key naming another parent is the caller's data saying the child is not this
            // parent's: refused rather than overwritten by the copy.
            match child.get(spec.key) {
                None | Some(Bson::Null) => {}
                Some(key) if crate::engine::parent_key::same_key(key, &parent_id) => {}
                Some(key) => {
                    return Err(Refusal::KeyMismatch {
                        parent: Box::new(parent_id),
                        child: Box::new(child.get("_id").cloned().unwrap_or(Bson::Null)),
                        field: format!("{path}.{}", spec.key),
                        found: Box::new(key.clone()),
                    });
                }
            }
            found.elements.push(child);
        }
        Ok(found)
    }
}

/// What step 2 did.
enum Copied {
    Done { inserted: u64, already: u64 },
    Refused(Refusal),
}

/// One call of [`RawChildren::adopt`].
struct Adoption<'s, 'a> {
    subset: &'s RawChildren<'a>,
    parent: &'s Bson,
}

impl Adoption<'_, '_> {
    /// The parent's field and its adoption mark, as stored.
    async fn read(&self) -> Result<Option<RawDocumentBuf>> {
        let store = self.subset.store();
        let spec = self.subset.spec();
        store
            .parents::<RawDocumentBuf>()
            .find_one(doc! { "_id": self.parent.clone() })
            .projection(doc! { spec.field: 1, adoption_mark(spec): 1 })
            .await
            .map_err(|e| store.mongo(e))
    }

    /// Whether every one of `elements` (each with an `_id`) is in the child collection under
    /// this parent, asked only of an array of `keep` elements or fewer (see the module
    /// documentation): one count, on the `_id` index.
    async fn all_stored(&self, elements: &[Document]) -> Result<bool> {
        let s = self.subset;
        let spec = s.spec();
        if elements.is_empty() || elements.len() > spec.keep as usize {
            return Ok(elements.is_empty());
        }
        let ids: Vec<Bson> = elements
            .iter()
            .filter_map(|e| e.get("_id").cloned())
            .collect();
        let stored = s
            .children::<Document>()
            .count_documents(doc! { "_id": { "$in": ids }, spec.key: self.parent.clone() })
            .await
            .map_err(|e| s.mongo_child(e))?;
        Ok(stored == elements.len() as u64)
    }

    /// Marks the parent as being adopted through this view (see [`ADOPTING`]), before its first
    /// child is copied: when it began, on the server's clock. `false` when there is no such
    /// parent any more. The registry is made first, so that the mark cannot make a first
    /// registration take the parents without a marker for outdated ones.
    async fn mark(&self) -> Result<bool> {
        let store = self.subset.store();
        store.model().registry().await?;
        let mark = doc! { "$currentDate": { adoption_mark(self.subset.spec()): true } };
        let marked = store
            .parents::<Document>()
            .update_one(doc! { "_id": self.parent.clone() }, mark)
            .await
            .map_err(|e| store.mongo(e))?;
        Ok(marked.matched_count > 0)
    }

    /// Takes the mark of [`Adoption::mark`] away, and the marker with it when it held
    /// nothing else, as the parent was before: when the copy found a child of the array stored
    /// under another parent, and the array stays whole.
    async fn unmark(&self) -> Result<()> {
        let store = self.subset.store();
        let marker = format!("${MARKER}");
        let emptied = doc! { "$eq": [marker.as_str(), { "$literal": {} }] };
        let unmark = vec![
            doc! { "$unset": adoption_mark(self.subset.spec()) },
            doc! { "$set": { MARKER: { "$cond": [emptied, "$$REMOVE", marker.as_str()] } } },
        ];
        store
            .parents::<Document>()
            .update_one(doc! { "_id": self.parent.clone() }, unmark)
            .await
            .map_err(|e| store.mongo(e))?;
        Ok(())
    }

    /// Step 1: gives an ObjectId to each element of `found` without an `_id`, in one pipeline
    /// update that is linear in the array (positional `$set`s are quadratic: each `field.i`
    /// walks the array). Fresh ids are zipped with the elements and given only to documents
    /// that still have no `_id`, so a concurrent change (or a second run) can never give an
    /// element a second id; the filter on the length keeps every element paired. The same
    /// update marks the parent as being adopted (see [`Adoption::mark`]). Returns how many
    /// elements it gave an id.
    async fn assign_ids(&self, found: &Found) -> Result<u64> {
        let store = self.subset.store();
        let field = self.subset.spec().field;
        let fresh: Vec<Bson> = found
            .elements
            .iter()
            .map(|_| Bson::ObjectId(ObjectId::new()))
            .collect();
        let filter =
            doc! { "_id": self.parent.clone(), field: { "$size": found.elements.len() as i64 } };
        let with_ids = doc! {
            "$map": {
                "input": { "$zip": { "inputs": [format!("${field}"), fresh] } },
                "as": "pair",
                "in": {
                    "$let": {
                        "vars": {
                            "e": { "$arrayElemAt": ["$$pair", 0] },
                            "id": { "$arrayElemAt": ["$$pair", 1] },
                        },
                        "in": {
                            "$cond": [
                                { "$and": [
                                    { "$eq": [{ "$type": "$$e" }, "object"] },
                                    { "$eq": [{ "$type": "$$e._id" }, "missing"] },
                                ] },
                                { "$mergeObjects": [{ "_id": "$$id" }, "$$e"] },
                                "$$e",
                            ]
                        },
                    }
                },
            }
        };
        // The adoption mark goes with the ids (see `mark`), one there already kept.
        store.model().registry().await?;
        let key = format!("{ADOPTING}{field}");
        let marker = format!("${MARKER}");
        let marked = doc! { "$mergeObjects": [{ key: "$$NOW" }, marker] };
        let update = vec![doc! { "$set": { field: with_ids, MARKER: marked } }];
        let updated = store
            .parents::<Document>()
            .update_one(filter, update)
            .await
            .map_err(|e| store.mongo(e))?;
        if updated.modified_count == 0 {
            tracing::debug!("the array changed before ids were given; reading again");
        }
        Ok(found.without_id * updated.modified_count)
    }

    /// Step 2: inserts the elements into the child collection with the parent key, unordered.
    /// A duplicate `_id` under this parent is a copy an earlier run made and is counted as
    /// already there; under another parent it is a conflict. A lost preview (see
    /// [`Refusal::LostPreview`]) is looked for before, by [`Adoption::lost_preview`].
    async fn copy(&self, elements: Vec<Document>) -> Result<Copied> {
        let s = self.subset;
        let spec = s.spec();
        if elements.is_empty() {
            return Ok(Copied::Done {
                inserted: 0,
                already: 0,
            });
        }
        let total = elements.len() as u64;
        let stored: Vec<Document> = elements
            .into_iter()
            .map(|mut e| {
                e.insert(spec.key, self.parent.clone());
                e
            })
            .collect();
        let children = s.children::<Document>();
        // Duplicates alone are copies an earlier run made; anything else stops the adoption.
        let failed = match children.insert_many(&stored).ordered(false).await {
            Ok(_) => {
                return Ok(Copied::Done {
                    inserted: total,
                    already: 0,
                })
            }
            Err(e) => match InsertFailure::of(&e) {
                Some(failure) if failure.only_duplicates() => failure.duplicates,
                _ => return Err(s.mongo_child(e)),
            },
        };
        let duplicates: Vec<Bson> = failed
            .iter()
            .filter_map(|i| stored.get(*i).and_then(|d| d.get("_id")).cloned())
            .collect();
        let elsewhere = children
            .find_one(
                doc! { "_id": { "$in": duplicates }, spec.key: { "$ne": self.parent.clone() } },
            )
            .projection(doc! { "_id": 1, spec.key: 1 })
            .await
            .map_err(|e| s.mongo_child(e))?;
        if let Some(found) = elsewhere {
            return Ok(Copied::Refused(Refusal::OwnedElsewhere {
                child: Box::new(found.get("_id").cloned().unwrap_or(Bson::Null)),
                owner: Box::new(found.get(spec.key).cloned().unwrap_or(Bson::Null)),
            }));
        }
        let already = failed.len() as u64;
        Ok(Copied::Done {
            inserted: total - already,
            already,
        })
    }

    /// In a preview subset, the first element that holds nothing but preview fields and whose
    /// child is not in the child collection (see [`Refusal::LostPreview`]).
    async fn lost_preview(&self, elements: &[Document]) -> Result<Option<Bson>> {
        let s = self.subset;
        let Some(embed) = s.spec().embed else {
            return Ok(None);
        };
        let is_preview = |e: &&Document| {
            e.keys()
                .all(|k| k == "_id" || embed.iter().any(|f| f.bson == k))
        };
        let ids: Vec<Bson> = elements
            .iter()
            .filter(is_preview)
            .filter_map(|e| e.get("_id").cloned())
            .collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let found: Vec<Document> = s
            .children::<Document>()
            .find(doc! { "_id": { "$in": &ids } })
            .projection(doc! { "_id": 1 })
            .await
            .map_err(|e| s.mongo_child(e))?
            .try_collect()
            .await
            .map_err(|e| s.mongo_child(e))?;
        let found: Vec<&Bson> = found.iter().filter_map(|d| d.get("_id")).collect();
        Ok(ids.into_iter().find(|id| !found.contains(&id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC as SPEC;

    fn found(parent: Document) -> std::result::Result<Found, Refusal> {
        let raw = RawDocumentBuf::try_from(&parent).unwrap();
        Found::of(&raw, &SPEC)
    }

    fn problem(parent: Document) -> String {
        found(parent).unwrap_err().to_string()
    }

    #[test]
    fn children_are_read_and_counted() {
        let id = ObjectId::new();
        let f = found(doc! { "recent": [{ "_id": id, "rating": 1 }, { "rating": 2 }] }).unwrap();
        assert_eq!((f.elements.len(), f.without_id, f.absent), (2, 1, false));
        let f = found(doc! {}).unwrap();
        assert!(f.absent && f.elements.is_empty());
        // Sort values are the views' business, not adoption's.
        assert!(found(doc! { "recent": [{ "_id": 1, "x": 1 }, { "_id": 2 }] }).is_ok());
    }

    #[test]
    fn what_would_lose_a_child_is_refused_naming_the_path() {
        assert_eq!(
            problem(doc! { "recent": "many" }),
            "`recent` is a string, not an array"
        );
        assert_eq!(
            problem(doc! { "recent": [{ "_id": 1 }, 7] }),
            "`recent.1` is an int32, not a document"
        );
        assert_eq!(
            problem(doc! { "recent": [{ "_id": 1 }, { "_id": 2 }, { "_id": 1_i64 }] }),
            "`recent.2._id` repeats `recent.0._id` (1): each child needs its own `_id`"
        );
        assert_eq!(
            problem(doc! { "recent": [{ "_id": [1, 2] }] }),
            "`recent.0._id` is not a usable `_id`: an `_id` cannot be an array"
        );
    }

    #[test]
    fn a_key_naming_another_parent_is_refused_and_an_equal_one_kept() {
        let key = SPEC.key;
        let refused =
            found(doc! { "_id": 7_i64, "recent": [{ "_id": 1, key: 7 }, { "_id": 2, key: 8 }] });
        assert_eq!(
            refused.unwrap_err(),
            Refusal::KeyMismatch {
                parent: Box::new(Bson::Int64(7)),
                child: Box::new(Bson::Int32(2)),
                field: format!("recent.1.{key}"),
                found: Box::new(Bson::Int32(8)),
            }
        );
        let message = problem(doc! { "_id": 7, "recent": [{ "_id": 2, key: 8 }] });
        assert!(
            message.contains("child 2 of parent 7") && message.contains(key),
            "{message}"
        );
        let kept = found(
            doc! { "_id": 7, "recent": [{ "_id": 1, key: 7_i64 }, { "_id": 2, key: Bson::Null }] },
        );
        assert_eq!(kept.unwrap().elements.len(), 2);
    }
}
