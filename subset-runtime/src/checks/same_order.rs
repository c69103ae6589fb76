//! Whether two views of the same children always sort them in one order: the derive fails the
//! build when two views with the same `keep` and filter would then always hold the same children.

use super::lookup::str_eq;
use crate::model::{Direction, SortKey, SubsetSpec};

/// Whether `specs[earlier]` and `specs[later]` sort their children in one order once both are
/// made total as [`SubsetSpec::order`] makes them (the `_id` tie-breaker appended in the
/// direction of the last key, and nothing after an `_id` counting, since no two children share
/// one). The derive fails the build when they do for views of the same children with the same
/// `keep` and filter, which would then always hold the same children.
#[doc(hidden)]
pub const fn same_order(specs: &'static [SubsetSpec], earlier: usize, later: usize) -> bool {
    let (a, b) = (specs[earlier].sort, specs[later].sort);
    let (len_a, len_b) = (total_len(a), total_len(b));
    if len_a != len_b {
        return false;
    }
    let mut i = 0;
    while i < len_a {
        let ((field_a, dir_a), (field_b, dir_b)) = (total_key(a, i), total_key(b, i));
        if !str_eq(field_a, field_b) || dir_a.as_i32() != dir_b.as_i32() {
            return false;
        }
        i += 1;
    }
    true
}

/// `specs`; in a generic parent, where no constant item can name the parent, the derive's
/// check of [`same_order`] in `SUBSETS` itself: fails the build with `message` when they sort
/// in one order (evaluated where a build uses `SUBSETS` for a concrete type). The failure is
/// located at the caller, the derive's call spanned at the attribute: `#[track_caller]` here and
/// in `Option::expect` (where `panic!` would locate it in core's source).
#[doc(hidden)]
#[track_caller]
pub const fn distinct_orders(
    specs: &'static [SubsetSpec],
    earlier: usize,
    later: usize,
    message: &'static str,
) -> &'static [SubsetSpec] {
    if same_order(specs, earlier, later) {
        #[allow(clippy::unnecessary_literal_unwrap)]
        None::<()>.expect(message);
    }
    specs
}

/// The length of the total order of `sort`: up to its first `_id`, or one more for the `_id`
/// appended.
const fn total_len(sort: &[SortKey]) -> usize {
    let mut i = 0;
    while i < sort.len() {
        if str_eq(sort[i].field, "_id") {
            return i + 1;
        }
        i += 1;
    }
    sort.len() + 1
}

/// The `i`th key of the total order of `sort` (`i < total_len(sort)`).
const fn total_key(sort: &[SortKey], i: usize) -> (&'static str, Direction) {
    if i < sort.len() {
        return (sort[i].field, sort[i].direction);
    }
    let last = match sort.last() {
        Some(key) => key.direction,
        None => Direction::Asc,
    };
    ("_id", last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC;
    use crate::values::SortValues;

    fn with_sort(sort: &'static [SortKey]) -> SubsetSpec {
        SubsetSpec { sort, ..TEST_SPEC }
    }

    fn key(field: &'static str, direction: Direction) -> SortKey {
        SortKey {
            field,
            direction,
            values: SortValues::Scalar,
        }
    }

    /// Whether `same_order` takes the two orders for one.
    fn one_order(a: &'static [SortKey], b: &'static [SortKey]) -> bool {
        let specs: &'static [SubsetSpec] = Box::leak(Box::new([with_sort(a), with_sort(b)]));
        same_order(specs, 0, 1)
    }

    #[test]
    fn orders_are_compared_once_total() {
        use Direction::{Asc, Desc};
        let leak =
            |keys: Vec<SortKey>| -> &'static [SortKey] { Box::leak(keys.into_boxed_slice()) };
        let date = leak(vec![key("date", Desc)]);
        // The tie-breaker written out, in the direction of the last key: the same order.
        assert!(one_order(
            date,
            leak(vec![key("date", Desc), key("_id", Desc)])
        ));
        // In the other direction: another order.
        assert!(!one_order(
            date,
            leak(vec![key("date", Desc), key("_id", Asc)])
        ));
        // Nothing after an `_id` counts.
        assert!(one_order(
            leak(vec![key("_id", Asc)]),
            leak(vec![key("_id", Asc), key("date", Desc)])
        ));
        assert!(!one_order(date, leak(vec![key("date", Asc)])));
        assert!(!one_order(
            date,
            leak(vec![key("date", Desc), key("rating", Desc)])
        ));
    }
}
