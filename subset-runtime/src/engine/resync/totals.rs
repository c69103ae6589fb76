//! The count and sums of one parent's children, recomputed in one `$group` for a reconcile.

use crate::bson::{doc, Bson, Document};

use super::state::Totals;
use crate::engine::exec::Ctx;
use crate::engine::{sums, RawSubset};
use crate::error::Result;

impl RawSubset<'_> {
    /// The count and every sum of `parent`'s children, in one `$group`.
    ///
    /// # Errors
    ///
    /// [`Error::MalformedChild`] when a child's summed field is not an int32, int64 or double
    /// (`$sum` would skip it silently), [`Error::Mongo`].
    pub(super) async fn totals(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Totals> {
        let spec = self.spec();
        let children = self.children::<Document>();
        let numeric = ["int", "long", "double"];
        let mut group = doc! { "_id": Bson::Null, "n": { "$sum": 1 } };
        for (i, sum) in spec.sums.iter().enumerate() {
            let path = format!("${}", sum.child);
            group.insert(format!("s{i}"), doc! { "$sum": &path });
            let is_number = doc! { "$in": [{ "$type": &path }, numeric.as_slice()] };
            group.insert(
                format!("b{i}"),
                doc! { "$sum": { "$cond": [is_number, 0, 1] } },
            );
        }
        let pipeline = [
            doc! { "$match": spec.children_of(parent) },
            doc! { "$group": group },
        ];
        let grouped = ctx
            .aggregate(children.aggregate(pipeline))
            .await
            .map_err(|e| self.mongo_child(e))?;
        let Some(grouped) = grouped.into_iter().next() else {
            // No children: every sum is 0, not missing.
            return Ok(Totals {
                count: 0,
                sums: spec.sums.iter().map(|_| Bson::Int64(0)).collect(),
            });
        };
        let number = |key: &str| grouped.get(key).and_then(sums::Num::of);
        if (0..spec.sums.len())
            .any(|i| number(&format!("b{i}")).is_some_and(|b| !b.same(sums::Num::Int(0))))
        {
            let not_numbers: Vec<Bson> = spec
                .sums
                .iter()
                .map(|s| {
                    Bson::Document(doc! { s.child: { "$not": { "$type": numeric.as_slice() } } })
                })
                .collect();
            let mut bad = spec.children_of(parent);
            bad.insert("$or", not_numbers);
            let find = children.find_one(bad);
            let bad = ctx.run(find).await.map_err(|e| self.mongo_child(e))?;
            if let Some(bad) = bad {
                sums::check_child(spec, &bad)?;
            }
        }
        let count = match number("n") {
            Some(sums::Num::Int(n)) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        };
        let sums = (0..spec.sums.len())
            .map(|i| number(&format!("s{i}")).map_or(Bson::Int64(0), sums::Num::into_bson))
            .collect();
        Ok(Totals { count, sums })
    }
}
