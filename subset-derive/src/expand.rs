//! Code generation from the checked model. Generated code names nothing from the user's scope
//! except the user's own types and fields: `::subset::…`, `::core::…`, locals `__subset_*`.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_quote, DeriveInput, Generics, LitStr, Type};

use crate::ast::{show_type, Container, Derive};
use crate::attr::Direction;
use crate::ctxt::Ctxt;
use crate::fallback;
use crate::valid::{self, Child, Parent, Subset};

/// `#[derive(Subset)]`: the expansion, or the errors plus a stub impl.
pub(crate) fn derive_parent(input: &DeriveInput) -> TokenStream {
    try_subset(input).unwrap_or_else(|error| fallback::subset(input, error))
}

/// `#[derive(Child)]`: the expansion, or the errors plus a stub impl.
pub(crate) fn derive_child(input: &DeriveInput) -> TokenStream {
    try_child(input).unwrap_or_else(|error| fallback::child(input, error))
}

fn try_subset(input: &DeriveInput) -> syn::Result<TokenStream> {
    let ctxt = Ctxt::new();
    let cont = Container::from_ast(&ctxt, input, Derive::Parent);
    let parent = cont.as_ref().and_then(|cont| valid::parent(&ctxt, cont));
    ctxt.check()?;
    parent
        .map(|parent| parent_impl(&parent))
        .ok_or_else(|| internal(input))
}

fn try_child(input: &DeriveInput) -> syn::Result<TokenStream> {
    let ctxt = Ctxt::new();
    let cont = Container::from_ast(&ctxt, input, Derive::Child);
    let child = cont.as_ref().and_then(|cont| valid::child(&ctxt, cont));
    ctxt.check()?;
    child
        .map(|child| child_impl(&child))
        .ok_or_else(|| internal(input))
}

/// Validation returns a model exactly when it reported nothing; this covers a broken invariant
/// without panicking.
fn internal(input: &DeriveInput) -> syn::Error {
    syn::Error::new_spanned(
        &input.ident,
        "the subset derive could not read this struct and reported no reason: please report this as a bug",
    )
}

fn parent_impl(parent: &Parent<'_>) -> TokenStream {
    let cont = parent.cont;
    let ident = cont.ident;
    let child_types = parent.subsets.iter().map(|subset| subset.child_ty);
    let generics = with_bounds(cont, child_types);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let id_ty = parent.id.ty;
    let id_member = parent.id.ident;
    let collection = parent.collection.value();
    // A parent with generic parameters cannot name its children's field types in a constant
    // (see `Lookup`).
    let generic = !cont.generics.params.is_empty();
    let subsets = subsets(parent, generic);
    let consts = parent
        .subsets
        .iter()
        .enumerate()
        .map(|(index, subset)| subset_const(cont, index, subset));
    let checks = parent.subsets.iter().map(|subset| checks(subset, generic));

    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::subset::__private::Subset for #ident #ty_generics #where_clause {
                type Id = #id_ty;
                const COLLECTION: &'static ::core::primitive::str = #collection;
                const SUBSETS: &'static [::subset::__private::SubsetSpec] = #subsets;
                fn id(&self) -> &<Self as ::subset::__private::Subset>::Id {
                    &self.#id_member
                }
            }

            #[automatically_derived]
            impl #impl_generics #ident #ty_generics #where_clause {
                #(#consts)*
            }

            // Never called: type-checking its body is the check. Each line is spanned at the
            // string it comes from, so rustc's own errors point there.
            #[allow(dead_code, unused_variables, clippy::all)]
            fn __subset_check #impl_generics (
                __subset_parent: &#ident #ty_generics,
            ) #where_clause {
                #(#checks)*
            }
        };
    }
}

/// How the descriptor of one subset field names the child fields its strings name.
///
/// In a parent that is not generic, each field is found in constant evaluation, by its index in
/// the child's `FIELDS` (`field_index`), and its type inferred from `FieldOf<_, index, true>`:
/// a name that is no field, or one serde does not always store as its type, fails there with a
/// message of our own (the Rust field a BSON name belongs to, the closest name), and the type
/// checks (a sort key's `SortableField`, a filter's `bool`, a sum's `SumField`) run on the type
/// found, all in `SUBSETS`. In a generic parent, where a constant cannot name the parent's type
/// parameters, the fields are accessed by name in the check function instead (see [`checks`]),
/// so that rustc's "no field" error reports an unknown name, and `SUBSETS` refuses a field serde
/// does not always store (`stored_bson_name`) once a build evaluates it for a concrete type.
#[derive(Clone, Copy)]
struct Lookup<'s> {
    subset: &'s Subset<'s>,
}

