//! Code generation from the checked model. Generated code names nothing from the user's scope
//! except the user's own types and fields: `::subset::…`, `::core::…`, locals `__subset_*`.

use std::fmt::Write as _;

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_quote, DeriveInput, Generics, Type};

use crate::ast::{show_type, Container, Derive};
use crate::attr::Direction;
use crate::ctxt::Ctxt;
use crate::fallback;
use crate::paths::{full_type, Private};
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
    // A parent with generic parameters cannot be named by a constant item, nor can a constant
    // item name a child type that mentions them (see `ConstChecks`): the checks of such a child
    // run where a build uses the parent. A child type that mentions none is checked as in a
    // parent without parameters.
    let generic = !cont.generics.params.is_empty();
    let mut const_checks = ConstChecks::default();
    let subsets = subsets(parent, generic, &mut const_checks);
    let consts = parent
        .subsets
        .iter()
        .enumerate()
        .map(|(index, subset)| subset_const(cont, index, subset));
    let checks = parent
        .subsets
        .iter()
        .map(|subset| checks(subset, parent.cont.mentions_parameters(subset.child_ty)));
    // A child may hold the parent key as a field of its own (its embedded copies then keep it
    // too): of the parent's `_id` type, or an `Option` of it. Its type is found through a
    // constant, which cannot name a generic parent's parameters: for a child type that mentions
    // them it is found through the child's inherent constants instead (see `generic_key_type`).
    let (key_checks, generic_key_checks): (Vec<_>, Vec<_>) =
        parent.subsets.iter().partition(|subset| {
            !parent.cont.mentions_parameters(subset.child_ty)
                && !parent.cont.mentions_parameters(id_ty)
        });
    let key_checks = key_checks.into_iter().map(|subset| {
        let (child, full) = (
            parent_key_type(id_ty, subset, false),
            parent_key_type(id_ty, subset, true),
        );
        quote!(#child #full)
    });
    let generic_key_checks = generic_key_checks
        .into_iter()
        .filter(|_| !parent.cont.mentions_parameters(id_ty))
        .map(|subset| generic_key_type(id_ty, subset));
    let (subsets, const_items) = const_checks.place(subsets);

    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::subset::#Private::Subset for #ident #ty_generics #where_clause {
                type Id = #id_ty;
                const COLLECTION: &'static ::core::primitive::str = #collection;
                const SUBSETS: &'static [::subset::#Private::SubsetSpec] = #subsets;
                fn id(&self) -> &<Self as ::subset::#Private::Subset>::Id {
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
                #(#generic_key_checks)*
            }

            #(#key_checks)*

            #const_items
        };
    }
}

/// The checks that only constant evaluation can make: what `#[derive(Child)]` recorded of how
/// serde stores each child field a string names (`Child::__UNSTORED`, `Child::__ALTERED`, the
/// BSON names in `Child::FIELDS`), a child field stored under the parent key, views of one
/// collection with different child types or one order. Each is a statement that fails with the
/// message in the generated code itself, spanned at the attribute it is about (see [`fail`]), so
/// that the error points there and shows no frame of the runtime.
///
/// Each is a constant item of its own, which rustc evaluates as it checks the crate, unless it
/// names a generic type's parameters (`defer`), which no such item can: those statements run in
/// the constant they guard (`SUBSETS`, `EMBED`), evaluated where a build uses it for concrete
/// types.
#[derive(Default)]
struct ConstChecks {
    checks: Vec<TokenStream>,
    deferred: Vec<TokenStream>,
    /// Whether the checks added now name a generic type's parameters.
    defer: bool,
}

