//! The parent half of a push: one update that keeps every view of the children sorted and
//! capped, one `$push` per view field and one `$inc` for every count and sum.
//!
//! The general form is `$push` with `$each`, `$sort` and `$slice: keep`, which makes the server
//! sort the whole array on every push: at `keep = 1000` that sort is most of the push's cost. Yet
//! almost every push of a "latest N" subset lands at the head. So for a long subset (`keep` of at
//! least [`HEAD_PUSH_MIN_KEEP`]) a push first tries `$position: 0` with `$slice` and no `$sort`,
//! guarded by a filter that the stored head sorts after every pushed child under the full order
//! (sort keys, then `_id`); the array is then sorted without sorting it. When the guard fails (an
//! older child arriving late) the same update is sent again with `$sort`: one round trip more,
//! only then. A short subset always sends the `$sort` update alone, one update as hand-written
//! code sends it: sorting a few elements costs less than matching the guard. So does a push into
//! several views, whose heads would each need a guard.

use crate::bson::{doc, Bson, Document};

use super::Prepared;
use super::Pushes;
use crate::engine::exec::Ctx;
use crate::engine::parent_write::{ParentUpdate, Written};
use crate::engine::query;
use crate::error::Result;
use crate::model::SubsetSpec;
use crate::order;

/// The shortest `keep` whose pushes try the head first. The guard is a fixed cost per update
/// (the server plans and matches an `$or` over the stored head) that only a longer sort saves
/// back. Head push ÷ `$sort` push once the array is full, mongod
/// 6.0.5: 0.90–1.18 at keep 5, 1.17–1.37 at 10, 1.04–1.06 at 20, 0.79–0.99 at 32, 0.80 at 100,
/// 0.33 at 1000.
const HEAD_PUSH_MIN_KEEP: u32 = 32;

/// What a push puts into each view of the children ([`RawChildren::views`], in that order): the
/// `_id` and embedded form of each child the view admits.
pub(super) struct ViewPush<'p> {
    each: Vec<Vec<(&'p Bson, &'p Document)>>,
}

impl<'p> ViewPush<'p> {
    /// Every child into every view that admits it (the views its [`Prepared::embedded`] forms
    /// are for).
    pub(super) fn new(children: &[&'p Prepared]) -> Self {
        let views = children.first().map_or(0, |p| p.embedded.len());
        let each = (0..views)
            .map(|i| {
                children
                    .iter()
                    .filter_map(|p| Some((&p.id, p.embedded.get(i)?.as_ref()?)))
                    .collect()
            })
            .collect();
        ViewPush { each }
    }

    /// Leaves out of view `view` the children already embedded there.
    pub(super) fn drop_embedded(&mut self, view: usize, embedded: &[Bson]) {
        if let Some(each) = self.each.get_mut(view) {
            each.retain(|(id, _)| !embedded.contains(id));
        }
    }

    /// Whether no view has anything left to push.
    pub(super) fn is_empty(&self) -> bool {
        self.each.iter().all(Vec::is_empty)
    }

    fn bytes(&self) -> i64 {
        crate::engine::bson_len(self.each.iter().flatten().map(|(_, d)| *d))
    }
}

/// How [`RawChildren::capped_push`] writes.
#[derive(Debug, Clone, Copy)]
pub(super) struct PushAs {
    /// Whether a view whose field already holds one of the children is left alone (see
    /// [`RawChildren::push_filter`]): a restore, or a push after a write cut off.
    pub(super) skip_embedded: bool,
    /// Whether this is the operation's last write of the parent (see [`ParentUpdate::last`]).
    pub(super) last: bool,
}

impl Pushes<'_> {
    /// Pushes each view's children (`push`) into the parent, applying `inc` (to the counts and
    /// the sums, see [`RawChildren::added_inc`]) in the same update, `how` says; at the head
    /// when there is one long view and the children go there. Written through
    /// [`RawStore::write_parent`](crate::engine::RawStore), which says what happened.
    pub(super) async fn capped_push(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        push: &ViewPush<'_>,
        inc: &Document,
        how: PushAs,
    ) -> Result<Written> {
        let write = self.capped_write(push, inc, how);
        match self.store().write_parent(ctx, parent, write).await {
            Ok(written) => Ok(written),
            Err(e) => Err(query::parent_write_error(self, e, parent, push.bytes()).await),
        }
    }

