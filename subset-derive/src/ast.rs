//! Borrowed views of the derive input, with attributes parsed: what the struct is, its fields,
//! their BSON names and their `#[subset]` settings.

use proc_macro2::{Ident, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{
    Data, DataStruct, DeriveInput, Fields, GenericArgument, Generics, PathArguments, Type,
    Visibility,
};

use crate::attr::{self, Examples};
use crate::case::{collection_suggestion, type_to_snake_case};
use crate::ctxt::Ctxt;
use crate::serde_attr;

/// Which derive is reading the input.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Derive {
    /// `#[derive(Subset)]` on a parent.
    Parent,
    /// `#[derive(Child)]` on a child.
    Child,
}

impl Derive {
    fn name(self) -> &'static str {
        match self {
            Derive::Parent => "Subset",
            Derive::Child => "Child",
        }
    }
}

/// A struct with named fields.
pub(crate) struct Container<'a> {
    pub(crate) ident: &'a Ident,
    /// The struct's name without `r#`.
    pub(crate) name: String,
    pub(crate) vis: &'a Visibility,
    pub(crate) generics: &'a Generics,
    /// `#[subset(...)]` on the struct: `collection` for a parent, `preview_of` for a child.
    pub(crate) attrs: attr::Container<'a>,
    /// `#[serde(...)]` on the struct.
    pub(crate) serde: serde_attr::Container,
    pub(crate) fields: Vec<Field<'a>>,
}

/// One named field.
pub(crate) struct Field<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) vis: &'a Visibility,
    pub(crate) ty: &'a Type,
    /// The field's Rust name without `r#`.
    pub(crate) rust_name: String,
    /// The field's name in the stored document, after serde's renames.
    pub(crate) bson_name: String,
    pub(crate) serde: serde_attr::Field,
    /// `#[subset(...)]` on the field (always `None` for a child).
    pub(crate) subset: Option<attr::Field<'a>>,
}

impl Field<'_> {
    /// Whether the field appears under its own name in the serialized document.
    pub(crate) fn is_serialized(&self) -> bool {
        !self.serde.skip_serializing && !self.serde.flatten
    }

    /// Whether the field reads a document without it: it is an `Option` (serde reads a missing
    /// one as `None`) or has a default (its own, or the struct's `#[serde(default)]`), and no
    /// `deserialize_with` that would be asked for a value that is not there.
    pub(crate) fn reads_missing(&self, container: &serde_attr::Container) -> bool {
        self.serde.default
            || container.default
            || (is_option(self.ty) && self.serde.read_by().is_none())
    }
}

/// Whether `ty` is written as an `Option` (`Option<T>`, `std::option::Option<T>`).
pub(crate) fn is_option(ty: &Type) -> bool {
    match ty {
        Type::Group(group) => is_option(&group.elem),
        Type::Paren(paren) => is_option(&paren.elem),
        Type::Path(path) if path.qself.is_none() => path.path.segments.last().is_some_and(|last| {
            last.ident == "Option" && matches!(last.arguments, PathArguments::AngleBracketed(_))
        }),
        _ => false,
    }
}

/// Whether `tokens` hold one of `idents`, at any depth.
fn mentions(tokens: TokenStream, idents: &[&Ident]) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => idents.iter().any(|param| **param == ident),
        TokenTree::Group(group) => mentions(group.stream(), idents),
        _ => false,
    })
}

impl<'a> Container<'a> {
    /// Whether `ty` names one of the struct's type or const parameters: then no item outside
    /// the struct's impls can name it.
    pub(crate) fn mentions_parameters(&self, ty: &Type) -> bool {
        let params: Vec<&Ident> = self
            .generics
            .type_params()
            .map(|param| &param.ident)
            .chain(self.generics.const_params().map(|param| &param.ident))
            .collect();
        !params.is_empty() && mentions(ty.to_token_stream(), &params)
    }

