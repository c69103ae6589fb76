//! Reads the parts of `#[serde(...)]` that decide a field's BSON name: `rename`, `rename_all`,
//! `skip`, `skip_serializing`, `skip_deserializing` and `flatten`.
//!
//! Malformed serde attributes are left for serde's own derive to report: reporting them here too
//! would show every serde mistake twice. Every other serde key is parsed past.

use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, ExprLit, Lit, Meta, Token};

use crate::case::RenameRule;

/// Container-level serde settings.
#[derive(Default)]
pub(crate) struct Container {
    /// `rename_all = "..."` or `rename_all(serialize = "...")`.
    pub(crate) rename_all: Option<RenameRule>,
}

/// Field-level serde settings.
#[derive(Default)]
pub(crate) struct Field {
    /// `rename = "..."` or `rename(serialize = "...")`.
    pub(crate) rename: Option<String>,
    /// `skip` or `skip_serializing`: the field is never written.
    pub(crate) skip_serializing: bool,
    /// `skip` or `skip_deserializing`: the field is never read.
    pub(crate) skip_deserializing: bool,
    /// `flatten`: the field has no name of its own.
    pub(crate) flatten: bool,
}

impl Container {
    pub(crate) fn from_attrs(attrs: &[Attribute]) -> Self {
        let mut container = Container::default();
        for meta in serde_metas(attrs) {
            if meta.path().is_ident("rename_all") {
                if let Some(rule) = serialize_name(&meta).and_then(|n| RenameRule::from_name(&n)) {
                    container.rename_all = Some(rule);
                }
            }
        }
        container
    }
}

impl Field {
    pub(crate) fn from_attrs(attrs: &[Attribute]) -> Self {
        let mut field = Field::default();
        for meta in serde_metas(attrs) {
            let path = meta.path();
            if path.is_ident("rename") {
                if let Some(name) = serialize_name(&meta) {
                    field.rename = Some(name);
                }
            } else if path.is_ident("skip") {
                field.skip_serializing = true;
                field.skip_deserializing = true;
            } else if path.is_ident("skip_serializing") {
                field.skip_serializing = true;
            } else if path.is_ident("skip_deserializing") {
                field.skip_deserializing = true;
            } else if path.is_ident("flatten") {
                field.flatten = true;
            }
        }
        field
    }

    /// The serde key that stops the field from round-tripping under its own name, if any.
    pub(crate) fn round_trip_blocker(&self) -> Option<&'static str> {
        match (self.skip_serializing, self.skip_deserializing) {
            (true, true) => Some("skip"),
            (true, false) => Some("skip_serializing"),
            (false, true) => Some("skip_deserializing"),
            (false, false) => self.flatten.then_some("flatten"),
        }
    }

    /// The field's name in the stored document, as serde serializes it.
    pub(crate) fn bson_name(&self, rust_name: &str, rename_all: Option<RenameRule>) -> String {
        match (&self.rename, rename_all) {
            (Some(name), _) => name.clone(),
            (None, Some(rule)) => rule.apply_to_field(rust_name),
            (None, None) => rust_name.to_owned(),
        }
    }
}

/// Every `key`, `key = value` and `key(...)` item of every `#[serde(...)]` attribute.
fn serde_metas(attrs: &[Attribute]) -> Vec<Meta> {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("serde"))
        .filter_map(|attr| {
            attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .ok()
        })
        .flatten()
        .collect()
}

/// The serialize-side name of `key = "name"` or `key(serialize = "name", deserialize = "...")`.
fn serialize_name(meta: &Meta) -> Option<String> {
    match meta {
        Meta::NameValue(nv) => string_value(&nv.value),
        Meta::List(list) => list
            .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            .ok()?
            .into_iter()
            .find_map(|inner| match inner {
                Meta::NameValue(nv) if nv.path.is_ident("serialize") => string_value(&nv.value),
                _ => None,
            }),
        Meta::Path(_) => None,
    }
}

fn string_value(expr: &Expr) -> Option<String> {
    match crate::attr::ungroup(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.value()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn field(attrs: Vec<Attribute>) -> Field {
        Field::from_attrs(&attrs)
    }

    #[test]
    fn renames() {
        let f = field(vec![parse_quote!(#[serde(rename = "_id")])]);
        assert_eq!(f.bson_name("id", Some(RenameRule::Camel)), "_id");
        let f = field(vec![
            parse_quote!(#[serde(rename(serialize = "a", deserialize = "b"))]),
        ]);
        assert_eq!(f.bson_name("x", None), "a");
        let f = field(vec![parse_quote!(#[serde(rename(deserialize = "b"))])]);
        assert_eq!(f.bson_name("x_y", Some(RenameRule::Camel)), "xY");
    }

    #[test]
    fn other_keys_are_parsed_past() {
        let f = field(vec![parse_quote!(
            #[serde(default, with = "m", skip_serializing_if = "Option::is_none", alias = "z",
                    bound(serialize = "T: Serialize"), rename = "r")]
        )]);
        assert_eq!(f.rename.as_deref(), Some("r"));
        assert!(!f.skip_serializing);
    }

    #[test]
    fn skips() {
        assert!(field(vec![parse_quote!(#[serde(skip)])]).skip_serializing);
        assert!(field(vec![parse_quote!(#[serde(skip_serializing)])]).skip_serializing);
        let f = field(vec![parse_quote!(#[serde(skip_deserializing)])]);
        assert!(!f.skip_serializing && f.skip_deserializing);
    }

    #[test]
    fn rename_all_serialize_side() {
        let c = Container::from_attrs(&[parse_quote!(
            #[serde(rename_all(serialize = "kebab-case", deserialize = "camelCase"))]
        )]);
        assert_eq!(c.rename_all, Some(RenameRule::Kebab));
    }
}
