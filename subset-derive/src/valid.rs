//! Rules that span several keys or fields, and the checked model that expansion works from.
//!
//! Each function reports every broken rule into the [`Ctxt`] and returns the checked model only
//! when nothing at all was reported, so expansion never sees a half-valid input.

use proc_macro2::Ident;
use syn::{LitStr, Type};

use crate::ast::{
    child_guess, default_key, is_child_candidate, show_type, type_name, vec_element, Container,
    Field,
};
use crate::attr::{self, Sort};
use crate::case::{collection_suggestion, field_to_screaming_snake_case};
use crate::ctxt::Ctxt;

/// A checked `#[derive(Parent)]` input.
pub(crate) struct Parent<'a> {
    pub(crate) cont: &'a Container<'a>,
    pub(crate) collection: &'a LitStr,
    pub(crate) id: &'a Field<'a>,
    pub(crate) subsets: Vec<Subset<'a>>,
}

/// One checked subset field.
pub(crate) struct Subset<'a> {
    pub(crate) field: &'a Field<'a>,
    /// `Review` in `Vec<Review>`.
    pub(crate) child_ty: &'a Type,
    pub(crate) child: &'a LitStr,
    pub(crate) keep: u32,
    pub(crate) sort: &'a Sort,
    /// The BSON name of the child field holding the parent's `_id`.
    pub(crate) key: String,
    /// The count field and the literal that named it.
    pub(crate) count: Option<(&'a Field<'a>, &'a LitStr)>,
    /// The running sums: the parent field, the child field and the literal that named them.
    pub(crate) sums: Vec<Sum<'a>>,
    /// For a filtered view, its `bool` child field.
    pub(crate) filter: Option<&'a attr::Filter>,
    /// The associated constant naming this field: `RECENT_REVIEWS`.
    pub(crate) const_ident: Ident,
}

/// One checked `parent = child` of `sum`.
pub(crate) struct Sum<'a> {
    pub(crate) parent: &'a Field<'a>,
    pub(crate) child: &'a attr::SumPair,
    pub(crate) lit: &'a LitStr,
}

/// A checked `#[derive(Child)]` input.
pub(crate) struct Child<'a> {
    pub(crate) cont: &'a Container<'a>,
    /// The type of the field stored as `_id`.
    pub(crate) id_ty: &'a syn::Type,
    /// Every field serialized under its own name.
    pub(crate) fields: Vec<&'a Field<'a>>,
    /// Every field serde never serializes, with the serde key that says so (`skip` or
    /// `skip_serializing`): not a sort key a parent may use.
    pub(crate) unstored: Vec<(&'a Field<'a>, &'static str)>,
    /// For a preview, the full type of `#[subset(preview_of = …)]`.
    pub(crate) full: Option<&'a Type>,
}

/// The example `_id` field quoted by messages.
const ID_EXAMPLE: &str = "`#[serde(rename = \"_id\")] id: ObjectId`";

pub(crate) fn child<'a>(ctxt: &Ctxt, cont: &'a Container<'a>) -> Option<Child<'a>> {
    let full = cont.attrs.preview_of.value();
    let id = cont.id_field();
    if id.is_none() {
        let message = match full {
            Some(full) => format!(
                "preview `{}` needs an `_id` field, the `_id` of the `{}` it shows: add {ID_EXAMPLE}",
                cont.name,
                show_type(full)
            ),
            None => format!(
                "child `{}` needs an `_id` field: add {ID_EXAMPLE}",
                cont.name
            ),
        };
        ctxt.error_spanned_by(cont.ident, message);
    }
    if let Some(full) = full {
        preview(ctxt, cont, full);
    }
    let fields = cont.fields.iter().filter(|f| f.is_serialized()).collect();
    let unstored = cont
        .fields
        .iter()
        .filter_map(
            |f| match (f.serde.skip_serializing, f.serde.skip_deserializing) {
                (true, true) => Some((f, "skip")),
                (true, false) => Some((f, "skip_serializing")),
                // Stored, so sortable: see `Child::__UNSTORED`.
                (false, _) => None,
            },
        )
        .collect();
    let id_ty = id?.ty;
    (!ctxt.has_errors()).then_some(Child {
        cont,
        id_ty,
        fields,
        unstored,
        full,
    })
}