    /// Reads the input; reports and returns `None` if it is not a struct with named fields.
    pub(crate) fn from_ast(ctxt: &Ctxt, input: &'a DeriveInput, derive: Derive) -> Option<Self> {
        let fields = named_fields(ctxt, input, derive)?;
        let name = unraw(&input.ident);
        let parent_ex = Examples {
            collection: collection_suggestion(&name),
            key: default_key(&name),
        };
        let attrs = match derive {
            Derive::Parent => attr::container(ctxt, &input.attrs, &parent_ex),
            Derive::Child => {
                let full = name.strip_suffix("Preview").filter(|n| !n.is_empty());
                attr::child_container(ctxt, &input.attrs, full.unwrap_or("Review"))
            }
        };
        let serde_cont = serde_attr::Container::from_attrs(&input.attrs);
        let fields = fields
            .named
            .iter()
            .filter_map(|field| {
                let ident = field.ident.as_ref()?;
                let rust_name = unraw(ident);
                let serde = serde_attr::Field::from_attrs(&field.attrs);
                let bson_name = serde.bson_name(&rust_name, serde_cont.rename_all);
                let subset = match derive {
                    Derive::Parent => {
                        let child_ex = Examples {
                            collection: child_guess(&field.ty).and_then(type_name).map_or_else(
                                || "children".to_owned(),
                                |n| collection_suggestion(&n),
                            ),
                            key: parent_ex.key.clone(),
                        };
                        attr::field(ctxt, &field.attrs, &child_ex)
                    }
                    Derive::Child => {
                        if let Some(attr) = field.attrs.iter().find(|a| a.path().is_ident(attr::SUBSET)) {
                            ctxt.error_spanned_by(
                                attr,
                                "`#[subset]` has no keys on a child's field: a preview names its full type on the struct, `#[subset(preview_of = Review)]`",
                            );
                        }
                        None
                    }
                };
                Some(Field {
                    ident,
                    vis: &field.vis,
                    ty: &field.ty,
                    rust_name,
                    bson_name,
                    serde,
                    subset,
                })
            })
            .collect();
        Some(Container {
            ident: &input.ident,
            name,
            vis: &input.vis,
            generics: &input.generics,
            attrs,
            serde: serde_cont,
            fields,
        })
    }

    /// The field stored as `_id`, if any.
    pub(crate) fn id_field(&self) -> Option<&Field<'a>> {
        self.fields
            .iter()
            .find(|f| f.is_serialized() && f.bson_name == "_id")
    }
}

/// The named fields of a struct, or an error spanned at the keyword of any other kind of item.
fn named_fields<'a>(
    ctxt: &Ctxt,
    input: &'a DeriveInput,
    derive: Derive,
) -> Option<&'a syn::FieldsNamed> {
    let name = unraw(&input.ident);
    let example = format!("`struct {name} {{ #[serde(rename = \"_id\")] id: ObjectId, … }}`");
    let (token, kind): (&dyn quote::ToTokens, &str) = match &input.data {
        Data::Struct(DataStruct {
            fields: Fields::Named(fields),
            ..
        }) => return Some(fields),
        Data::Struct(DataStruct {
            struct_token,
            fields: Fields::Unnamed(_),
            ..
        }) => (struct_token, "a tuple struct"),
        Data::Struct(DataStruct { struct_token, .. }) => (struct_token, "a unit struct"),
        Data::Enum(data) => (&data.enum_token, "an enum"),
        Data::Union(data) => (&data.union_token, "a union"),
    };
    ctxt.error_spanned_by(
        token,
        format!(
            "`#[derive({})]` needs a struct with named fields, not {kind}: {example}",
            derive.name()
        ),
    );
    None
}

/// `Review` for `Vec<Review>` (also `std::vec::Vec<Review>`).
pub(crate) fn vec_element(ty: &Type) -> Option<&Type> {
    let path = match ty {
        Type::Path(path) if path.qself.is_none() => &path.path,
        Type::Group(group) => return vec_element(&group.elem),
        _ => return None,
    };
    let last = path.segments.last()?;
    if last.ident != "Vec" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter();
    match (types.next(), types.next()) {
        (Some(GenericArgument::Type(elem)), None) => Some(elem),
        _ => None,
    }
}

/// Std types that hold other values: never a child type themselves, and what a subset field
/// holds is in their type arguments.
const WRAPPERS: &[&str] = &[
    "Option", "Box", "Vec", "VecDeque", "Rc", "Arc", "Cow", "HashSet", "BTreeSet", "HashMap",
    "BTreeMap", "Result",
];

/// Maps, whose last type argument is the value.
const MAPS: &[&str] = &["HashMap", "BTreeMap"];

/// Types that are never a child type and hold none.
const SCALARS: &[&str] = &[
    "bool", "char", "str", "String", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
    "u32", "u64", "u128", "usize", "f32", "f64",
];

