//! The parent half of a push: one update that keeps the subset sorted and capped.
//!
//! The general form is `$push` with `$each`, `$sort` and `$slice: keep`, which makes the server
//! sort the whole array on every push: at `keep = 1000` that sort is most of the push's cost. Yet
//! almost every push of a "latest N" subset lands at the head. So for a long subset (`keep` of at
//! least [`HEAD_PUSH_MIN_KEEP`]) a push first tries `$position: 0` with `$slice` and no `$sort`,
//! guarded by a filter that the stored head sorts after every pushed child under the full order
//! (sort keys, then `_id`); the array is then sorted without sorting it. When the guard fails (an
//! older child arriving late) the same update is sent again with `$sort`: one round trip more,
//! only then. A short subset always sends the `$sort` update alone, one update as hand-written
//! code sends it: sorting a few elements costs less than matching the guard.

use crate::bson::{doc, Bson, Document};

use super::exec::Ctx;
use super::push::Prepared;
use super::RawSubset;
use crate::error::Result;
use crate::order;

/// The shortest `keep` whose pushes try the head first. The guard is a fixed cost per update
/// (the server plans and matches an `$or` over the stored head) that only a longer sort saves
/// back. Head push ÷ `$sort` push once the array is full, mongod
/// 6.0.5: 0.90–1.18 at keep 5, 1.17–1.37 at 10, 1.04–1.06 at 20, 0.79–0.99 at 32, 0.80 at 100,
/// 0.33 at 1000.
const HEAD_PUSH_MIN_KEEP: u32 = 32;

impl RawSubset<'_> {
    /// Pushes `children` into the subset of the parent `filter` matches, applying `inc` (to the
    /// count and the sums, see [`RawSubset::added_inc`]) in the same update, at the head when the subset is long and the children go there; `false` when
    /// `filter` matches nothing.
    pub(super) async fn capped_push(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        filter: Document,
        children: &[&Prepared],
        inc: &Document,
    ) -> Result<bool> {
        let parents = self.store().parents::<Document>();
        let head = if self.spec().keep >= HEAD_PUSH_MIN_KEEP {
            self.head_push(children)
        } else {
            None
        };
        let attempts = match head {
            Some((each, guard)) => {
                let mut guarded = filter.clone();
                guarded.insert("$or", guard);
                vec![(guarded, self.push_update(each, inc, true))]
            }
            None => Vec::new(),
        };
        let each = children
            .iter()
            .map(|p| Bson::Document(p.embedded.clone()))
            .collect();
        let sorted = (filter, self.push_update(each, inc, false));
        for (filter, update) in attempts.into_iter().chain([sorted]) {
            match ctx.run(parents.update_one(filter, update)).await {
                Ok(updated) if updated.matched_count == 1 => return Ok(true),
                Ok(_) => {}
                Err(e) => {
                    let adding = super::bson_len(children.iter().map(|p| &p.embedded));
                    return Err(self.parent_write_error(e, parent, adding).await);
                }
            }
        }
        Ok(false)
    }

    /// For a push at the head: the children in the subset's order, and the `$or` that holds
    /// when the stored subset is empty or its head sorts after the last of them. `None` when
    /// their order cannot be told here (values the server must compare).
    fn head_push(&self, children: &[&Prepared]) -> Option<(Vec<Bson>, Vec<Bson>)> {
        let spec = self.spec();
        let mut placed = Vec::with_capacity(children.len());
        for child in children {
            let raw = crate::bson::RawDocumentBuf::try_from(&child.embedded).ok()?;
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
            .map(|(_, p)| Bson::Document(p.embedded.clone()))
            .collect();
        Some((each, guard))
    }

    /// The update that keeps the subset: `$push` with `$each` and `$slice: keep`, with `$sort`
    /// or, for children already in order ahead of the head, `$position: 0`; and `$inc` of the
    /// count and the sums by `inc`.
    fn push_update(&self, each: Vec<Bson>, inc: &Document, at_head: bool) -> Document {
        let spec = self.spec();
        let mut push = doc! { "$each": each };
        if at_head {
            push.insert("$position", 0);
        } else {
            push.insert("$sort", order::sort_doc(spec));
        }
        push.insert("$slice", i64::from(spec.keep));
        let mut update = doc! { "$push": { spec.field: push } };
        if !inc.is_empty() {
            update.insert("$inc", inc.clone());
        }
        update
    }

    /// The `$inc` that counts `children` as added: the count by their number, each sum by
    /// their values (from the whole child: a preview need not hold a summed field).
    pub(super) fn added_inc(&self, children: &[&Prepared]) -> Document {
        let added: Vec<&Document> = children.iter().map(|p| &p.stored).collect();
        super::sums::inc(self.spec(), &added, &[])
    }

    /// The parent filter of a push: the parent, unless one of `ids` is already embedded (a
    /// reconcile that read the child collection between our insert and this update has put it
    /// there and counted it; pushing it again would embed and count it twice).
    pub(super) fn push_filter(&self, parent: &Bson, ids: Vec<Bson>) -> Document {
        doc! {
            "_id": parent.clone(),
            format!("{}._id", self.spec().field): { "$nin": ids },
        }
    }
}
