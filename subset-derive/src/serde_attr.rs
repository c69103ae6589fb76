//! Reads the parts of `#[serde(...)]` that decide a field's BSON name and whether, and in what
//! form, it is stored: `rename`, `rename_all`, `skip`, `skip_serializing`, `skip_deserializing`,
//! `skip_serializing_if`, `flatten`, `default`, `with`, `serialize_with` and `deserialize_with`.
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
    /// `rename_all = "..."` or `rename_all(deserialize = "...")`: the names fields are read by.
    pub(crate) read_rename_all: Option<RenameRule>,
    /// `default` or `default = "..."`: every missing field reads as its default.
    pub(crate) default: bool,
    /// `deny_unknown_fields`, where it is written.
    pub(crate) deny_unknown_fields: Option<proc_macro2::Span>,
}

/// Field-level serde settings.
#[derive(Default)]
pub(crate) struct Field {
    /// `rename = "..."` or `rename(serialize = "...")`.
    pub(crate) rename: Option<String>,
    /// `rename = "..."` or `rename(deserialize = "...")`: the name the field is read by.
    pub(crate) read_rename: Option<String>,
    /// `alias = "..."`, each: other names the field is read by.
    pub(crate) aliases: Vec<String>,
    /// `skip` or `skip_serializing`: the field is never written.
    pub(crate) skip_serializing: bool,
    /// `skip` or `skip_deserializing`: the field is never read.
    pub(crate) skip_deserializing: bool,
    /// `flatten`: the field has no name of its own.
    pub(crate) flatten: bool,
    /// `skip_serializing_if = "..."`: the field is left out when the function says so.
    pub(crate) skip_serializing_if: bool,
    /// `default` or `default = "..."`: a missing field reads as its default.
    pub(crate) default: bool,
    /// `with = "..."`: the field is written and read by a module's functions.
    pub(crate) with: bool,
    /// `serialize_with = "..."`: the field is written by a function.
    pub(crate) serialize_with: bool,
    /// `deserialize_with = "..."`: the field is read by a function.
    pub(crate) deserialize_with: bool,
}

impl Container {
    pub(crate) fn from_attrs(attrs: &[Attribute]) -> Self {
        let mut container = Container::default();
        for meta in serde_metas(attrs) {
            if meta.path().is_ident("rename_all") {
                if let Some(rule) = serialize_name(&meta).and_then(|n| RenameRule::from_name(&n)) {
                    container.rename_all = Some(rule);
                }
                if let Some(rule) = deserialize_name(&meta).and_then(|n| RenameRule::from_name(&n))
                {
                    container.read_rename_all = Some(rule);
                }
            } else if meta.path().is_ident("default") {
                container.default = true;
            } else if meta.path().is_ident("deny_unknown_fields") {
                container.deny_unknown_fields = Some(syn::spanned::Spanned::span(meta.path()));
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
                if let Some(name) = deserialize_name(&meta) {
                    field.read_rename = Some(name);
                }
            } else if path.is_ident("alias") {
                if let Some(name) = serialize_name(&meta) {
                    field.aliases.push(name);
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
            } else if path.is_ident("skip_serializing_if") {
                field.skip_serializing_if = true;
            } else if path.is_ident("default") {
                field.default = true;
            } else if path.is_ident("with") {
                field.with = true;
            } else if path.is_ident("serialize_with") {
                field.serialize_with = true;
            } else if path.is_ident("deserialize_with") {
                field.deserialize_with = true;
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

    /// The serde key that keeps a stored field from being stored always, or as its Rust type:
    /// `skip_serializing_if`, `with` or `serialize_with`.
    pub(crate) fn altered_by(&self) -> Option<&'static str> {
        if self.skip_serializing_if {
            Some("skip_serializing_if")
        } else if self.with {
            Some("with")
        } else if self.serialize_with {
            Some("serialize_with")
        } else {
            None
        }
    }

    /// The serde key that makes the field read back in another form than its Rust type's:
    /// `with` or `deserialize_with`.
    pub(crate) fn read_by(&self) -> Option<&'static str> {
        if self.with {
            Some("with")
        } else if self.deserialize_with {
            Some("deserialize_with")
        } else {
            None
        }
    }

    /// Whether serde reads the field back under `stored`, the name it stores it under: its
    /// deserialize-side name (after `rename` and `rename_all`) or one of its aliases.
    pub(crate) fn reads_name(
        &self,
        stored: &str,
        rust_name: &str,
        read_rename_all: Option<RenameRule>,
    ) -> bool {
        let read = match (&self.read_rename, read_rename_all) {
            (Some(name), _) => name.clone(),
            (None, Some(rule)) => rule.apply_to_field(rust_name),
            (None, None) => rust_name.to_owned(),
        };
        read == stored || self.aliases.iter().any(|alias| alias == stored)
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
    side_name(meta, "serialize")
}

/// The deserialize-side name of `key = "name"` or `key(serialize = "...", deserialize = "name")`.
fn deserialize_name(meta: &Meta) -> Option<String> {
    side_name(meta, "deserialize")
}

fn side_name(meta: &Meta, side: &str) -> Option<String> {
    match meta {
        Meta::NameValue(nv) => string_value(&nv.value),
        Meta::List(list) => list
            .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            .ok()?
            .into_iter()
            .find_map(|inner| match inner {
                Meta::NameValue(nv) if nv.path.is_ident(side) => string_value(&nv.value),
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
        assert!(f.default && f.with && f.skip_serializing_if);
        assert_eq!(f.altered_by(), Some("skip_serializing_if"));
        assert_eq!(f.read_by(), Some("with"));
    }

    #[test]
    fn stored_form() {
        let f = field(vec![parse_quote!(#[serde(serialize_with = "s")])]);
        assert_eq!(
            (f.altered_by(), f.read_by()),
            (Some("serialize_with"), None)
        );
        let f = field(vec![
            parse_quote!(#[serde(deserialize_with = "d", default = "z")]),
        ]);
        assert_eq!(
            (f.altered_by(), f.read_by()),
            (None, Some("deserialize_with"))
        );
        assert!(f.default);
        let c = Container::from_attrs(&[parse_quote!(#[serde(default)])]);
        assert!(c.default);
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
        assert_eq!(c.read_rename_all, Some(RenameRule::Camel));
    }

    #[test]
    fn read_back_names() {
        let f = field(vec![
            parse_quote!(#[serde(rename(serialize = "stars", deserialize = "rating"))]),
        ]);
        assert!(!f.reads_name("stars", "rating", None));
        let f = field(vec![
            parse_quote!(#[serde(rename(serialize = "stars", deserialize = "rating"))]),
            parse_quote!(#[serde(alias = "stars")]),
        ]);
        assert!(f.reads_name("stars", "rating", None));
        let f = field(vec![parse_quote!(#[serde(rename = "_id")])]);
        assert!(f.reads_name("_id", "id", Some(RenameRule::Camel)));
        assert!(field(vec![]).reads_name("createdAt", "created_at", Some(RenameRule::Camel)));
        assert!(!field(vec![]).reads_name("created-at", "created_at", Some(RenameRule::Camel)));
    }
}
