//! What a derive emits when the input has errors: the `compile_error!`s plus a stub impl, so the
//! user sees our messages and not a cascade of "trait not implemented" or "no associated item"
//! errors from code that uses the type.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, Lit, Token, Type};

use crate::ast::{is_child_candidate, unraw, vec_element};
use crate::attr::{ungroup_type, PREVIEW_OF, SUBSET};
use crate::case::field_to_screaming_snake_case;
use crate::paths::{full_type, Private};
use crate::serde_attr;

/// The errors, a stub `Subset` impl, and a constant for each field that carries `#[subset]` and
/// is a `Vec`.
pub(crate) fn subset(input: &DeriveInput, error: syn::Error) -> TokenStream {
    let errors = error.into_compile_error();
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let fields = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(fields) => fields.named.iter().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };

    // Keep the real `_id` type when one is recognizable, so `parent.id()` still type-checks.
    let rename_all = serde_attr::Container::from_attrs(&input.attrs).rename_all;
    let id = fields.iter().find_map(|field| {
        let ident = field.ident.as_ref()?;
        let serde = serde_attr::Field::from_attrs(&field.attrs);
        let stored = !serde.skip_serializing && !serde.flatten;
        (stored && serde.bson_name(&unraw(ident), rename_all) == "_id")
            .then_some((ident, &field.ty))
    });
    let (id_ty, id_body) = match id {
        Some((member, ty)) => (quote!(#ty), quote!(&self.#member)),
        None => (quote!(()), quote!(&())),
    };

    let vis = &input.vis;
    let consts = fields
        .iter()
        .filter(|field| field.attrs.iter().any(|a| a.path().is_ident(SUBSET)))
        .filter_map(|field| {
            let name = field_to_screaming_snake_case(&unraw(field.ident.as_ref()?));
            let name = syn::parse_str::<Ident>(&name).ok()?;
            let child_ty = vec_element(&field.ty)?;
            Some((name, child_ty))
        })
        .enumerate()
        .map(|(index, (name, child_ty))| {
            let new =
                quote_spanned! {child_ty.span()=> ::subset::#Private::SubsetField::__new(#index)};
            // What it will be once fixed; a field that holds no child type keeps its element
            // type, so that no error about it being no `Child` adds to the derive's.
            let full = if is_child_candidate(child_ty) {
                full_type(child_ty)
            } else {
                quote!(#child_ty)
            };
            quote! {
                #[doc(hidden)]
                #vis const #name: ::subset::#Private::SubsetField<Self, #full> = #new;
            }
        });

    quote! {
        #errors
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::subset::#Private::Subset for #ident #ty_generics #where_clause {
                type Id = #id_ty;
                const COLLECTION: &'static ::core::primitive::str = "";
                const SUBSETS: &'static [::subset::#Private::SubsetSpec] = &[];
                fn id(&self) -> &<Self as ::subset::#Private::Subset>::Id {
                    #id_body
                }
            }

            #[automatically_derived]
            impl #impl_generics #ident #ty_generics #where_clause {
                #(#consts)*
            }
        };
    }
}

/// The errors and a stub `Child` impl with no fields, whose `Full` is the type `preview_of`
/// names when that reads as a type other than the struct itself, so that a parent's constant
/// keeps the type it will have once the errors are fixed.
pub(crate) fn child(input: &DeriveInput, error: syn::Error) -> TokenStream {
    let errors = error.into_compile_error();
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let full = preview_of(input).map_or_else(|| quote!(Self), |full| quote!(#full));
    quote! {
        #errors
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::subset::#Private::Child for #ident #ty_generics #where_clause {
                type Id = ();
                type Full = #full;
                const FIELDS: &'static [::subset::#Private::FieldName] = &[];
                const __STUB: ::core::primitive::bool = true;
            }
        };
    }
}

/// The type of the first well-formed `#[subset(preview_of = Type)]`, unless it names the struct
/// itself (the derive reported that, and `Full = Self` is right for it).
fn preview_of(input: &DeriveInput) -> Option<Type> {
    let mut found = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident(SUBSET)) {
        // Errors were reported by the derive; here a malformed attribute just names no type.
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident(PREVIEW_OF) && found.is_none() && !meta.input.peek(Lit) {
                found = meta.value()?.parse::<Type>().ok();
            } else if meta.input.peek(Token![=]) {
                meta.value()?.parse::<syn::Expr>()?;
            } else if meta.input.peek(syn::token::Paren) {
                meta.input.parse::<proc_macro2::TokenTree>()?;
            }
            Ok(())
        });
    }
    found.filter(|ty| match ungroup_type(ty) {
        Type::Path(path) => path
            .path
            .get_ident()
            .is_none_or(|i| i != "Self" && *i != input.ident),
        _ => false,
    })
}