/// The child type a field type most likely holds, for suggestions: `Review` in `Vec<Review>`,
/// `Option<Vec<Review>>`, `Vec<Option<Review>>`, `Box<[Review]>`, `[Review; 5]`, `&[Review]`,
/// `HashSet<Review>` or `HashMap<String, Review>`, and a plain named type (`Review`) itself.
/// `None` when the type gives no hint (`String`, a tuple, `Result<A, B>`): messages then name
/// no child type rather than a wrong one.
pub(crate) fn child_guess(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Group(group) => child_guess(&group.elem),
        Type::Paren(paren) => child_guess(&paren.elem),
        Type::Array(array) => child_guess(&array.elem),
        Type::Slice(slice) => child_guess(&slice.elem),
        Type::Reference(reference) => child_guess(&reference.elem),
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            let name = unraw(&last.ident);
            let args: Vec<&Type> = match &last.arguments {
                PathArguments::AngleBracketed(args) => args
                    .args
                    .iter()
                    .filter_map(|arg| match arg {
                        GenericArgument::Type(ty) => Some(ty),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            if WRAPPERS.contains(&name.as_str()) && !args.is_empty() {
                match args.as_slice() {
                    [inner] => child_guess(inner),
                    [_, value] if MAPS.contains(&name.as_str()) => child_guess(value),
                    _ => None,
                }
            } else if SCALARS.contains(&name.as_str()) && args.is_empty() {
                None
            } else {
                Some(ty)
            }
        }
        _ => None,
    }
}

/// Whether `ty` can be a child type: [`child_guess`] takes it as it is.
pub(crate) fn is_child_candidate(ty: &Type) -> bool {
    let mut bare = ty;
    while let Type::Group(syn::TypeGroup { elem, .. }) | Type::Paren(syn::TypeParen { elem, .. }) =
        bare
    {
        bare = elem;
    }
    child_guess(ty).is_some_and(|guess| std::ptr::eq(guess, bare))
}

/// A type as the user would write it, for messages: `HashMap<String, Review>`, `[Review; 5]`.
pub(crate) fn show_type(ty: &Type) -> String {
    let mut shown = quote::quote!(#ty).to_string();
    for (spaced, tight) in [
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ::", "::"),
        (":: ", "::"),
        (" ,", ","),
        (" ;", ";"),
        ("& ", "&"),
    ] {
        shown = shown.replace(spaced, tight);
    }
    shown
}

/// The last path segment of a type, for suggestions.
pub(crate) fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(path) => path.path.segments.last().map(|s| unraw(&s.ident)),
        _ => None,
    }
}

/// An identifier without its `r#` prefix, as serde names fields.
pub(crate) fn unraw(ident: &Ident) -> String {
    let name = ident.to_string();
    match name.strip_prefix("r#") {
        Some(stripped) => stripped.to_owned(),
        None => name,
    }
}

/// The default `key`: `Product` → `product_id`.
pub(crate) fn default_key(parent_name: &str) -> String {
    format!("{}_id", type_to_snake_case(parent_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guess(ty: Type) -> Option<String> {
        child_guess(&ty).map(show_type)
    }

    #[test]
    fn child_guesses_name_the_child_or_nothing() {
        let review = Some("Review".to_owned());
        assert_eq!(guess(syn::parse_quote!(Vec<Review>)), review);
        assert_eq!(guess(syn::parse_quote!(Option<Vec<Review>>)), review);
        assert_eq!(guess(syn::parse_quote!(Box<Vec<Review>>)), review);
        assert_eq!(guess(syn::parse_quote!(Vec<Option<Review>>)), review);
        assert_eq!(guess(syn::parse_quote!(Vec<Vec<Review>>)), review);
        assert_eq!(guess(syn::parse_quote!([Review; 5])), review);
        assert_eq!(guess(syn::parse_quote!(&'static [Review])), review);
        assert_eq!(guess(syn::parse_quote!(Box<[Review]>)), review);
        assert_eq!(
            guess(syn::parse_quote!(std::collections::HashSet<Review>)),
            review
        );
        assert_eq!(guess(syn::parse_quote!(HashMap<String, Review>)), review);
        assert_eq!(guess(syn::parse_quote!(Review)), review);
        assert_eq!(
            guess(syn::parse_quote!(Option<Vec<Review<T>>>)),
            Some("Review<T>".to_owned())
        );
        assert_eq!(guess(syn::parse_quote!(String)), None);
        let shown = |ty: Type| show_type(&ty);
        assert_eq!(
            shown(syn::parse_quote!(std::collections::HashMap<String, Vec<Review>>)),
            "std::collections::HashMap<String, Vec<Review>>"
        );
        assert_eq!(
            shown(syn::parse_quote!(&'static [Review; 5])),
            "&'static [Review; 5]"
        );
        assert_eq!(guess(syn::parse_quote!(Vec<String>)), None);
        assert_eq!(guess(syn::parse_quote!(Result<Review, String>)), None);
        assert_eq!(guess(syn::parse_quote!((Review, Review))), None);
    }

    #[test]
    fn child_candidates() {
        assert!(is_child_candidate(&syn::parse_quote!(Review)));
        assert!(is_child_candidate(&syn::parse_quote!(crate::Review<T>)));
        // A user type that happens to share a std name, without type arguments.
        assert!(is_child_candidate(&syn::parse_quote!(Box)));
        assert!(!is_child_candidate(&syn::parse_quote!(Option<Review>)));
        assert!(!is_child_candidate(&syn::parse_quote!(String)));
        assert!(!is_child_candidate(&syn::parse_quote!([Review; 2])));
    }
}