    /// The parent update of [`Self::capped_push`], sent by the caller.
    pub(super) fn capped_write(
        &self,
        push: &ViewPush<'_>,
        inc: &Document,
        how: PushAs,
    ) -> ParentUpdate {
        let PushAs {
            skip_embedded: exclude,
            last,
        } = how;
        let mut filter = Document::new();
        let mut sorted = Document::new();
        for (view, each) in self.views().zip(&push.each) {
            if each.is_empty() {
                continue;
            }
            if exclude {
                let ids: Vec<Bson> = each.iter().map(|(id, _)| (*id).clone()).collect();
                filter.extend(view.pushes().push_filter(ids));
            }
            let docs = each
                .iter()
                .map(|(_, d)| Bson::Document((*d).clone()))
                .collect();
            sorted.insert(view.spec().field, push_spec(view.spec(), docs, false));
        }
        // The only view is this field.
        let head = match (self.view_specs(), push.each.as_slice()) {
            ([only], [each]) if only.keep >= HEAD_PUSH_MIN_KEEP && !each.is_empty() => {
                self.head_push(each)
            }
            _ => None,
        };
        let sorted = ParentUpdate {
            filter: filter.clone(),
            last,
            ..ParentUpdate::of(update(sorted, inc))
        };
        // Nothing for any view (a child no filter admits) sends the touch alone.
        match head {
            Some((each, guard)) => {
                let mut guarded = filter;
                guarded.insert("$or", guard);
                let mut push = Document::new();
                push.insert(self.spec().field, push_spec(self.spec(), each, true));
                ParentUpdate {
                    filter: guarded,
                    last,
                    otherwise: Some(Box::new(sorted)),
                    ..ParentUpdate::of(update(push, inc))
                }
            }
            None => sorted,
        }
    }

    /// For a push at the head: the children in the subset's order, and the `$or` that holds
    /// when the stored subset is empty or its head sorts after the last of them. `None` when
    /// their order cannot be told here (values the server must compare).
    fn head_push(&self, children: &[(&Bson, &Document)]) -> Option<(Vec<Bson>, Vec<Bson>)> {
        let spec = self.spec();
        let mut placed = Vec::with_capacity(children.len());
        for (_, child) in children {
            let raw = crate::bson::RawDocumentBuf::try_from(*child).ok()?;
            placed.push((order::position(spec, &raw), *child));
        }
        let mut incomparable = false;
        placed.sort_by(|(a, _), (b, _)| {
            order::compare(spec, a, b).unwrap_or_else(|| {
                incomparable = true;
                std::cmp::Ordering::Equal
            })
        });
        if incomparable {
            return None;
        }
        let (last, _) = placed.last()?;
        let head = format!("{}.0.", spec.field);
        let mut guard = vec![Bson::Document(
            doc! { format!("{}.0", spec.field): { "$exists": false } },
        )];
        guard.extend(order::after_branches(spec, &head, last));
        let each = placed
            .into_iter()
            .map(|(_, d)| Bson::Document(d.clone()))
            .collect();
        Some((each, guard))
    }

    /// The `$inc` that counts `children` as added in every view: each view's count by the number
    /// it admits, each sum by their values (from the whole child: a preview need not hold a
    /// summed field).
    pub(super) fn added_inc(&self, children: &[&Prepared]) -> Document {
        let added: Vec<&Document> = children.iter().map(|p| &p.stored).collect();
        let mut inc = Document::new();
        for spec in self.view_specs() {
            inc.extend(crate::engine::sums::inc(spec, &added, &[]));
        }
        inc
    }

    /// The condition a push into this view adds to its parent filter: that none of `ids` is
    /// embedded already (a reconcile that read the child collection between our insert and this
    /// update has put it there and counted it; pushing it again would embed and count it twice).
    fn push_filter(&self, ids: Vec<Bson>) -> Document {
        doc! { format!("{}._id", self.spec().field): { "$nin": ids } }
    }
}

/// One view's `$push` modifier: `$each` with `$slice: keep`, and `$sort` or, for children
/// already in order ahead of the head, `$position: 0`.
fn push_spec(spec: &SubsetSpec, each: Vec<Bson>, at_head: bool) -> Document {
    let mut push = doc! { "$each": each };
    if at_head {
        push.insert("$position", 0);
    } else {
        push.insert("$sort", order::sort_doc(spec));
    }
    push.insert("$slice", i64::from(spec.keep));
    push
}

/// The update of `push` (one `$push` per view field) and `inc`, leaving out what is empty.
fn update(push: Document, inc: &Document) -> Document {
    let mut update = Document::new();
    if !push.is_empty() {
        update.insert("$push", push);
    }
    if !inc.is_empty() {
        update.insert("$inc", inc.clone());
    }
    update
}