impl Lookup<'_> {
    /// The `ChildField` of `name` in the lists `lists` (`FIELDS`, `UNSTORED`, `ALTERED` or their
    /// `FULL_` forms) of `Described::<C>`, also checking that no field is stored under the
    /// parent key (`key_message`). Spanned at the child type, where a missing `Child` impl and a
    /// field under the parent key are reported.
    fn field_in(&self, name: &str, full: bool, key_message: &str) -> TokenStream {
        let child_ty = self.subset.child_ty;
        let parent_key = &self.subset.key;
        let (fields, unstored, altered) = lists(full);
        let lookup = quote_spanned! {child_ty.span()=>
            ::subset::__private::field_in(
                ::subset::__private::Described::<#child_ty>::#fields,
                ::subset::__private::Described::<#child_ty>::#unstored,
                ::subset::__private::Described::<#child_ty>::#altered,
                #name,
                #parent_key,
                #key_message,
            )
        };
        // Unspanned, so that the lint on unused imports, which a constant resolved to the
        // inherent impl leaves it, treats it as the macro's own.
        quote!({
            use ::subset::__private::DescribedFallback as _;
            #lookup
        })
    }

    /// The field `name` of `C` (or of its full type) as the generic arguments `Owner, _, I,
    /// CHILD` of a `FieldOf` helper (`sort_values_at`, `filter_field_at`, `summed_at`), which
    /// infers the field's type from the one `FieldOf<_, I, true>` impl of `Owner`. The index is
    /// found in constant evaluation at `span` (see [`Lookup`]); `site` says what the parent does
    /// with the field, for messages. For a type that is no `Child`, `CHILD` is false and every
    /// type has `FieldOf<NotAChild, 0, false>`.
    fn field_at(&self, name: &str, full: bool, site: &TokenStream, span: Span) -> TokenStream {
        let child_ty = self.subset.child_ty;
        let (fields, unstored, altered) = lists(full);
        let is_child = if full {
            quote!(FULL_IS_CHILD)
        } else {
            quote!(IS_CHILD)
        };
        let described = |item: TokenStream| {
            quote_spanned! {span=>
                {
                    #[allow(unused_imports)]
                    use ::subset::__private::DescribedFallback as _;
                    ::subset::__private::Described::<#child_ty>::#item
                }
            }
        };
        let index = quote_spanned! {span=>
            {
                #[allow(unused_imports)]
                use ::subset::__private::DescribedFallback as _;
                ::subset::__private::field_index(
                    ::subset::__private::Described::<#child_ty>::#is_child,
                    ::subset::__private::Described::<#child_ty>::#fields,
                    ::subset::__private::field_of(
                        ::subset::__private::Described::<#child_ty>::#fields,
                        ::subset::__private::Described::<#child_ty>::#unstored,
                        ::subset::__private::Described::<#child_ty>::#altered,
                        #name,
                    ),
                    #site,
                )
            }
        };
        // The full type is named through `FullOf`, which needs no `Child` bound: a child type
        // without `#[derive(Child)]` is reported once, elsewhere.
        let owner = if full {
            let child = described(quote!(IS_CHILD));
            quote_spanned! {span=> <#child_ty as ::subset::__private::FullOf<#child>>::Full }
        } else {
            quote!(#child_ty)
        };
        let is_child = described(is_child);
        quote_spanned! {span=> #owner, _, #index, #is_child }
    }
}

/// The names of the `Described` lists of a child type, or of its full type.
fn lists(full: bool) -> (Ident, Ident, Ident) {
    let name = |n: &str| Ident::new(n, Span::call_site());
    if full {
        (
            name("FULL_FIELDS"),
            name("FULL_UNSTORED"),
            name("FULL_ALTERED"),
        )
    } else {
        (name("FIELDS"), name("UNSTORED"), name("ALTERED"))
    }
}

/// The `Site` of a child field that a parent's string names.
fn site(child_ty: &Type, name: &str, full: bool, role: TokenStream) -> TokenStream {
    let owner = if full {
        quote!(FULL_NAME)
    } else {
        quote!(NAME)
    };
    quote!({
        use ::subset::__private::DescribedFallback as _;
        ::subset::__private::Site {
            field: #name,
            owner: ::subset::__private::Described::<#child_ty>::#owner,
            full_owner: ::subset::__private::Described::<#child_ty>::FULL_NAME,
            role: #role,
        }
    })
}

/// The `SubsetSpec` literal of one subset field of `parent`, at `index`.
fn spec(parent: &Parent<'_>, index: usize, generic: bool) -> TokenStream {
    let subset = &parent.subsets[index];
    let field = &subset.field.bson_name;
    let rust_field = &subset.field.rust_name;
    let child_collection = subset.child.value();
    let key = &subset.key;
    let keep = Literal::u32_unsuffixed(subset.keep);
    let child_ty = subset.child_ty;
    let lookup = Lookup { subset };
    // The parent key is added to every stored child, so the child must not have a field of that
    // name: its value would be overwritten, and its embedded copy would never match the stored one.
    let key_message = format!(
        "the child type of `{}` has a field stored as `{key}`, the field that holds the parent's \
         `_id` in the child collection: remove that field from the child, or name another with \
         `#[subset(key = \"...\")]`",
        subset.field.rust_name
    );
    // The same for a preview's full type, which the sums read and the child collection holds.
    let full_key_message = format!(
        "`{}` previews a type with a field stored as `{key}`, the field that holds the parent's \
         `_id` in the child collection: remove that field from the full type, or name another \
         with `#[subset(key = \"...\")]`",
        show_type(child_ty)
    );
    let parent_key = &subset.key;
    // Located at the sort string but resolved like macro-internal code: rustc points its errors
    // at the string, and does not suggest replacing the whole string with a bare field name (a
    // fix that would not compile).
    let sort_span = Span::mixed_site().located_at(subset.sort.lit.span());
    let sort = subset.sort.keys.iter().map(|key| {
        let name = &key.name;
        let direction = match key.direction {
            Direction::Asc => quote!(Asc),
            Direction::Desc => quote!(Desc),
        };
        let site = site(
            child_ty,
            name,
            false,
            quote!(::subset::__private::Role::Sort),
        );
        let values = if generic {
            // The field's type is inferred from the accessor; its `SortableField` bound is also
            // the check that the field exists and can be a sort key.
            let child = Ident::new("__subset_child", sort_span);
            let mut member = key.ident.clone();
            member.set_span(sort_span);
            quote_spanned! {sort_span=>
                ::subset::__private::sort_values::<#child_ty, _>(
                    |#child: &#child_ty| &(*#child).#member
                )
            }
        } else {
            let args = lookup.field_at(name, false, &site, sort_span);
            quote_spanned! {sort_span=> ::subset::__private::sort_values_at::<#args>() }
        };
        // The lookup is spanned at the child type: a child without `#[derive(Child)]`, or one
        // with a field stored under the parent key, is reported there. The check that serde
        // stores the field is spanned at the sort string, which names it.
        //
        // Only `#[derive(Child)]` sees the child's serde attributes, so the check reads what it
        // recorded (`Child::__UNSTORED`, `Child::__ALTERED`) in constant evaluation and fails
        // with a panic message, not a type error. (In a parent that is not generic, the field's
        // `FieldOf` index already failed, with the same message, and this is never evaluated;
        // in a generic one, the error appears only when a build evaluates `SUBSETS` for a
        // concrete type, still at the sort string.)
        let found = lookup.field_in(name, false, &key_message);
        let field = quote_spanned! {sort_span=>
            ::subset::__private::stored_bson_name(#found, #site)
        };
        quote_spanned! {child_ty.span()=>
            ::subset::__private::SortKey {
                field: #field,
                direction: ::subset::__private::Direction::#direction,
                values: #values,
            }
        }
    });
    let count = match subset.count {
        Some((field, _)) => {
            let name = &field.bson_name;
            quote!(::core::option::Option::Some(#name))
        }
        None => quote!(::core::option::Option::None),
    };
    // A sum adds up, and a filter reads, the stored children, so both look their field up on the
    // full type (`Self` for a child that is not a preview), whose name the parent does not know.
    let full_field = |name: &str, lit: &LitStr, site: &TokenStream| {
        let found = lookup.field_in(name, true, &full_key_message);
        let span = Span::mixed_site().located_at(lit.span());
        quote_spanned! {span=>
            ::subset::__private::stored_bson_name(#found, #site)
        }
    };
    let sums = subset.sums.iter().map(|sum| {
        let parent = &sum.parent.bson_name;
        let name = &sum.child.child;
        let site = site(child_ty, name, true, quote!(::subset::__private::Role::Sum));
        let child = full_field(name, sum.lit, &site);
        let child = if generic {
            child
        } else {
            // The parent field's type must hold the sum of the child field's.
            let span = Span::mixed_site().located_at(sum.lit.span());
            let args = lookup.field_at(name, true, &site, span);
            let parent = Ident::new("__subset_parent", span);
            let mut member = sum.parent.ident.clone();
            member.set_span(span);
            quote_spanned! {span=>
                ::subset::__private::summed_at::<Self, _, #args>(
                    |#parent: &Self| &(*#parent).#member,
                    #child,
                )
            }
        };
        quote! {
            ::subset::__private::SumSpec { parent: #parent, child: #child }
        }
    });
    let filter = match subset.filter {
        None => quote!(::core::option::Option::None),
        Some(filter) => {
            let equals = filter.equals;
            let name = &filter.field;
            let site = site(
                child_ty,
                name,
                true,
                quote!(::subset::__private::Role::Filter { equals: #equals }),
            );
            let field = full_field(name, &filter.lit, &site);
            let field = if generic {
                field
            } else {
                let span = Span::mixed_site().located_at(filter.lit.span());
                let args = lookup.field_at(name, true, &site, span);
                quote_spanned! {span=> ::subset::__private::filter_field_at::<#args>(#field) }
            };
            quote! {
                ::core::option::Option::Some(::subset::__private::FilterSpec { field: #field, equals: #equals })
            }
        }
    };
    let embed = quote_spanned! {child_ty.span()=>
        ::subset::__private::embed(
            ::subset::__private::Described::<#child_ty>::EMBED,
            ::subset::__private::Described::<#child_ty>::FULL_FIELDS,
            #parent_key,
            #full_key_message,
        )
    };
    let embed = quote!({
        use ::subset::__private::DescribedFallback as _;
        #embed
    });
    // A view of the children of an earlier view stores the same full child type.
    let child_collection = match parent.same_types.iter().find(|(_, later)| *later == index) {
        None => quote!(#child_collection),
        Some(&(earlier, _)) => {
            let first = &parent.subsets[earlier];
            let message = format!(
                "`{later}` and `{earlier}` are views of the children in `{child_collection}` under key `{key}`, so they must hold one child type, but `{later_ty}` and `{earlier_ty}` store different ones (`<{later_ty} as Child>::Full` is not `<{earlier_ty} as Child>::Full`): give `{later}` the element type of `{earlier}`, or a preview of the type it stores (`#[subset(preview_of = …)]`), or its own children (another `child` collection, or `#[subset(key = \"{later}_{key}\")]`)",
                later = subset.field.rust_name,
                earlier = first.field.rust_name,
                later_ty = show_type(child_ty),
                earlier_ty = show_type(first.child_ty),
            );
            let span = Span::mixed_site().located_at(child_ty.span());
            // In a parent that is not generic, the full types are named through `FullOf`, which
            // needs no `Child` bound, so that an element type without `#[derive(Child)]` is
            // reported once, elsewhere (and not compared). In a generic one, the impl's bounds
            // make each a `Child`.
            let same = if generic {
                let (ours, theirs) = (full_type(child_ty), full_type(first.child_ty));
                quote_spanned! {span=> ::subset::__private::SameType::<#ours, #theirs>::SAME }
            } else {
                let is_child = |ty: &Type| {
                    quote_spanned! {span=>
                        {
                            #[allow(unused_imports)]
                            use ::subset::__private::DescribedFallback as _;
                            ::subset::__private::Described::<#ty>::IS_CHILD
                        }
                    }
                };
                let full = |ty: &Type| {
                    let is_child = is_child(ty);
                    quote_spanned! {span=> <#ty as ::subset::__private::FullOf<#is_child>>::Full }
                };
                let (ours, theirs) = (full(child_ty), full(first.child_ty));
                let (ours_child, theirs_child) = (is_child(child_ty), is_child(first.child_ty));
                // `|`, not `||`: no branch, so that the descriptors stay one promoted constant.
                quote_spanned! {span=>
                    ::subset::__private::SameType::<#ours, #theirs>::SAME
                        | !#ours_child
                        | !#theirs_child
                }
            };
            let check = quote_spanned! {span=>
                ::subset::__private::one_child_type(#same, #message, #child_collection)
            };
            quote!({
                #[allow(unused_imports)]
                use ::subset::__private::SameTypeFallback as _;
                #check
            })
        }
    };
    quote! {
        ::subset::__private::SubsetSpec {
            field: #field,
            rust_field: #rust_field,
            child_collection: #child_collection,
            key: #key,
            keep: #keep,
            sort: &[#(#sort),*],
            count: #count,
            sums: &[#(#sums),*],
            // The child's `_id` values, or any `_id` if the child type is not a `Child` (which
            // `child_field` reports, once).
            id_values: {
                use ::subset::__private::IdFallback as _;
                ::subset::__private::ChildIds::<#child_ty>::VALUES
            },
            // The preview's fields, or `None` for whole children (and for a child type that is
            // not a `Child`, reported once elsewhere); the preview's full type must not store a
            // field under the parent key either.
            embed: #embed,
            filter: #filter,
        }
    }
}

/// `SUBSETS`: the descriptors, checked in constant evaluation for views of the same children
/// with the same filter and `keep` whose orders are one once total (see `distinct_orders`).
fn subsets(parent: &Parent<'_>, generic: bool) -> TokenStream {
    let specs = (0..parent.subsets.len()).map(|index| spec(parent, index, generic));
    let mut subsets = quote!(&[#(#specs),*]);
    for &(earlier, later) in &parent.distinct_orders {
        let (first, second) = (&parent.subsets[earlier], &parent.subsets[later]);
        let message = format!(
            "`{later}` is a view of the children in `{collection}` under key `{key}` with the same filter and keep as `{earlier}`, and its order, `{later_sort}`, is the order of `{earlier}`, `{earlier_sort}`, once both end with the `_id` tie-breaker (every order does, in the direction of its last key; no key after an `_id` counts), so it would always hold the same children: give it another `sort`, `keep` or `filter`, or its own children (another `child` collection, or `#[subset(key = \"{later}_{key}\")]`)",
            later = second.field.rust_name,
            earlier = first.field.rust_name,
            collection = second.child.value(),
            key = second.key,
            later_sort = second.sort.lit.value(),
            earlier_sort = first.sort.lit.value(),
        );
        let span = Span::mixed_site().located_at(second.sort.lit.span());
        let (earlier, later) = (
            Literal::usize_unsuffixed(earlier),
            Literal::usize_unsuffixed(later),
        );
        // Dereferenced from behind a reference, so that the call is part of a constant the
        // compiler evaluates as it checks the crate (a promoted constant, as the array is),
        // not only where `SUBSETS` is used.
        subsets = quote_spanned! {span=>
            *&::subset::__private::distinct_orders(#subsets, #earlier, #later, #message)
        };
    }
    subsets
}

/// The associated constant `Subset::FIELD_NAME` for one subset field.
fn subset_const(cont: &Container<'_>, index: usize, subset: &Subset<'_>) -> TokenStream {
    let vis = cont.vis;
    let name = &subset.const_ident;
    let child_ty = subset.child_ty;
    let index = Literal::usize_unsuffixed(index);
    let doc = const_doc(subset);
    let new = quote_spanned! {child_ty.span()=> ::subset::__private::SubsetField::__new(#index)};
    let full = full_type(child_ty);
    quote! {
        #[doc = #doc]
        #vis const #name: ::subset::__private::SubsetField<Self, #full> = #new;
    }
}

/// `<C as Child>::Full`, the type stored in the child collection for the element type `C`
/// (`C` itself unless `C` is a preview). Spanned at `C`, where a `C` that is not a `Child` is
/// reported; every use is spelled the same way, so that rustc reports it once.
pub(crate) fn full_type(child_ty: &Type) -> TokenStream {
    quote_spanned! {child_ty.span()=> <#child_ty as ::subset::__private::Child>::Full}
}

fn const_doc(subset: &Subset<'_>) -> String {
    let child_ty = subset.child_ty;
    let child_ty = quote!(#child_ty).to_string().replace(' ', "");
    let count = match subset.count {
        Some((field, _)) => format!(" `{}` counts them.", field.rust_name),
        None => String::new(),
    };
    format!(
        " The `{rust}` subset field: the first {keep} children by `{sort}` stay embedded in the \
         parent's `{bson}` array, as `{child_ty}` values (the whole children, or previews of \
         them when `{child_ty}` is declared with `#[subset(preview_of = …)]`); every child is \
         stored whole, as `<{child_ty} as Child>::Full`, in the `{collection}` collection, whose \
         `{key}` field holds the parent's `_id`.{count}\n\n Pass it to `Store::children` to read \
         and write these children.",
        rust = subset.field.rust_name,
        keep = subset.keep,
        sort = subset.sort.lit.value(),
        bson = subset.field.bson_name,
        collection = subset.child.value(),
        key = subset.key,
    )
}

/// The check function's parameter as a check spanned at `at` names it: rebound under `at`'s
/// span, so that the check's tokens share one context (rustc then points its messages at `at`)
/// and resolve when the struct comes out of a `macro_rules!` macro whose caller wrote the
/// attribute (`at` is then in the caller's context, the parameter in the macro's).
fn check_parameter(at: Span) -> (TokenStream, Ident) {
    let local = Ident::new("__subset_parent", at);
    let param = Ident::new("__subset_parent", Span::call_site());
    (quote_spanned!(at=> let #local = #param;), local)
}

/// The compile-time checks of one subset field that are type checks on the parent's fields:
/// its count is an integer field. In a generic parent, also its sums (numeric fields on both
/// sides, an integer sum only of integers) and its filter (a `bool`), by field access; in
/// another, those are checked in `SUBSETS`, on the types `FieldOf` finds (see [`Lookup`]).
/// (The sort keys are checked where the descriptor records their types, in [`spec`].)
///
/// In a generic parent the check function's `C: Child` bound keeps `<C as Child>::Full` from
/// resolving to a struct, so there a sum's and a filter's field is looked up on `C` itself.
fn checks(subset: &Subset<'_>, generic: bool) -> TokenStream {
    let count_check = subset.count.map(|(field, lit)| {
        let span = lit.span();
        let (bind, parent) = check_parameter(span);
        let mut member = field.ident.clone();
        member.set_span(span);
        quote_spanned! {span=>
            {
                #bind
                ::subset::__private::assert_count(&#parent.#member);
            }
        }
    });
    if !generic {
        return quote!(#count_check);
    }
    let child_ty = subset.child_ty;
    let full = quote!(#child_ty);
    let sum_checks = subset.sums.iter().map(|sum| {
        let span = Span::mixed_site().located_at(sum.lit.span());
        let (bind, parent) = check_parameter(sum.lit.span());
        let child = Ident::new("__subset_child", span);
        let mut parent_member = sum.parent.ident.clone();
        parent_member.set_span(sum.lit.span());
        let mut child_member = sum.child.child_ident.clone();
        child_member.set_span(span);
        quote_spanned! {span=>
            {
                #bind
                let #child: &#full = ::subset::__private::nothing();
                ::subset::__private::assert_sum(&(*#parent).#parent_member, &(*#child).#child_member);
            }
        }
    });
    let filter_check = subset.filter.map(|filter| {
        let span = Span::mixed_site().located_at(filter.lit.span());
        let child = Ident::new("__subset_child", span);
        let mut member = filter.ident.clone();
        member.set_span(span);
        quote_spanned! {span=>
            let #child: &#full = ::subset::__private::nothing();
            ::subset::__private::assert_filter(&(*#child).#member);
        }
    });
    quote! {
        #count_check
        #(#sum_checks)*
        #filter_check
    }
}

fn child_impl(child: &Child<'_>) -> TokenStream {
    let ident = child.cont.ident;
    let id_ty = child.id_ty;
    let generics = with_bounds(child.cont, child.full.into_iter());
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let fields = child.fields.iter().map(|field| {
        let rust = &field.rust_name;
        let bson = &field.bson_name;
        quote!(::subset::__private::FieldName { rust: #rust, bson: #bson })
    });
    let unstored = child.unstored.iter().map(|(field, attr)| {
        let rust = &field.rust_name;
        quote!((#rust, #attr))
    });
    // A preview stores nothing itself: what it embeds is its full type's stored fields, with the
    // full type's `skip_serializing_if` and `with`.
    let altered = match child.full {
        Some(full) => quote!({
            use ::subset::__private::DescribedFallback as _;
            ::subset::__private::Described::<#full>::ALTERED
        }),
        None => {
            let altered = child.altered.iter().map(|(field, attr)| {
                let rust = &field.rust_name;
                quote!((#rust, #attr))
            });
            quote!(&[#(#altered),*])
        }
    };
    let name = &child.cont.name;
    let field_consts = field_consts(child);
    let preview = child.full.map(|full| preview(child, full));
    let (full, embed, check) = match &preview {
        Some((full, embed, check)) => (full.clone(), Some(embed), Some(check)),
        None => (quote!(Self), None, None),
    };
    // Each stored field's type by its index in `FIELDS`, for the parent's checks.
    let (plain_impl, plain_ty, plain_where) = child.cont.generics.split_for_impl();
    let field_types = child.fields.iter().enumerate().map(|(index, field)| {
        let index = Literal::usize_unsuffixed(index);
        let ty = field.ty;
        quote! {
            #[automatically_derived]
            impl #plain_impl ::subset::__private::FieldOf<#ty, #index, true> for #ident #plain_ty #plain_where {}
        }
    });
    let full_of = quote! {
        #[automatically_derived]
        impl #plain_impl ::subset::__private::FullOf<true> for #ident #plain_ty #plain_where {
            type Full = #full;
        }
    };
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::subset::__private::Child for #ident #ty_generics #where_clause {
                type Id = #id_ty;
                type Full = #full;
                const FIELDS: &'static [::subset::__private::FieldName] = &[#(#fields),*];
                #embed
                // The `_id` type's values if it is a `SortableField`, else any `_id`.
                const ID_VALUES: ::subset::__private::SortValues = {
                    use ::subset::__private::IdFallback as _;
                    ::subset::__private::Probe::<#id_ty>::VALUES
                };
                const __UNSTORED: &'static [(&'static ::core::primitive::str, &'static ::core::primitive::str)] =
                    &[#(#unstored),*];
                const __ALTERED: &'static [(&'static ::core::primitive::str, &'static ::core::primitive::str)] =
                    #altered;
                const __NAME: &'static ::core::primitive::str = #name;
            }

            #(#field_types)*
            #full_of

            #check
        };

        #field_consts
    }
}

/// The constants `Child::FIELD` a patch names fields by (`Review::HELPFUL`), one per stored field
/// of a full child type, each as visible as its field; none for a preview, whose fields a patch
/// names on its full type.
fn field_consts(child: &Child<'_>) -> TokenStream {
    if child.full.is_some() {
        return TokenStream::new();
    }
    let ident = child.cont.ident;
    let (impl_generics, ty_generics, where_clause) = child.cont.generics.split_for_impl();
    let consts = child.fields.iter().map(|field| {
        let vis = field.vis;
        let ty = field.ty;
        let bson = &field.bson_name;
        let name = format_ident!(
            "{}",
            crate::case::field_to_screaming_snake_case(&field.rust_name),
            span = field.ident.span()
        );
        let reformed = child
            .altered
            .iter()
            .any(|(f, key)| std::ptr::eq(*f, *field) && *key != "skip_serializing_if");
        let access = if bson == "_id" {
            quote!(::subset::__private::patch::Identity)
        } else if reformed {
            quote!(::subset::__private::patch::Reformed)
        } else {
            quote!(::subset::__private::patch::Mutable)
        };
        let doc = format!(
            "The field `{}` (stored as `{bson}`), for `Children::patch`.",
            field.rust_name
        );
        quote! {
            #[doc = #doc]
            #vis const #name: ::subset::__private::patch::Field<Self, #ty, #access> =
                ::subset::__private::patch::Field::__new(#bson);
        }
    });
    quote! {
        #[automatically_derived]
        #[allow(dead_code)]
        impl #impl_generics #ident #ty_generics #where_clause {
            #(#consts)*
        }
    }
}

/// For a preview of `full`: the `Full` type, the `EMBED` constant, and the check function that
/// compares each field with the full type's.
///
/// Each check is spanned at the preview field it is about. Only `type Full` needs `full` to be a
/// `Child`, so that one line reports a `full` without `#[derive(Child)]`; the constant reads its
/// fields through `Described`, and the check function only names its fields.
fn preview(child: &Child<'_>, full: &Type) -> (TokenStream, TokenStream, TokenStream) {
    let cont = child.cont;
    let ident = cont.ident;
    let generics = with_bounds(cont, std::iter::once(full));
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let full_name = show_type(full);
    let full_span = Span::mixed_site().located_at(full.span());
    let full_ty = quote_spanned!(full.span()=> #full);
    let not_preview = format!(
        "`{full_name}` is itself a preview: `preview_of` names the full child type, the one stored \
         in the child collection, which is the type `{full_name}` names in its own `preview_of`"
    );
    let embed = child.fields.iter().enumerate().map(|(index, field)| {
        let rust = &field.rust_name;
        // The check of the full type goes in the list, where it is evaluated: see `full_type`.
        let rust_value = if index == 0 {
            quote_spanned! {full_span=>
                ::subset::__private::full_type(
                    ::subset::__private::Described::<#full>::EMBED,
                    #not_preview,
                    #rust,
                )
            }
        } else {
            quote!(#rust)
        };
        let bson = &field.bson_name;
        let renamed = format!(
            "preview field `{rust}` is stored as `{bson}`, but `{full_name}` stores its `{rust}` \
             under another name: give both the same BSON name (the same `#[serde(rename)]` on \
             the field and `#[serde(rename_all)]` on the struct)"
        );
        let unstored = format!(
            "preview field `{rust}` is never stored by `{full_name}` under its name (it is \
             `#[serde(skip)]`, `skip_serializing` or `flatten` there): a preview embeds stored \
             fields only, remove `{rust}` from the preview or let `{full_name}` store it"
        );
        // What the preview field must read where the full type leaves it out or reforms it.
        let sometimes = if field.reads_missing(&cont.serde) {
            quote!(::core::option::Option::None)
        } else {
            let message = format!(
                "preview field `{rust}` cannot read a `{full_name}` stored without it: \
                 `{full_name}` leaves `{rust}` out of some children (`skip_serializing_if`), so \
                 their embedded previews lack it; add `#[serde(default)]` to the preview field \
                 `{rust}`"
            );
            quote!(::core::option::Option::Some(#message))
        };
        let reformed = if field.serde.read_by().is_some() {
            quote!(::core::option::Option::None)
        } else {
            let message = format!(
                "preview field `{rust}` cannot read what `{full_name}` stores: `{full_name}` \
                 stores `{rust}` through a function (`with` or `serialize_with`), and an embedded \
                 preview holds that stored form; give the preview field the same \
                 `#[serde(with = \"…\")]`, or a `deserialize_with` that reads it"
            );
            quote!(::core::option::Option::Some(#message))
        };
        let span = Span::mixed_site().located_at(field.ident.span());
        let name = quote_spanned! {span=>
            ::subset::__private::preview_bson_name(
                ::subset::__private::Described::<#full>::FIELDS,
                ::subset::__private::Described::<#full>::UNSTORED,
                ::subset::__private::Described::<#full>::ALTERED,
                #rust,
                #bson,
                #renamed,
                #unstored,
                #sometimes,
                #reformed,
            )
        };
        quote!(::subset::__private::FieldName { rust: #rust_value, bson: #name })
    });
    let embed = quote! {
        // The fields an embedded preview keeps: `FIELDS`, each checked against the full type.
        const EMBED: ::core::option::Option<&'static [::subset::__private::FieldName]> = {
            use ::subset::__private::DescribedFallback as _;
            ::core::option::Option::Some(&[#(#embed),*])
        };
    };
    let field_checks = child.fields.iter().map(|field| {
        let at_name = Span::mixed_site().located_at(field.ident.span());
        let at_ty = Span::mixed_site().located_at(field.ty.span());
        let mut name_member = field.ident.clone();
        name_member.set_span(at_name);
        let mut ty_member = field.ident.clone();
        ty_member.set_span(at_ty);
        let full_field = Ident::new("__subset_full_field", at_name);
        // The parameters of the check function are named at the call site.
        let full_param = Ident::new("__subset_full", field.ident.span());
        let preview_param = Ident::new("__subset_preview", field.ty.span());
        // A name the full type lacks is rustc's "no field" error, at the preview field's name;
        // another type is `PreviewField`'s message, at the preview field's type.
        let lookup = quote_spanned! {at_name=>
            let #full_field = &(*#full_param).#name_member;
        };
        let compare = quote_spanned! {at_ty=>
            ::subset::__private::assert_preview_field(#full_field, &(*#preview_param).#ty_member);
        };
        quote!({ #lookup #compare })
    });
    let check = quote! {
        // Never called: type-checking its body is the check.
        #[allow(dead_code, unused_variables, clippy::all)]
        fn __subset_check #impl_generics (
            __subset_preview: &#ident #ty_generics,
            __subset_full: &#full,
        ) #where_clause {
            #(#field_checks)*
        }
    };
    (full_ty, embed, check)
}

/// The struct's generics, plus, when it has type parameters, the bounds our traits need: the
/// trait's supertraits on the struct itself (serde's derives bound their impls, not the struct)
/// and `Child` on each child type, which may mention the parameters.
fn with_bounds<'a>(cont: &Container<'_>, child_types: impl Iterator<Item = &'a Type>) -> Generics {
    let mut generics = cont.generics.clone();
    if generics.type_params().next().is_none() {
        return generics;
    }
    let ident = cont.ident;
    let (_, ty_generics, _) = cont.generics.split_for_impl();
    let where_clause = generics.make_where_clause();
    where_clause.predicates.push(parse_quote! {
        #ident #ty_generics: ::subset::__private::serde::Serialize
            + ::subset::__private::serde::de::DeserializeOwned
            + ::core::marker::Send
            + ::core::marker::Sync
            + ::core::marker::Unpin
            + 'static
    });
    for child_ty in child_types {
        where_clause
            .predicates
            .push(parse_quote!(#child_ty: ::subset::__private::Child));
    }
    generics
}