/// The rules only a preview has; the ones that compare it with its full type are type checks in
/// the expansion.
fn preview(ctxt: &Ctxt, cont: &Container<'_>, full: &Type) {
    // Its own full type would make the preview's `EMBED` depend on itself.
    let names_itself = match crate::attr::ungroup_type(full) {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .get_ident()
            .is_some_and(|ident| ident == "Self" || ident == cont.ident),
        _ => false,
    };
    if names_itself {
        ctxt.error_spanned_by(
            full,
            format!(
                "`preview_of` names the full child type that `{}` shows some fields of, not `{}` itself: `#[subset(preview_of = Review)]`",
                cont.name, cont.name
            ),
        );
    }
    for field in &cont.fields {
        if field.serde.flatten {
            ctxt.error_spanned_by(
                field.ident,
                format!(
                    "preview field `{}` cannot be `#[serde(flatten)]`: an embedded preview keeps the fields it names, so name each field of `{}` it shows",
                    field.rust_name,
                    show_type(full)
                ),
            );
        }
    }
}

pub(crate) fn parent<'a>(ctxt: &Ctxt, cont: &'a Container<'a>) -> Option<Parent<'a>> {
    let collection = cont.attrs.collection.value();
    if cont.attrs.collection.is_missing() {
        let message = format!(
            "`#[derive(Parent)]` on `{}` needs the parent collection: `#[subset(collection = \"{}\")]`",
            cont.name,
            collection_suggestion(&cont.name)
        );
        match cont.attrs.attr {
            Some(attr) => ctxt.error_spanned_by(attr, message),
            None => ctxt.error_spanned_by(cont.ident, message),
        }
    }

    let id = cont.id_field();
    if id.is_none() {
        ctxt.error_spanned_by(
            cont.ident,
            format!(
                "parent `{}` needs an `_id` field: add {ID_EXAMPLE}",
                cont.name
            ),
        );
    }

    let mut subsets = Vec::new();
    let mut any_subset = false;
    for field in &cont.fields {
        if let Some(attrs) = &field.subset {
            any_subset = true;
            if let Some(subset) = subset(ctxt, cont, field, attrs) {
                subsets.push(subset);
            }
        }
    }
    if !any_subset {
        ctxt.error_spanned_by(
            cont.ident,
            format!(
                "`{}` has no subset field: mark a `Vec` of children with `#[subset(child = \"reviews\", keep = 5, sort = \"created_at desc\")]`",
                cont.name
            ),
        );
    }
    distinct_subsets(ctxt, &subsets);

    match (collection, id) {
        (Some(collection), Some(id)) if !ctxt.has_errors() => Some(Parent {
            cont,
            collection,
            id,
            subsets,
        }),
        _ => None,
    }
}

