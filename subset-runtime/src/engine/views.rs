//! The views of a store: its subset fields grouped by the children they show. Several fields
//! may be views of one child collection and key (the latest five, the three most helpful, the
//! verified ones); a write of a child updates every view of it, and every per-view vector of a
//! write (a pushed child's embedded forms, a push's `$each` lists) is indexed by the view's
//! place in its group. The grouping is made once, when the store is built, so that every
//! write indexes the same table instead of regrouping the fields.

use crate::model::{ParentSpec, SubsetSpec};

/// The subset fields of one child collection and key.
#[derive(Debug)]
pub(crate) struct ViewGroup {
    /// The indexes of the group's fields in [`ParentSpec::subsets`], in declaration order.
    fields: Box<[usize]>,
    /// Their descriptors, in the same order. Copies, so that a field's views and a field the
    /// store does not list (its own single view) are both a slice of descriptors.
    specs: Box<[SubsetSpec]>,
}

impl ViewGroup {
    /// The group's descriptors, in declaration order.
    pub(crate) fn specs(&self) -> &[SubsetSpec] {
        &self.specs
    }

    /// The index in [`ParentSpec::subsets`] of the group's first field, under which the
    /// children every view shares are gathered once.
    pub(crate) fn first_field(&self) -> usize {
        // A group is made from a field, so it is never empty.
        self.fields.first().copied().unwrap_or_default()
    }
}

/// Every view group of a store, in the order of their first fields.
#[derive(Debug)]
pub(crate) struct ViewTable {
    groups: Box<[ViewGroup]>,
    /// For each field of [`ParentSpec::subsets`], the index of its group.
    group_of: Box<[usize]>,
}

impl ViewTable {
    /// Groups the fields of `spec` by child collection and key.
    pub(crate) fn new(spec: &ParentSpec) -> Self {
        let mut groups: Vec<(Vec<usize>, Vec<SubsetSpec>)> = Vec::new();
        let mut group_of = Vec::with_capacity(spec.subsets.len());
        for (i, field) in spec.subsets.iter().enumerate() {
            let found = groups
                .iter()
                .position(|(_, specs)| specs.iter().any(|s| s.same_children(field)));
            let g = match found {
                Some(g) => g,
                None => {
                    groups.push((Vec::new(), Vec::new()));
                    groups.len() - 1
                }
            };
            if let Some((fields, specs)) = groups.get_mut(g) {
                fields.push(i);
                specs.push(*field);
            }
            group_of.push(g);
        }
        ViewTable {
            groups: groups
                .into_iter()
                .map(|(fields, specs)| ViewGroup {
                    fields: fields.into(),
                    specs: specs.into(),
                })
                .collect(),
            group_of: group_of.into(),
        }
    }

    /// The groups, in the order of their first fields.
    pub(crate) fn groups(&self) -> &[ViewGroup] {
        &self.groups
    }

    /// The index in [`ViewTable::groups`] of the group of field `field` of
    /// [`ParentSpec::subsets`].
    pub(crate) fn group_index(&self, field: usize) -> usize {
        self.group_of.get(field).copied().unwrap_or_default()
    }

    /// The views of `spec`: its group when the store lists a field equal to it, `None` when it
    /// lists none (then `spec` is its own single view).
    pub(crate) fn of(&self, spec: &SubsetSpec) -> Option<&[SubsetSpec]> {
        // Field names are unique within a parent, but a descriptor is compared whole: one that
        // differs from the store's field of that name (another `keep`, say) is not that field.
        self.groups
            .iter()
            .find(|g| g.specs.first().is_some_and(|s| s.same_children(spec)))
            .map(ViewGroup::specs)
            .filter(|specs| specs.contains(spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SpecBuilder;

    fn spec(field: &str, collection: &str, key: &str) -> SubsetSpec {
        *SpecBuilder::new(field, collection, key)
            .sort("date desc")
            .build()
            .expect("a valid descriptor")
    }

    #[test]
    fn fields_over_one_collection_and_key_are_one_group_in_declaration_order() {
        let latest = spec("latest", "reviews", "product_id");
        let orders = spec("orders", "orders", "product_id");
        let by_shop = spec("by_shop", "reviews", "shop_id");
        let top = SubsetSpec {
            keep: 3,
            ..spec("top", "reviews", "product_id")
        };
        let parent = ParentSpec::leak("products", vec![latest, orders, by_shop, top]);
        let table = ViewTable::new(&parent);
        let fields: Vec<&[usize]> = table.groups().iter().map(|g| &*g.fields).collect();
        assert_eq!(fields, [&[0, 3][..], &[1], &[2]]);
        assert_eq!(
            (0..4).map(|i| table.group_index(i)).collect::<Vec<_>>(),
            [0, 1, 2, 0]
        );
        assert_eq!(table.of(&top), Some(&[latest, top][..]));
        assert_eq!(table.of(&orders), Some(&[orders][..]));
        assert_eq!(table.groups()[0].first_field(), 0);
        assert_eq!(table.groups()[2].first_field(), 2);
    }

    #[test]
    fn a_field_the_store_does_not_list_has_no_group() {
        let latest = spec("latest", "reviews", "product_id");
        let table = ViewTable::new(&ParentSpec::leak("products", vec![latest]));
        // Same children, but not a field of the store.
        let other = SubsetSpec { keep: 2, ..latest };
        assert_eq!(table.of(&other), None);
        assert_eq!(table.of(&spec("x", "orders", "product_id")), None);
    }
}
