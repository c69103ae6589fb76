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

/// A checked `#[derive(Subset)]` input.
pub(crate) struct Parent<'a> {
    pub(crate) cont: &'a Container<'a>,
    pub(crate) collection: &'a LitStr,
    pub(crate) id: &'a Field<'a>,
    pub(crate) subsets: Vec<Subset<'a>>,
    /// Views of the same children, by index (earlier, later), whose element types differ as
    /// written: their full child types must be one, which only the compiler can tell.
    pub(crate) same_types: Vec<(usize, usize)>,
    /// Views of the same children with the same `keep` and filter, by index (earlier, later):
    /// their orders must differ once made total, which needs the child's `_id` field, known only
    /// in constant evaluation.
    pub(crate) distinct_orders: Vec<(usize, usize)>,
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
    /// Every field serde never serializes under its own name, with the serde key that says so
    /// (`skip`, `skip_serializing` or `flatten`): not a field a parent may sort, filter or sum by.
    pub(crate) unstored: Vec<(&'a Field<'a>, &'static str)>,
    /// Every serialized field that serde leaves out of some documents or stores in another form
    /// than its type's, with the serde key that says so (`skip_serializing_if`, `with` or
    /// `serialize_with`): not one either.
    pub(crate) altered: Vec<(&'a Field<'a>, &'static str)>,
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
    if let Some(id) = id {
        stored_id(ctxt, id, if full.is_some() { "preview" } else { "child" });
    }
    match full {
        Some(full) => preview(ctxt, cont, full),
        // A preview is never stored itself: what it reads is its full type's stored form.
        None => read_back(ctxt, cont, &[]),
    }
    read_names(ctxt, cont);
    let fields = cont.fields.iter().filter(|f| f.is_serialized()).collect();
    let unstored = cont
        .fields
        .iter()
        .filter_map(|f| {
            match (f.serde.skip_serializing, f.serde.skip_deserializing) {
                (true, true) => Some((f, "skip")),
                (true, false) => Some((f, "skip_serializing")),
                // Stored, so sortable: see `Child::__UNSTORED`.
                (false, _) => f.serde.flatten.then_some((f, "flatten")),
            }
        })
        .collect();
    let altered = cont
        .fields
        .iter()
        .filter(|f| f.is_serialized())
        .filter_map(|f| f.serde.altered_by().map(|key| (f, key)))
        .collect();
    let id_ty = id?.ty;
    (!ctxt.has_errors()).then_some(Child {
        cont,
        id_ty,
        fields,
        unstored,
        altered,
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

/// The `_id` is stored always and as its type, and reads back as it is stored: the engine finds
/// documents by it, serializing `Subset::Id` or `Child::Id` itself (a `push(&id, …)`, a
/// `remove(&id, …)`), and never lets the server generate one.
fn stored_id(ctxt: &Ctxt, id: &Field<'_>, what: &str) {
    let name = &id.rust_name;
    let blocker = if id.serde.skip_serializing_if {
        Some((
            "skip_serializing_if",
            "the engine finds every document by its `_id` and makes none up, so a document stored without one is lost to it (its insert or push fails)",
            "make it a required field".to_owned(),
        ))
    } else if id.serde.skip_deserializing {
        Some((
            "skip_deserializing",
            "every document read back would hold the default `_id`, not its own, and a write by that `_id` would miss it",
            "remove `skip_deserializing`".to_owned(),
        ))
    } else {
        id.serde.altered_by().or(id.serde.read_by()).map(|key| {
            (
                key,
                "the engine serializes the `_id` type itself wherever it names a document (a push or a remove by `_id`), without the field's functions, so it would look for another value than the one stored",
                format!("declare the field as the type it is stored as, without `{key}`"),
            )
        })
    };
    if let Some((key, why, fix)) = blocker {
        ctxt.error_spanned_by(
            id.ident,
            format!("the {what}'s `_id` field `{name}` cannot be `#[serde({key})]`: {why}; {fix}"),
        );
    }
}

/// Every field that serde may leave out (`skip_serializing_if`) reads back without it: the
/// engine reads back what it stored, so a field that is sometimes missing and has no default
/// would fail the read of every document stored without it. `written` lists the fields the
/// engine writes itself (a parent's subset fields, counts and sums), which are never missing.
fn read_back(ctxt: &Ctxt, cont: &Container<'_>, written: &[&Field<'_>]) {
    for field in &cont.fields {
        // The `_id` is refused `skip_serializing_if` whatever it reads (see `stored_id`).
        if !field.serde.skip_serializing_if
            || !field.is_serialized()
            || field.bson_name == "_id"
            || field.reads_missing(&cont.serde)
            || written.iter().any(|w| std::ptr::eq(*w, field))
        {
            continue;
        }
        let name = &field.rust_name;
        ctxt.error_spanned_by(
            field.ident,
            format!(
                "`{name}` is `#[serde(skip_serializing_if)]` but cannot be read back without it: a `{}` stored without `{name}` would fail to read; add `#[serde(default)]` to `{name}`",
                cont.name
            ),
        );
    }
}

/// Every stored field is read back under the name it is stored under: the engine reads back
/// what it stored (and a preview reads what its full type stored, under the same names), so a
/// `rename(serialize = …, deserialize = …)` or `rename_all` with two different names would
/// miss the field in every document read back. An `alias` of the stored name will do.
fn read_names(ctxt: &Ctxt, cont: &Container<'_>) {
    for field in &cont.fields {
        if !field.is_serialized()
            || field.serde.skip_deserializing
            || field.serde.reads_name(
                &field.bson_name,
                &field.rust_name,
                cont.serde.read_rename_all,
            )
        {
            continue;
        }
        let (name, stored) = (&field.rust_name, &field.bson_name);
        ctxt.error_spanned_by(
            field.ident,
            format!(
                "`{name}` is stored as `{stored}` but read under another name: every `{}` read back would miss it; read it under its stored name too, `#[serde(alias = \"{stored}\")]`",
                cont.name
            ),
        );
    }
}

pub(crate) fn parent<'a>(ctxt: &Ctxt, cont: &'a Container<'a>) -> Option<Parent<'a>> {
    let collection = cont.attrs.collection.value();
    if cont.attrs.collection.is_missing() {
        let message = format!(
            "`#[derive(Subset)]` on `{}` needs the parent collection: `#[subset(collection = \"{}\")]`",
            cont.name,
            collection_suggestion(&cont.name)
        );
        match cont.attrs.attr {
            Some(attr) => ctxt.error_spanned_by(attr, message),
            None => ctxt.error_spanned_by(cont.ident, message),
        }
    }

    if let Some(span) = cont.serde.deny_unknown_fields {
        ctxt.error_at(
            span,
            "a parent cannot deny unknown fields: every parent stores `_subset`, the definition its subsets were built under, which its type does not hold; remove `deny_unknown_fields`",
        );
    }

    let id = cont.id_field();
    match id {
        Some(id) => stored_id(ctxt, id, "parent"),
        None => ctxt.error_spanned_by(
            cont.ident,
            format!(
                "parent `{}` needs an `_id` field: add {ID_EXAMPLE}",
                cont.name
            ),
        ),
    }

    marker_field(ctxt, cont);

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
    let (same_types, distinct_orders) = distinct_subsets(ctxt, &subsets);
    // The fields the engine writes itself: the subset arrays, the counts and the sums.
    let written: Vec<&Field<'_>> = cont
        .fields
        .iter()
        .filter(|f| f.subset.is_some())
        .chain(subsets.iter().flat_map(|s| {
            s.count
                .map(|(count, _)| count)
                .into_iter()
                .chain(s.sums.iter().map(|sum| sum.parent))
        }))
        .collect();
    read_back(ctxt, cont, &written);
    read_names(ctxt, cont);

    match (collection, id) {
        (Some(collection), Some(id)) if !ctxt.has_errors() => Some(Parent {
            cont,
            collection,
            id,
            subsets,
            same_types,
            distinct_orders,
        }),
        _ => None,
    }
}

/// The field the runtime keeps in every parent it writes (`subset::bookkeeping::Names::marker`): the
/// derive cannot depend on the runtime, so it holds its own copy, which a test compares.
pub(crate) const MARKER: &str = "_subset";

/// Refuses a parent field stored or read under [`MARKER`]: the library's writes would overwrite
/// it, and reading it would decode the library's bookkeeping as the field.
fn marker_field(ctxt: &Ctxt, cont: &Container<'_>) {
    for field in &cont.fields {
        let stored = field.is_serialized() && field.bson_name == MARKER;
        let read = !field.serde.skip_deserializing
            && (field.serde.read_rename.as_deref() == Some(MARKER)
                || field.serde.aliases.iter().any(|a| a == MARKER));
        if stored || read {
            let how = if stored { "stored" } else { "read" };
            ctxt.error_spanned_by(
                field.ident,
                format!(
                    "parent field `{}` is {how} as `{MARKER}`, the field the library keeps in every parent it writes (the definition its subsets were built under): store it under another name, e.g. `#[serde(rename = \"subset\")]`",
                    field.rust_name
                ),
            );
        }
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
            if is_count {
                ctxt.error_spanned_by(
                    &sums.lit,
                    format!(
                        "`{wanted}` is the count field: give the sum its own numeric field, e.g. `#[subset(sum = \"rating_total = rating\")]`"
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
/// `span`, a name that is no field (suggesting the field it most likely meant), a field serde
/// would not store or read back as the engine writes it, and a field that holds something else
/// the engine writes (the `_id`, a subset field's array).
fn stored_parent_field<'a>(
    ctxt: &Ctxt,
    cont: &'a Container<'a>,
    key: &str,
    wanted: &str,
    span: impl quote::ToTokens,
) -> Option<&'a Field<'a>> {
    let (what, example) = match key {
        "count" => ("count", "`#[subset(count = \"total_reviews\")]`"),
        _ => ("sum", "`#[subset(sum = \"rating_total = rating\")]`"),
    };
    let Some(target) = cont.fields.iter().find(|f| f.rust_name == wanted) else {
        let candidates: Vec<&Field<'_>> =
            cont.fields.iter().filter(|f| f.subset.is_none()).collect();
        let hint = if let Some(field) = candidates.iter().find(|f| f.bson_name == wanted) {
            format!(
                "`{key}` takes Rust field names, and `{wanted}` is the serde name of `{}`; write `{}`",
                field.rust_name, field.rust_name
            )
        } else if let Some(field) =
            subset_spec::closest(wanted, candidates.iter().map(|f| f.rust_name.as_str()))
        {
            format!("did you mean `{field}`?")
        } else {
            let list = candidates
                .iter()
                .map(|f| format!("`{}`", f.rust_name))
                .collect::<Vec<_>>()
                .join(", ");
            format!("fields are {list}")
        };
        ctxt.error_spanned_by(
            span,
            format!(
                "`{key}` names `{wanted}`, which is not a field of `{}`: {hint}",
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
    // What else the engine writes into the parent document: an insert sets every count and sum
    // to 0, and each push adds to them, over whatever the field held.
    let overwritten = if target.bson_name == "_id" {
        Some("the parent's `_id`".to_owned())
    } else if target.subset.is_some() {
        Some("a subset field, whose array holds the embedded children".to_owned())
    } else {
        cont.fields
            .iter()
            .find(|f| f.subset.is_some() && f.bson_name == target.bson_name)
            .map(|f| {
                format!(
                    "stored as `{}`, the array of subset field `{}`",
                    target.bson_name, f.rust_name
                )
            })
    };
    if let Some(overwritten) = overwritten {
        ctxt.error_spanned_by(
            span,
            format!(
                "the {what} cannot be kept in `{wanted}`, {overwritten}: the engine writes the {what} there, over what the field holds (an insert stores 0); give the {what} a numeric field of its own, e.g. {example}"
            ),
        );
        return None;
    }
    let function = target
        .serde
        .read_by()
        .or(target.serde.serialize_with.then_some("serialize_with"));
    if let Some(function) = function {
        ctxt.error_spanned_by(
            span,
            format!(
                "`{key}` field `{wanted}` cannot be `#[serde({function})]`: the engine writes the {what} itself, as a BSON number, and reads it back as the field's type; remove `{function}`"
            ),
        );
        return None;
    }
    Some(target)
}

/// Subset fields by index, (earlier, later).
type Pairs = Vec<(usize, usize)>;

/// Views of the same children (collection and key) must differ in order, filter or `keep`, and
/// no parent field may be kept by two subsets (as a count or a sum).
///
/// Returns what only the compiler can check, as pairs of indexes (earlier, later): views of the
/// same children whose element types are written differently (they must store one full child
/// type), and views of the same children with the same filter and `keep` (their orders must
/// differ once the `_id` tie-breaker is added).
fn distinct_subsets(ctxt: &Ctxt, subsets: &[Subset<'_>]) -> (Pairs, Pairs) {
    let mut same_types = Vec::new();
    let mut distinct_orders = Vec::new();
    // Two targets are one when serde stores them under one name.
    let same_target = |a: &Field<'_>, b: &Field<'_>| a.bson_name == b.bson_name;
    for (i, later) in subsets.iter().enumerate() {
        let earlier = &subsets[..i];
        let collection = later.child.value();
        let same_children = |s: &Subset<'_>| s.child.value() == collection && s.key == later.key;
        if let Some(first) = earlier
            .iter()
            .find(|s| same_children(s) && same_view(s, later))
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
        if let Some(first) = earlier.iter().position(&same_children) {
            if show_type(subsets[first].child_ty) != show_type(later.child_ty) {
                same_types.push((first, i));
            }
        }
        distinct_orders.extend(
            earlier
                .iter()
                .enumerate()
                .filter(|(_, s)| same_children(s) && same_filter_and_keep(s, later))
                .map(|(e, _)| (e, i)),
        );
        for sum in &later.sums {
            let taken = earlier.iter().find(|s| {
                s.count.is_some_and(|(c, _)| same_target(c, sum.parent))
                    || s.sums.iter().any(|t| same_target(t.parent, sum.parent))
            });
            if let Some(first) = taken {
                let other = first
                    .count
                    .map(|(c, _)| c)
                    .into_iter()
                    .chain(first.sums.iter().map(|t| t.parent))
                    .find(|t| same_target(t, sum.parent));
                ctxt.error_spanned_by(
                    sum.lit,
                    format!(
                        "{} is already kept by `{}`: give `{}` its own sum field",
                        shown_target(sum.parent, other),
                        first.field.rust_name,
                        later.field.rust_name
                    ),
                );
            }
        }
        if let Some((count, lit)) = later.count {
            let counted = earlier
                .iter()
                .find(|s| s.count.is_some_and(|(c, _)| same_target(c, count)));
            let summed = earlier
                .iter()
                .find(|s| s.sums.iter().any(|t| same_target(t.parent, count)));
            let message = match (counted, summed) {
                (Some(first), _) => Some(format!(
                    "{} already counts the children of `{}`: give `{}` its own count field",
                    shown_target(count, first.count.map(|(c, _)| c)),
                    first.field.rust_name,
                    later.field.rust_name
                )),
                (None, Some(first)) => Some(format!(
                    "{} already holds a running sum of `{}`: give `{}` its own count field",
                    shown_target(
                        count,
                        first
                            .sums
                            .iter()
                            .map(|t| t.parent)
                            .find(|t| same_target(t, count))
                    ),
                    first.field.rust_name,
                    later.field.rust_name
                )),
                (None, None) => None,
            };
            if let Some(message) = message {
                ctxt.error_spanned_by(lit, message);
            }
        }
    }
    (same_types, distinct_orders)
}

/// A count or sum field as a message names it, the subject of "already counts" or "is already
/// kept by": "`total`", or, when an earlier subset keeps another Rust field stored under the
/// same name, "`old_total` is stored as `total`, like `total`, which".
fn shown_target(field: &Field<'_>, other: Option<&Field<'_>>) -> String {
    match other {
        Some(other) if other.rust_name != field.rust_name => format!(
            "`{}` is stored as `{}`, like `{}`, which",
            field.rust_name, field.bson_name, other.rust_name
        ),
        _ => format!("`{}`", field.rust_name),
    }
}

/// Whether two subset fields over the same children have the same filter and `keep`.
fn same_filter_and_keep(a: &Subset<'_>, b: &Subset<'_>) -> bool {
    let filter = |s: &Subset<'_>| s.filter.map(|f| (f.field.clone(), f.equals));
    a.keep == b.keep && filter(a) == filter(b)
}

/// Whether two subset fields over the same children would always hold the same ones as
/// written: the same sort keys and directions, the same filter and the same `keep`. (An order
/// that differs only by the `_id` tie-breaker written out is the same too: that needs the
/// child's `_id` field, and is checked in constant evaluation, see [`Parent::distinct_orders`].)
fn same_view(a: &Subset<'_>, b: &Subset<'_>) -> bool {
    let order = |s: &Subset<'_>| -> Vec<(String, bool)> {
        s.sort
            .keys
            .iter()
            .map(|k| (k.name.clone(), matches!(k.direction, attr::Direction::Asc)))
            .collect()
    };
    same_filter_and_keep(a, b) && order(a) == order(b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_marker_is_the_runtimes() {
        assert_eq!(
            super::MARKER,
            subset_runtime::bookkeeping::Names::default().marker()
        );
    }
}
