//! The count and sums of one parent's children, recomputed in one `$group` for a reconcile.

use crate::bson::{doc, Bson, Document};

use super::state::Totals;
use super::Recompute;
use crate::engine::exec::Ctx;
use crate::engine::sums;
use crate::error::Result;
use crate::model::SubsetSpec;

impl Recompute<'_> {
    /// The count and every sum of `parent`'s children, in one `$group`. A summed field that is
    /// not a number adds nothing (the resync reports its child as malformed).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub(super) async fn totals(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Totals> {
        let spec = self.spec();
        let children = self.children::<Document>();
        let grouped = ctx
            .aggregate(children.aggregate(stages(spec, parent)))
            .await
            .map_err(|e| self.mongo_child(e))?;
        Ok(Totals::grouped(spec, grouped.first()))
    }
}

/// The stages that group `parent`'s children (those `spec` admits) into one document of their
/// count (`n`) and sums (`s0`, `s1`, …), which [`Totals::grouped`] reads; none when there are
/// no children.
pub(super) fn stages(spec: &SubsetSpec, parent: &Bson) -> [Document; 2] {
    let mut group = doc! { "_id": Bson::Null, "n": { "$sum": 1 } };
    for (i, sum) in spec.sums.iter().enumerate() {
        // `$sum` adds numbers and passes over anything else: a malformed child's value adds
        // nothing, and the resync reports the child.
        group.insert(format!("s{i}"), doc! { "$sum": format!("${}", sum.child) });
    }
    [
        doc! { "$match": spec.children_of(parent) },
        doc! { "$group": group },
    ]
}

impl Totals {
    /// The totals of `spec`'s view from what [`stages`] grouped: `None` for no children, whose
    /// every sum is 0, not missing.
    pub(super) fn grouped(spec: &SubsetSpec, grouped: Option<&Document>) -> Totals {
        let Some(grouped) = grouped else {
            return Totals {
                count: 0,
                sums: spec
                    .sums
                    .iter()
                    .map(|s| sums::zero(s).into_bson())
                    .collect(),
            };
        };
        let number = |key: &str| grouped.get(key).and_then(sums::Num::of);
        let count = match number("n") {
            Some(sums::Num::Int(n)) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        };
        let sums = spec
            .sums
            .iter()
            .enumerate()
            .map(|(i, s)| {
                number(&format!("s{i}"))
                    .unwrap_or_else(|| sums::zero(s))
                    .into_bson()
            })
            .collect();
        Totals { count, sums }
    }
}