/// Checks one field carrying `#[subset]`.
fn subset<'a>(
    ctxt: &Ctxt,
    cont: &'a Container<'a>,
    field: &'a Field<'a>,
    attrs: &'a attr::Field<'a>,
) -> Option<Subset<'a>> {
    let name = &field.rust_name;
    let element = vec_element(field.ty);
    let child_ty = element.filter(|elem| is_child_candidate(elem));
    if child_ty.is_none() {
        // What the field holds instead: the whole type, or the `Vec`'s element.
        let (what, held) = match element {
            Some(elem) => ("not of", elem),
            None => ("not", field.ty),
        };
        let message = match child_guess(field.ty) {
            Some(child) => format!(
                "a subset field must be a `Vec` of its child type, {what} `{}`: `{name}: Vec<{}>`",
                show_type(held),
                show_type(child)
            ),
            None => format!(
                "a subset field must be a `Vec` of its child type, a struct that derives `subset::Child`, {what} `{}`",
                show_type(held)
            ),
        };
        ctxt.error_spanned_by(field.ty, message);
    }
    if let Some(blocker) = field.serde.round_trip_blocker() {
        ctxt.error_spanned_by(
            field.ident,
            format!(
                "subset field `{name}` cannot be `#[serde({blocker})]`: its children are stored in the parent document, remove `{blocker}`"
            ),
        );
    }

    let missing = |key: &str, what: &str, example: &str| {
        if attrs.misspelled.contains(&key) {
            return;
        }
        ctxt.error_spanned_by(
            attrs.attr,
            format!(
                "`#[subset]` on `{name}` needs `{key}`, {what}: `#[subset({key} = {example})]`"
            ),
        );
    };
    if attrs.child.is_missing() {
        let example = child_guess(field.ty)
            .and_then(type_name)
            .map_or_else(|| "children".to_owned(), |n| collection_suggestion(&n));
        missing(
            attr::CHILD,
            "the child collection",
            &format!("\"{example}\""),
        );
    }
    if attrs.keep.is_missing() {
        missing(attr::KEEP, "how many children stay embedded", "5");
    }
    if attrs.sort.is_missing() {
        missing(
            attr::SORT,
            "the order that picks the embedded children",
            "\"created_at desc\"",
        );
    }

    let count = attrs.count.value().and_then(|lit| {
        stored_parent_field(ctxt, cont, "count", &lit.value(), lit).map(|target| (target, lit))
    });

    let sums = attrs.sum.value().and_then(|sums| {
        let mut checked = Vec::new();
        let mut ok = true;
        for pair in &sums.pairs {
            let wanted = &pair.parent;
            let Some(target) = stored_parent_field(ctxt, cont, "sum", wanted, &sums.lit) else {
                ok = false;
                continue;
            };
            let is_count = attrs
                .count
                .value()
                .is_some_and(|c| c.value() == *wanted);
            if target.subset.is_some() || is_count {
                let role = if is_count { "the count field" } else { "a subset field" };
                ctxt.error_spanned_by(
                    &sums.lit,
                    format!(
                        "`{wanted}` is {role}: give the sum its own numeric field, e.g. `#[subset(sum = \"rating_total = rating\")]`"
                    ),
                );
                ok = false;
                continue;
            }
            checked.push(Sum {
                parent: target,
                child: pair,
                lit: &sums.lit,
            });
        }
        ok.then_some(checked)
    });

    let const_name = field_to_screaming_snake_case(name);
    let const_ident = match syn::parse_str::<Ident>(&const_name) {
        Ok(mut ident) => {
            ident.set_span(field.ident.span());
            Some(ident)
        }
        Err(_) => {
            ctxt.error_spanned_by(
                field.ident,
                format!("`{name}` gives no valid constant name (`{const_name}`): name the subset field in snake_case, e.g. `recent_reviews`"),
            );
            None
        }
    };

    let key = attrs
        .key
        .value()
        .map_or_else(|| default_key(&cont.name), LitStr::value);
    Some(Subset {
        field,
        child_ty: child_ty?,
        child: attrs.child.value()?,
        keep: *attrs.keep.value()?,
        sort: attrs.sort.value()?,
        key,
        count: if attrs.count.is_missing() {
            None
        } else {
            Some(count?)
        },
        sums: if attrs.sum.is_missing() {
            Vec::new()
        } else {
            sums?
        },
        filter: if attrs.filter.is_missing() {
            None
        } else {
            Some(attrs.filter.value()?)
        },
        const_ident: const_ident?,
    })
}

