//! Borrowed views of the derive input, with attributes parsed: what the struct is, its fields,
//! their BSON names and their `#[subset]` settings.

use proc_macro2::Ident;
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
    /// `#[subset(...)]` on the struct (always empty for a child).
    pub(crate) attrs: attr::Container<'a>,
    pub(crate) fields: Vec<Field<'a>>,
}

/// One named field.
pub(crate) struct Field<'a> {
    pub(crate) ident: &'a Ident,
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
}

impl<'a> Container<'a> {
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
            Derive::Child => attr::Container::default(),
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
                            collection: vec_element(&field.ty).and_then(type_name).map_or_else(
                                || "children".to_owned(),
                                |n| collection_suggestion(&n),
                            ),
                            key: parent_ex.key.clone(),
                        };
                        attr::field(ctxt, &field.attrs, &child_ex)
                    }
                    Derive::Child => None,
                };
                Some(Field {
                    ident,
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