impl ConstChecks {
    /// A check that fails the build with the `Option<Message>` that `problem` evaluates to, if
    /// any.
    fn problem(&mut self, problem: TokenStream, span: Span) {
        let fail = fail(quote_spanned!(span=> __subset_problem.text()), span);
        self.push(quote_spanned! {span=>
            if let ::core::option::Option::Some(__subset_problem) = #problem {
                #fail
            }
        });
    }

    /// A check that fails the build with the `Option<&str>` that `problem` evaluates to, if any.
    fn reason(&mut self, problem: TokenStream, span: Span) {
        let fail = fail(quote_spanned!(span=> __subset_problem), span);
        self.push(quote_spanned! {span=>
            if let ::core::option::Option::Some(__subset_problem) = #problem {
                #fail
            }
        });
    }

    /// A check that fails the build with `message` where `fails` is true.
    fn message(&mut self, fails: TokenStream, message: &str, span: Span) {
        let fail = fail(quote!(#message), span);
        self.push(quote_spanned! {span=>
            if #fails {
                #fail
            }
        });
    }

    fn push(&mut self, check: TokenStream) {
        if self.defer {
            self.deferred.push(check);
        } else {
            self.checks.push(check);
        }
    }

    /// `value` (the guarded constant's expression), wrapped with the imports its lookups need,
    /// and the items to add next to the impls: a constant item per check, and the deferred
    /// checks as statements ahead of `value`.
    fn place(self, value: TokenStream) -> (TokenStream, TokenStream) {
        let imports = quote! {
            #[allow(unused_imports)]
            use ::subset::#Private::{DescribedFallback as _, SameTypeFallback as _};
        };
        let items = self.checks.iter().map(|check| {
            quote! {
                const _: () = {
                    #imports
                    #check
                };
            }
        });
        let items = quote!(#(#items)*);
        let checks = self.deferred;
        let value = quote!({
            #imports
            #(#checks)*
            #value
        });
        (value, items)
    }
}

/// The statement that fails constant evaluation with `message` (a `&str`), at `span`. Not
/// `panic!`: its expansion is core's, so the error's primary span would be in core's source, where
/// the human-readable output hides it but tools reading JSON diagnostics (an IDE) show the error.
/// `Option::expect` is `#[track_caller]`: the failure is located at this call, at `span`.
fn fail(message: TokenStream, span: Span) -> TokenStream {
    quote_spanned! {span=>
        ::core::option::Option::<()>::None.expect(#message);
    }
}

/// `::subset::#Private::Described::<C>::#item`, read through `DescribedFallback` where `C` is
/// no `Child` (the generated code imports it next to each use).
fn described(child_ty: &Type, item: &str) -> TokenStream {
    let item = Ident::new(item, Span::call_site());
    quote!(::subset::#Private::Described::<#child_ty>::#item)
}

/// The `ChildField` of `name` on `C` (or on its full type), from the `Described` lists.
fn field_of(child_ty: &Type, name: &str, full: bool) -> TokenStream {
    let prefix = if full { "FULL_" } else { "" };
    let list = |list: &str| described(child_ty, &format!("{prefix}{list}"));
    let (fields, unstored, altered) = (list("FIELDS"), list("UNSTORED"), list("ALTERED"));
    quote!(::subset::#Private::field_of(#fields, #unstored, #altered, #name))
}

/// The `I`th field of `C` for the check function, `I` the index of `name` in `C`'s `FIELDS` (or
/// its full type's), found in constant evaluation: a reference whose type is the field's, or
/// `NotAChild` where no stored field has that name (which [`field_check`] reports) or the type is
/// no `Child` (reported once elsewhere). Spanned at `span`, where rustc reports a wrong type.
fn field_at(child_ty: &Type, name: &str, full: bool, span: Span) -> TokenStream {
    let fallback = quote! {
        #[allow(unused_imports)]
        use ::subset::#Private::DescribedFallback as _;
    };
    let owner = if full {
        let is_child = described(child_ty, "IS_CHILD");
        quote!(<#child_ty as ::subset::#Private::FullOf<{ #fallback #is_child }>>::Full)
    } else {
        quote!(#child_ty)
    };
    let is_child = described(child_ty, if full { "FULL_IS_CHILD" } else { "IS_CHILD" });
    let found = field_of(child_ty, name, full);
    quote_spanned! {span=>
        ::subset::#Private::field_at::<
            #owner,
            _,
            { #fallback ::subset::#Private::field_index(#found) },
            { #fallback ::subset::#Private::field_found(#is_child, #found) },
        >()
    }
}

/// The check that the child field `name` is one, and that serde stores it as its type (and that
/// the name is no BSON name in place of the Rust one): see `field_problem`. A name that is no
/// field is reported here where the type check names the field by its index (`unknown_here`,
/// see [`field_at`]), and is rustc's "no field" error where it names it.
fn field_check(
    checks: &mut ConstChecks,
    child_ty: &Type,
    name: &str,
    full: bool,
    unknown_here: bool,
    role: TokenStream,
    span: Span,
) {
    let prefix = if full { "FULL_" } else { "" };
    let is_child = described(child_ty, &format!("{prefix}IS_CHILD"));
    let fields = described(child_ty, &format!("{prefix}FIELDS"));
    let found = field_of(child_ty, name, full);
    let site = site(child_ty, name, full, unknown_here, role);
    checks.problem(
        quote!(::subset::#Private::field_problem(#is_child, #fields, #found, #site)),
        span,
    );
}

/// The `Site` of a child field that a parent's string names.
fn site(
    child_ty: &Type,
    name: &str,
    full: bool,
    unknown_here: bool,
    role: TokenStream,
) -> TokenStream {
    let owner = described(child_ty, if full { "FULL_NAME" } else { "NAME" });
    let full_owner = described(child_ty, "FULL_NAME");
    let full_fields = described(child_ty, "FULL_FIELDS");
    quote! {
        ::subset::#Private::Site {
            field: #name,
            owner: #owner,
            full_owner: #full_owner,
            role: #role,
            full_fields: #full_fields,
            unknown_here: #unknown_here,
        }
    }
}

/// The `SubsetSpec` literal of one subset field of `parent`, at `index`, and its constant checks.
///
/// For a child type that names none of the parent's parameters, a sort key's `SortValues` are
/// read from the child's `FieldOf` impl for the field's index in `FIELDS`, found in constant
/// evaluation; for one that does, which a constant cannot name, from the field's type, by an
/// accessor (`sort_values`), which names the field: there an unknown name is rustc's "no field"
/// error. Elsewhere the constant checks report it ([`field_check`]). The field's type is checked
/// in [`checks`] or in the accessor.
fn spec(parent: &Parent<'_>, index: usize, checks: &mut ConstChecks) -> TokenStream {
    let subset = &parent.subsets[index];
    let generic = parent.cont.mentions_parameters(subset.child_ty);
    checks.defer = generic;
    let field = &subset.field.bson_name;
    let rust_field = &subset.field.rust_name;
    let child_collection = subset.child.value();
    let key = &subset.key;
    let keep = Literal::u32_unsuffixed(subset.keep);
    let child_ty = subset.child_ty;
    let child_span = Span::mixed_site().located_at(child_ty.span());
    let (fields, embed) = (described(child_ty, "FIELDS"), described(child_ty, "EMBED"));
    // Located at the sort string but resolved like macro-internal code: rustc points its errors
    // at the string, and does not suggest replacing the whole string with a bare field name (a
    // fix that would not compile).
    let sort_span = Span::mixed_site().located_at(subset.sort.lit.span());
    let sort = subset
        .sort
        .keys
        .iter()
        .map(|key| {
            let name = &key.name;
            let direction = match key.direction {
                Direction::Asc => quote!(Asc),
                Direction::Desc => quote!(Desc),
            };
            field_check(
                checks,
                child_ty,
                name,
                false,
                !generic,
                quote!(::subset::#Private::Role::Sort),
                sort_span,
            );
            let found = field_of(child_ty, name, false);
            key_role_check(
                checks,
                &found,
                &subset.key,
                &format!("sort key `{name}`"),
                "so it orders nothing: sort by another field",
                sort_span,
            );
            let values = if generic {
                // The field's type is inferred from the accessor; its `SortableField` bound is also
                // the check that the field exists and can be a sort key.
                let child = Ident::new("__subset_child", sort_span);
                let mut member = key.ident.clone();
                member.set_span(sort_span);
                quote_spanned! {sort_span=>
                    ::subset::#Private::sort_values::<#child_ty, _>(
                        |#child: &#child_ty| &(*#child).#member
                    )
                }
            } else {
                let is_child = described(child_ty, "IS_CHILD");
                quote_spanned! {sort_span=>
                    ::subset::#Private::sort_values_at::<
                        #child_ty,
                        _,
                        {
                            #[allow(unused_imports)]
                            use ::subset::#Private::DescribedFallback as _;
                            ::subset::#Private::field_index(#found)
                        },
                        {
                            #[allow(unused_imports)]
                            use ::subset::#Private::DescribedFallback as _;
                            ::subset::#Private::field_found(#is_child, #found)
                        },
                    >()
                }
            };
            quote! {
                ::subset::#Private::SortKey {
                    field: ::subset::#Private::bson_name(#found),
                    direction: ::subset::#Private::Direction::#direction,
                    values: #values,
                }
            }
        })
        .collect::<Vec<_>>();

    let count = match subset.count {
        Some((field, _)) => {
            let name = &field.bson_name;
            quote!(::core::option::Option::Some(#name))
        }
        None => quote!(::core::option::Option::None),
    };
    let count_type = numbers(subset.count.map(|(field, _)| field.ty));
    // A sum adds up, and a filter reads, the stored children, so both look their field up on the
    // full type (`Self` for a child that is not a preview), whose name the parent does not know.
    let sums = subset
        .sums
        .iter()
        .map(|sum| {
            let parent = &sum.parent.bson_name;
            let name = &sum.child.child;
            let span = Span::mixed_site().located_at(sum.lit.span());
            field_check(
                checks,
                child_ty,
                name,
                true,
                !generic,
                quote!(::subset::#Private::Role::Sum),
                span,
            );
            let child = field_of(child_ty, name, true);
            key_role_check(
                checks,
                &child,
                key,
                &format!("`sum` child field `{name}`"),
                "so its sum is no total of the children: sum another field",
                span,
            );
            let ty = numbers(Some(sum.parent.ty));
            quote! {
                ::subset::#Private::SumSpec {
                    parent: #parent,
                    child: ::subset::#Private::bson_name(#child),
                    ty: #ty,
                }
            }
        })
        .collect::<Vec<_>>();

    let filter = match subset.filter {
        None => quote!(::core::option::Option::None),
        Some(filter) => {
            let equals = filter.equals;
            let name = &filter.field;
            let span = Span::mixed_site().located_at(filter.lit.span());
            field_check(
                checks,
                child_ty,
                name,
                true,
                !generic,
                quote!(::subset::#Private::Role::Filter { equals: #equals }),
                span,
            );
            let field = field_of(child_ty, name, true);
            key_role_check(
                checks,
                &field,
                key,
                &format!("filter field `{name}`"),
                "so it keeps all of a parent's children or none: filter by another field",
                span,
            );
            quote! {
                ::core::option::Option::Some(::subset::#Private::FilterSpec {
                    field: ::subset::#Private::bson_name(#field),
                    equals: #equals,
                })
            }
        }
    };
    // A view of the children of an earlier view stores the same full child type.
    if let Some(&(earlier, _)) = parent.same_types.iter().find(|(_, later)| *later == index) {
        let first = &parent.subsets[earlier];
        let message = format!(
            "`{later}` and `{earlier}` are views of the children in `{child_collection}` under key `{key}`, so they must hold one child type, but `{later_ty}` and `{earlier_ty}` store different ones (`<{later_ty} as Child>::Full` is not `<{earlier_ty} as Child>::Full`): give `{later}` the element type of `{earlier}`, or a preview of the type it stores (`#[subset(preview_of = …)]`), or its own children (another `child` collection, or `#[subset(key = \"{later}_{key}\")]`)",
            later = subset.field.rust_name,
            earlier = first.field.rust_name,
            later_ty = show_type(child_ty),
            earlier_ty = show_type(first.child_ty),
        );
        // Where neither type names the parent's parameters, the full types are named through
        // `FullOf`, which needs no `Child` bound, so that an element type without
        // `#[derive(Child)]` is reported once, elsewhere (and not compared). Otherwise the
        // impl's bounds make each a `Child`.
        let generic = generic || parent.cont.mentions_parameters(first.child_ty);
        checks.defer = generic;
        let same = if generic {
            let (ours, theirs) = (full_type(child_ty), full_type(first.child_ty));
            quote!(::subset::#Private::SameType::<#ours, #theirs>::SAME)
        } else {
            let full = |ty: &Type| {
                let is_child = described(ty, "IS_CHILD");
                quote!(<#ty as ::subset::#Private::FullOf<{
                    #[allow(unused_imports)]
                    use ::subset::#Private::DescribedFallback as _;
                    #is_child
                }>>::Full)
            };
            let (ours, theirs) = (full(child_ty), full(first.child_ty));
            let (ours_child, theirs_child) = (
                described(child_ty, "IS_CHILD"),
                described(first.child_ty, "IS_CHILD"),
            );
            quote!(::subset::#Private::SameType::<#ours, #theirs>::SAME || !#ours_child || !#theirs_child)
        };
        checks.message(quote!(!(#same)), &message, child_span);
    }
    quote! {
        ::subset::#Private::SubsetSpec {
            field: #field,
            rust_field: #rust_field,
            child_collection: #child_collection,
            key: #key,
            keep: #keep,
            sort: &[#(#sort),*],
            count: #count,
            count_type: #count_type,
            sums: &[#(#sums),*],
            // The child's `_id` values, or any `_id` if the child type is not a `Child` (which
            // is reported once elsewhere).
            id_values: {
                #[allow(unused_imports)]
                use ::subset::#Private::IdFallback as _;
                ::subset::#Private::ChildIds::<#child_ty>::VALUES
            },
            // The preview's fields, or `None` for whole children (and for a child type that is
            // not a `Child`, reported once elsewhere).
            embed: {
                #[allow(unused_imports)]
                use ::subset::#Private::DescribedFallback as _;
                #embed
            },
            // Whether the child type stores the parent key, which its embedded copies then keep.
            embed_key: {
                #[allow(unused_imports)]
                use ::subset::#Private::DescribedFallback as _;
                ::subset::#Private::stores(#fields, #key)
            },
            filter: #filter,
        }
    }
}

/// The check that the child field stored under the parent key, if any, has the parent's `_id`
/// type or an `Option` of it: of the element type of `subset`, or (`full`) of the full type it
/// previews: an item of its own. The field's type, found by its index in constant evaluation,
/// must implement a trait declared here, whose `on_unimplemented` message names the key, the
/// child type and the types it may have (a trait of the runtime would show its hidden path in
/// rustc's help).
fn parent_key_type(id_ty: &Type, subset: &Subset<'_>, full: bool) -> TokenStream {
    let (child_ty, key) = (subset.child_ty, subset.key.as_str());
    let span = Span::mixed_site().located_at(child_ty.span());
    let fallback = quote! {
        #[allow(unused_imports)]
        use ::subset::#Private::DescribedFallback as _;
    };
    let (ty, fields, found) = if full {
        let is_child = described(child_ty, "IS_CHILD");
        let (full_is_child, full_fields, embed) = (
            described(child_ty, "FULL_IS_CHILD"),
            described(child_ty, "FULL_FIELDS"),
            described(child_ty, "EMBED"),
        );
        (
            quote!(<#child_ty as ::subset::#Private::FullOf<{ #fallback #is_child }>>::Full),
            full_fields.clone(),
            // Only for a preview: a child's full type is itself, checked once.
            quote!(::subset::#Private::key_found(
                #full_is_child && #embed.is_some(), #full_fields, #key
            )),
        )
    } else {
        let (is_child, fields) = (
            described(child_ty, "IS_CHILD"),
            described(child_ty, "FIELDS"),
        );
        (
            quote!(#child_ty),
            fields.clone(),
            quote!(::subset::#Private::key_found(#is_child, #fields, #key)),
        )
    };
    let child = show_type(child_ty);
    let owner = if full {
        format!("the full type of `{child}`")
    } else {
        format!("`{child}`")
    };
    let (message, label, note) = key_type_texts(id_ty, &owner, key);
    quote_spanned! {span=>
        const _: () = {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait ParentKeyType {
                fn __check(_: ::subset::#Private::TypeOf<Self>) {}
            }
            impl ParentKeyType for #id_ty {}
            impl ParentKeyType for ::core::option::Option<#id_ty> {}
            // No field is stored under the key, or the type is no `Child` (reported once
            // elsewhere): not a type to suggest.
            #[diagnostic::do_not_recommend]
            impl ParentKeyType for ::subset::#Private::NotAChild {}
            // Never called: type-checking its body is the check.
            #[allow(dead_code, clippy::all)]
            fn __subset_check() {
                <_ as ParentKeyType>::__check(::subset::#Private::field_type::<
                    #ty,
                    _,
                    { #fallback ::subset::#Private::key_index(#fields, #key) },
                    { #fallback #found },
                >());
            }
        };
    }
}

/// [`parent_key_type`] for a child type that names the parent's parameters, which no item can
/// name: a block of the check function, which can. The field's type is found by the name of
/// the inherent constant `#[derive(Child)]` gives each stored field (see [`stored_const`]),
/// or, where the child type has none of that name (no field is stored under the key, or it is
/// a parameter itself), by a fallback trait's, which names no type to check. Only the element
/// type is checked: its full type, if it previews one, cannot be named here.
fn generic_key_type(id_ty: &Type, subset: &Subset<'_>) -> TokenStream {
    let (child_ty, key) = (subset.child_ty, subset.key.as_str());
    let span = Span::mixed_site().located_at(child_ty.span());
    let (message, label, note) = key_type_texts(id_ty, &format!("`{}`", show_type(child_ty)), key);
    let name = stored_const(key, span);
    quote_spanned! {span=>
        {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait ParentKeyType {
                fn __check(_: ::subset::#Private::TypeOf<Self>) {}
            }
            impl ParentKeyType for #id_ty {}
            impl ParentKeyType for ::core::option::Option<#id_ty> {}
            #[diagnostic::do_not_recommend]
            impl ParentKeyType for ::subset::#Private::NotAChild {}
            trait StoredFallback {
                const #name: ::subset::#Private::TypeOf<::subset::#Private::NotAChild> =
                    ::subset::#Private::TypeOf::NEW;
            }
            impl<C: ?::core::marker::Sized> StoredFallback for C {}
            <_ as ParentKeyType>::__check(<#child_ty>::#name);
        }
    }
}

/// The name of the inherent constant `#[derive(Child)]` gives the field stored as `bson`, of
/// type `TypeOf<field type>`: `__SUBSET_STORED_` and the name's UTF-8 bytes in hex, an
/// identifier for any name.
fn stored_const(bson: &str, span: Span) -> Ident {
    let mut name = "__SUBSET_STORED_".to_owned();
    for byte in bson.bytes() {
        let _ = write!(name, "{byte:02X}");
    }
    Ident::new(&name, span)
}

/// The message, label and note of a parent key field of the wrong type, in `owner` (the child
/// type, quoted, or its full type): format strings whose only argument is `{Self}`.
fn key_type_texts(id_ty: &Type, owner: &str, key: &str) -> (String, String, String) {
    let escape = |text: &str| text.replace('{', "{{").replace('}', "}}");
    let (id, owner) = (escape(&show_type(id_ty)), escape(owner));
    let message = format!(
        "the field of {owner} stored as `{key}`, the parent key, must have the parent's `_id` type `{id}`, or `Option<{id}>`, not `{{Self}}`"
    );
    let label = format!("{owner} stores the parent key `{key}` as `{{Self}}`");
    let note = format!(
        "the parent key holds the `_id` of the child's parent: declare the field stored as `{key}` as `{id}` (or `Option<{id}>`, filled in when the child is written), or name another key with `#[subset(key = \"...\")]`"
    );
    (message, label, note)
}

/// The check that a child field a parent names in `sort`, `sum` or `filter` (`what`, found as
/// `found`) is not the parent key, which holds one value in all the children of a parent.
fn key_role_check(
    checks: &mut ConstChecks,
    found: &TokenStream,
    key: &str,
    what: &str,
    why: &str,
    span: Span,
) {
    let message = format!(
        "{what} is stored as `{key}`, the parent key, which holds the parent's `_id` in every child of a parent, {why}"
    );
    checks.message(
        quote!(::subset::#Private::is_key(#found, #key)),
        &message,
        span,
    );
}

/// `SUBSETS`: the descriptors, checked in constant evaluation for views of the same children
/// with the same filter and `keep` whose orders are one once total (see `same_order`).
fn subsets(parent: &Parent<'_>, generic: bool, checks: &mut ConstChecks) -> TokenStream {
    let specs = (0..parent.subsets.len()).map(|index| spec(parent, index, checks));
    let mut subsets = quote!(&[#(#specs),*]);
    let ident = parent.cont.ident;
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
        if generic {
            // No item can name a generic parent: the check wraps the descriptors themselves,
            // dereferenced from behind a reference so that they stay one promoted constant.
            subsets = quote_spanned! {span=>
                *&::subset::#Private::distinct_orders(#subsets, #earlier, #later, #message)
            };
        } else {
            checks.defer = false;
            checks.message(
                quote! {
                    ::subset::#Private::same_order(
                        <#ident as ::subset::#Private::Subset>::SUBSETS,
                        #earlier,
                        #later,
                    )
                },
                &message,
                span,
            );
        }
    }
    subsets
}

fn subset_const(cont: &Container<'_>, index: usize, subset: &Subset<'_>) -> TokenStream {
    let vis = cont.vis;
    let name = &subset.const_ident;
    let child_ty = subset.child_ty;
    let index = Literal::usize_unsuffixed(index);
    let doc = const_doc(subset);
    let new = quote_spanned! {child_ty.span()=> ::subset::#Private::SubsetField::__new(#index)};
    let full = full_type(child_ty);
    quote! {
        #[doc = #doc]
        #vis const #name: ::subset::#Private::SubsetField<Self, #full> = #new;
    }
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

/// The `NumberType` of a count or sum field of type `ty` (`Unknown` without one), read through
/// a probe that names a type that can be neither without a second error: the field's own check
/// reports it.
fn numbers(ty: Option<&Type>) -> TokenStream {
    match ty {
        Some(ty) => quote! {{
            #[allow(unused_imports)]
            use ::subset::#Private::NumbersFallback as _;
            ::subset::#Private::Numbers::<#ty>::TYPE
        }},
        None => quote!(::subset::#Private::NumberType::Unknown),
    }
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

/// The compile-time checks of one subset field that are type checks, each spanned at the string
/// that names the field: its count is an integer field, its sums add a numeric child field into
/// a numeric parent field (an integer sum only of integers), its filter is a `bool` child field,
/// and (for a child type that names none of the parent's parameters; see [`spec`]) its sort
/// keys are scalar child fields. Each checks the field's type with a method of the trait it must
/// implement, whose message says what to write.
///
/// A parent field (the count, a sum's) is named, as the derive knows it is there. A child field
/// is named by its index in the child's `FIELDS` ([`field_at`]), so that a name that is none is
/// reported once, in constant evaluation, with the field most likely meant; except in a child
/// type that names the parent's parameters (`generic`), which no constant can name: there the
/// field is accessed by name, and an unknown name is rustc's "no field" error.
///
/// A sum's and a filter's field is on the full type (`<C as FullOf<_>>::Full`, the type itself
/// for one that is no `Child`, reported once elsewhere). For a generic child type, the check
/// function's `C: Child` bound keeps `<C as Child>::Full` from resolving to a struct, so there
/// they are looked up on `C` itself.
fn checks(subset: &Subset<'_>, generic: bool) -> TokenStream {
    let count_check = subset.count.map(|(field, lit)| {
        let span = lit.span();
        let (bind, parent) = check_parameter(span);
        let mut member = field.ident.clone();
        member.set_span(span);
        quote_spanned! {span=>
            {
                #bind
                <_ as ::subset::#Private::CountField>::__check(&(*#parent).#member);
            }
        }
    });
    let child_ty = subset.child_ty;
    // The child field `ident` (named `name`) as a check spanned at `span` reads it: on the full
    // type for a sum or a filter (`full`).
    let child_field = |ident: &Ident, name: &str, full: bool, span: Span| {
        if generic {
            let child = Ident::new("__subset_child", span);
            let mut member = ident.clone();
            member.set_span(span);
            quote_spanned! {span=>
                {
                    let #child: &#child_ty = ::subset::#Private::nothing();
                    &(*#child).#member
                }
            }
        } else {
            field_at(child_ty, name, full, span)
        }
    };
    let sort_checks = subset.sort.keys.iter().filter(|_| !generic).map(|key| {
        let span = Span::mixed_site().located_at(subset.sort.lit.span());
        let field = child_field(&key.ident, &key.name, false, span);
        quote_spanned! {span=>
            <_ as ::subset::#Private::SortableField>::__check(#field);
        }
    });
    let sum_checks = subset.sums.iter().map(|sum| {
        let span = Span::mixed_site().located_at(sum.lit.span());
        let (bind, parent) = check_parameter(sum.lit.span());
        let mut parent_member = sum.parent.ident.clone();
        parent_member.set_span(sum.lit.span());
        let field = child_field(&sum.child.child_ident, &sum.child.child, true, span);
        quote_spanned! {span=>
            {
                #bind
                <_ as ::subset::#Private::SumField<_>>::__check(
                    #field,
                    &(*#parent).#parent_member,
                );
            }
        }
    });
    let filter_check = subset.filter.map(|filter| {
        let span = Span::mixed_site().located_at(filter.lit.span());
        let field = child_field(&filter.ident, &filter.field, true, span);
        quote_spanned! {span=>
            <_ as ::subset::#Private::FilterField>::__check(#field);
        }
    });
    quote! {
        #count_check
        #(#sort_checks)*
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
        quote!(::subset::#Private::FieldName { rust: #rust, bson: #bson })
    });
    let unstored = child.unstored.iter().map(|(field, attr)| {
        let rust = &field.rust_name;
        quote!((#rust, #attr))
    });
    // A preview stores nothing itself: what it embeds is its full type's stored fields, with the
    // full type's `skip_serializing_if` and `with`.
    let altered = match child.full {
        Some(full) => quote!({
            use ::subset::#Private::DescribedFallback as _;
            ::subset::#Private::Described::<#full>::ALTERED
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
    let stored_consts = stored_consts(child);
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
            impl #plain_impl ::subset::#Private::FieldOf<#ty, #index, true> for #ident #plain_ty #plain_where {
                // The type's values if it is a `SortableField` (a sort key's type is checked where
                // the parent names it).
                const SORT_VALUES: ::subset::#Private::SortValues = {
                    #[allow(unused_imports)]
                    use ::subset::#Private::IdFallback as _;
                    ::subset::#Private::Probe::<#ty>::VALUES
                };
            }
        }
    });
    let full_of = quote! {
        #[automatically_derived]
        impl #plain_impl ::subset::#Private::FullOf<true> for #ident #plain_ty #plain_where {
            type Full = #full;
        }
    };
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::subset::#Private::Child for #ident #ty_generics #where_clause {
                type Id = #id_ty;
                type Full = #full;
                const FIELDS: &'static [::subset::#Private::FieldName] = &[#(#fields),*];
                #embed
                // The `_id` type's values if it is a `SortableField`, else any `_id`.
                const ID_VALUES: ::subset::#Private::SortValues = {
                    use ::subset::#Private::IdFallback as _;
                    ::subset::#Private::Probe::<#id_ty>::VALUES
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
        #stored_consts
    }
}

/// Each stored field's type under the name of its BSON name ([`stored_const`]), as visible as
/// the field: what a generic parent finds the type of its key field by.
fn stored_consts(child: &Child<'_>) -> TokenStream {
    let ident = child.cont.ident;
    let (impl_generics, ty_generics, where_clause) = child.cont.generics.split_for_impl();
    let consts = child.fields.iter().map(|field| {
        let (vis, ty) = (field.vis, field.ty);
        let name = stored_const(&field.bson_name, Span::call_site());
        quote! {
            #[doc(hidden)]
            #vis const #name: ::subset::#Private::TypeOf<#ty> = ::subset::#Private::TypeOf::NEW;
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
            quote!(::subset::#Private::patch::Identity)
        } else if reformed {
            quote!(::subset::#Private::patch::Reformed)
        } else {
            quote!(::subset::#Private::patch::Mutable)
        };
        let doc = format!(
            "The field `{}` (stored as `{bson}`), for `Children::patch`.",
            field.rust_name
        );
        quote! {
            #[doc = #doc]
            #vis const #name: ::subset::#Private::patch::Field<Self, #ty, #access> =
                ::subset::#Private::patch::Field::__new(#bson);
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
    let mut checks = ConstChecks {
        defer: !cont.generics.params.is_empty(),
        ..ConstChecks::default()
    };
    let not_preview = format!(
        "`{full_name}` is itself a preview: `preview_of` names the full child type, the one stored \
         in the child collection, which is the type `{full_name}` names in its own `preview_of`"
    );
    checks.message(
        quote!(::subset::#Private::Described::<#full>::EMBED.is_some()),
        &not_preview,
        full_span,
    );
    // Without type parameters, the full type's field is found by its index in its `FIELDS`, and
    // a name it lacks is reported in constant evaluation, with the closest; with them, which no
    // constant can name, by accessing it, and a name it lacks is rustc's "no field" error.
    let by_index = cont.generics.params.is_empty();
    let embed = child
        .fields
        .iter()
        .map(|field| {
            let rust = &field.rust_name;
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
            checks.reason(
                quote! {
                    ::subset::#Private::preview_problem(
                        ::subset::#Private::Described::<#full>::FIELDS,
                        ::subset::#Private::Described::<#full>::UNSTORED,
                        ::subset::#Private::Described::<#full>::ALTERED,
                        #rust,
                        #bson,
                        #renamed,
                        #unstored,
                        #sometimes,
                        #reformed,
                    )
                },
                span,
            );
            if by_index {
                checks.problem(
                    quote! {
                        ::subset::#Private::preview_unknown(
                            ::subset::#Private::Described::<#full>::IS_CHILD,
                            ::subset::#Private::Described::<#full>::FIELDS,
                            ::subset::#Private::Described::<#full>::UNSTORED,
                            #rust,
                            ::subset::#Private::Described::<#full>::NAME,
                        )
                    },
                    span,
                );
            }
            quote!(::subset::#Private::FieldName { rust: #rust, bson: #bson })
        })
        .collect::<Vec<_>>();

    let embed = quote!(::core::option::Option::Some(&[#(#embed),*]));
    let (embed, const_items) = checks.place(embed);
    let embed = quote! {
        // The fields an embedded preview keeps: `FIELDS`, each checked against the full type.
        const EMBED: ::core::option::Option<&'static [::subset::#Private::FieldName]> = #embed;
    };
    let field_checks = child.fields.iter().enumerate().map(|(index, field)| {
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
        let same_type = Ident::new("__subset_same_type", Span::call_site());
        // Another type is `PreviewField`'s message, at the preview field's type.
        let lookup = if by_index {
            // The full type's field, or, where it has none of that name (or is no `Child`,
            // reported once elsewhere), the preview's own: `FullOf<false>` is the preview itself.
            let rust = &field.rust_name;
            let fallback = quote! {
                #[allow(unused_imports)]
                use ::subset::#Private::DescribedFallback as _;
            };
            let found = quote! {
                ::subset::#Private::field_of(
                    ::subset::#Private::Described::<#full>::FIELDS,
                    ::subset::#Private::Described::<#full>::UNSTORED,
                    ::subset::#Private::Described::<#full>::ALTERED,
                    #rust,
                )
            };
            let is_child = quote!(::subset::#Private::Described::<#full>::IS_CHILD);
            let index = Literal::usize_unsuffixed(index);
            quote_spanned! {at_name=>
                let #full_field = ::subset::#Private::field_at::<
                    <#ident #ty_generics as ::subset::#Private::FullOf<{
                        #fallback
                        ::subset::#Private::field_found(#is_child, #found)
                    }>>::Full,
                    _,
                    {
                        #fallback
                        if ::subset::#Private::field_found(#is_child, #found) {
                            ::subset::#Private::field_index(#found)
                        } else {
                            #index
                        }
                    },
                    true,
                >();
            }
        } else {
            quote_spanned! {at_name=>
                let #full_field = &(*#full_param).#name_member;
            }
        };
        let compare = quote_spanned! {at_ty=>
            #same_type(#full_field, &(*#preview_param).#ty_member);
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
            // The full type's field comes first: with the preview's not yet known, the one impl
            // of `PreviewField` cannot turn a mismatch into rustc's "mismatched types" before
            // the bound is checked.
            fn __subset_same_type<F: ?::core::marker::Sized, P>(_: &F, _: &P)
            where
                P: ::subset::#Private::PreviewField<F> + ?::core::marker::Sized,
            {
            }
            #(#field_checks)*
        }

        #const_items
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
        #ident #ty_generics: ::subset::#Private::serde::Serialize
            + ::subset::#Private::serde::de::DeserializeOwned
            + ::core::marker::Send
            + ::core::marker::Sync
            + ::core::marker::Unpin
            + 'static
    });
    for child_ty in child_types {
        where_clause
            .predicates
            .push(parse_quote!(#child_ty: ::subset::#Private::Child));
    }
    generics
}