/// The parent field that `key` (`count` or `sum`) names and stores a value in: reports, on
/// `span`, a name that is no field (listing the fields) or a field serde would not store.
fn stored_parent_field<'a>(
    ctxt: &Ctxt,
    cont: &'a Container<'a>,
    key: &str,
    wanted: &str,
    span: impl quote::ToTokens,
) -> Option<&'a Field<'a>> {
    let Some(target) = cont.fields.iter().find(|f| f.rust_name == wanted) else {
        let candidates = cont
            .fields
            .iter()
            .filter(|f| f.subset.is_none())
            .map(|f| format!("`{}`", f.rust_name))
            .collect::<Vec<_>>()
            .join(", ");
        ctxt.error_spanned_by(
            span,
            format!(
                "`{key}` names `{wanted}`, which is not a field of `{}`: fields are {candidates}",
                cont.name
            ),
        );
        return None;
    };
    if let Some(blocker) = target.serde.round_trip_blocker() {
        ctxt.error_spanned_by(
            span,
            format!(
                "`{key}` field `{wanted}` cannot be `#[serde({blocker})]`: the {key} is stored in the parent document, remove `{blocker}`"
            ),
        );
        return None;
    }
    Some(target)
}

/// Views of the same children (collection and key) must differ in order, filter or `keep`, and
/// no parent field may be kept by two subsets (as a count or a sum).
fn distinct_subsets(ctxt: &Ctxt, subsets: &[Subset<'_>]) {
    for (i, later) in subsets.iter().enumerate() {
        let earlier = &subsets[..i];
        let collection = later.child.value();
        if let Some(first) = earlier
            .iter()
            .find(|s| s.child.value() == collection && s.key == later.key && same_view(s, later))
        {
            ctxt.error_spanned_by(
                later.child,
                format!(
                    "`{}` is a view of the children in `{collection}` under key `{}` with the same order, filter and keep as `{}`, so it would always hold the same children: give it another `sort`, `keep` or `filter`, or its own children (another `child` collection, or `#[subset(key = \"{}_{}\")]`)",
                    later.field.rust_name,
                    later.key,
                    first.field.rust_name,
                    later.field.rust_name,
                    later.key,
                ),
            );
        }
        for sum in &later.sums {
            let taken = earlier.iter().find(|s| {
                s.count.is_some_and(|(c, _)| std::ptr::eq(c, sum.parent))
                    || s.sums.iter().any(|t| std::ptr::eq(t.parent, sum.parent))
            });
            if let Some(first) = taken {
                ctxt.error_spanned_by(
                    sum.lit,
                    format!(
                        "`{}` is already kept by `{}`: give `{}` its own sum field",
                        sum.parent.rust_name, first.field.rust_name, later.field.rust_name
                    ),
                );
            }
        }
        if let Some((count, lit)) = later.count {
            let counted = earlier
                .iter()
                .find(|s| s.count.is_some_and(|(c, _)| std::ptr::eq(c, count)));
            let summed = earlier
                .iter()
                .find(|s| s.sums.iter().any(|t| std::ptr::eq(t.parent, count)));
            let message = match (counted, summed) {
                (Some(first), _) => Some(format!(
                    "`{}` already counts the children of `{}`: give `{}` its own count field",
                    count.rust_name, first.field.rust_name, later.field.rust_name
                )),
                (None, Some(first)) => Some(format!(
                    "`{}` already holds a running sum of `{}`: give `{}` its own count field",
                    count.rust_name, first.field.rust_name, later.field.rust_name
                )),
                (None, None) => None,
            };
            if let Some(message) = message {
                ctxt.error_spanned_by(lit, message);
            }
        }
    }
}

/// Whether two subset fields over the same children would always hold the same ones: the same
/// sort keys and directions, the same filter and the same `keep`.
fn same_view(a: &Subset<'_>, b: &Subset<'_>) -> bool {
    let order = |s: &Subset<'_>| -> Vec<(String, bool)> {
        s.sort
            .keys
            .iter()
            .map(|k| (k.name.clone(), matches!(k.direction, attr::Direction::Asc)))
            .collect()
    };
    let filter = |s: &Subset<'_>| s.filter.map(|f| (f.field.clone(), f.equals));
    a.keep == b.keep && order(a) == order(b) && filter(a) == filter(b)
}
