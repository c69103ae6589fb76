//! Parses `#[subset(...)]` attributes with `syn::Meta::parse_nested_meta`, one branch per key.
//!
//! Rules about a single value (the range of `keep`, the syntax of `sort`, what MongoDB accepts as
//! a collection name) are checked here, where the literal's span is at hand. The rules themselves,
//! and their messages, are `subset_spec`'s, shared with the runtime's `SpecBuilder`. Rules that
//! involve several keys or fields live in `valid.rs`.

use proc_macro2::{Ident, Span, TokenTree};
use subset_spec::{NameError, NameRole, SortError, KEEP_RULE};
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, ExprLit, ExprUnary, Lit, LitStr, Path, Token, Type, UnOp};

use crate::ctxt::Ctxt;

/// The attribute's name: `#[subset(...)]`.
pub(crate) const SUBSET: &str = "subset";
/// Container key: the parent collection.
pub(crate) const COLLECTION: &str = "collection";
/// Field key: the child collection.
pub(crate) const CHILD: &str = "child";
/// Field key: how many children stay embedded.
pub(crate) const KEEP: &str = "keep";
/// Field key: the order that picks the embedded children.
pub(crate) const SORT: &str = "sort";
/// Field key: the child field holding the parent's `_id`.
pub(crate) const KEY: &str = "key";
/// Field key: the parent field counting the children.
pub(crate) const COUNT: &str = "count";
/// Field key: parent fields holding the sum of a child field.
pub(crate) const SUM: &str = "sum";
/// Field key: the `bool` child field a filtered view keeps children by.
pub(crate) const FILTER: &str = "filter";
/// Child container key: the full child type a preview embeds some fields of.
pub(crate) const PREVIEW_OF: &str = "preview_of";

const CONTAINER_KEYS: &[&str] = &[COLLECTION];
const CHILD_KEYS: &[&str] = &[PREVIEW_OF];
const FIELD_KEYS: &[&str] = &[CHILD, KEEP, SORT, KEY, COUNT, SUM, FILTER];

/// One key's state: whether it was written at all, and its value if that value was valid.
///
/// Keeping "written but invalid" apart from "missing" means an invalid value is reported once, not
/// a second time as a missing key.
pub(crate) struct Given<T> {
    seen: bool,
    value: Option<T>,
}

impl<T> Default for Given<T> {
    fn default() -> Self {
        Given {
            seen: false,
            value: None,
        }
    }
}

impl<T> Given<T> {
    /// Records that the key was written; reports and returns `false` if it already was.
    fn mark(&mut self, ctxt: &Ctxt, path: &Path, key: &str) -> bool {
        if self.seen {
            ctxt.error_spanned_by(
                path,
                format!("duplicate `{key}`: give each `#[subset]` key once"),
            );
            return false;
        }
        self.seen = true;
        true
    }

    /// The key was not written at all.
    pub(crate) fn is_missing(&self) -> bool {
        !self.seen
    }

    /// The valid value, if the key was written with one.
    pub(crate) fn value(&self) -> Option<&T> {
        self.value.as_ref()
    }
}

/// Suggestions built from the user's own names, quoted in messages.
pub(crate) struct Examples {
    /// A collection name for the type at hand (`products`, `reviews`).
    pub(crate) collection: String,
    /// The default `key` for this parent (`product_id`).
    pub(crate) key: String,
}

/// `#[subset(...)]` on the parent struct, or on a child struct.
#[derive(Default)]
pub(crate) struct Container<'a> {
    /// The first `#[subset]` attribute on the struct, if any.
    pub(crate) attr: Option<&'a Attribute>,
    /// The parent collection (parent only).
    pub(crate) collection: Given<LitStr>,
    /// The full child type of a preview (child only).
    pub(crate) preview_of: Given<Type>,
}

/// `#[subset(...)]` on one field of the parent struct.
pub(crate) struct Field<'a> {
    /// The first `#[subset]` attribute on the field.
    pub(crate) attr: &'a Attribute,
    pub(crate) child: Given<LitStr>,
    pub(crate) keep: Given<u32>,
    pub(crate) sort: Given<Sort>,
    pub(crate) key: Given<LitStr>,
    pub(crate) count: Given<LitStr>,
    pub(crate) sum: Given<Sums>,
    pub(crate) filter: Given<Filter>,
    /// Valid keys that an unknown key looked like a typo of.
    pub(crate) misspelled: Vec<&'static str>,
}

/// A parsed `filter = "verified"` or `filter = "!hidden"`.
pub(crate) struct Filter {
    /// The literal, for spans.
    pub(crate) lit: LitStr,
    /// The child's Rust field, without `r#`.
    pub(crate) field: String,
    /// The same name as an identifier spanned at the literal.
    pub(crate) ident: Ident,
    /// `false` for `!field`.
    pub(crate) equals: bool,
}

/// A parsed `sum = "..."`.
pub(crate) struct Sums {
    /// The literal, for spans.
    pub(crate) lit: LitStr,
    pub(crate) pairs: Vec<SumPair>,
}

/// One `parent = child` of a sum list, by Rust field name.
pub(crate) struct SumPair {
    /// The parent's Rust field holding the sum.
    pub(crate) parent: String,
    /// The child's Rust field summed, without `r#`.
    pub(crate) child: String,
    /// The same name as an identifier spanned at the literal, for a child type that names the
    /// parent's parameters, whose check accesses the field by name: rustc's errors then point at
    /// the string.
    pub(crate) child_ident: Ident,
}

/// A parsed `sort = "..."`.
pub(crate) struct Sort {
    /// The literal, for spans and docs.
    pub(crate) lit: LitStr,
    pub(crate) keys: Vec<SortKey>,
}

/// One `field direction` of a sort string.
pub(crate) struct SortKey {
    /// The child's Rust field name, without `r#`.
    pub(crate) name: String,
    /// The same name as an identifier spanned at the sort literal, for a child type that names
    /// the parent's parameters, whose check accesses the field by name: rustc's errors then
    /// point at the string.
    pub(crate) ident: Ident,
    pub(crate) direction: Direction,
}

pub(crate) use subset_spec::Direction;

/// Parses every `#[subset]` attribute on the parent struct.
pub(crate) fn container<'a>(ctxt: &Ctxt, attrs: &'a [Attribute], ex: &Examples) -> Container<'a> {
    let mut cont = Container::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident(SUBSET)) {
        cont.attr.get_or_insert(attr);
        let parsed = attr.parse_nested_meta(|meta| {
            let key = key_name(&meta.path);
            if key.as_deref() == Some(COLLECTION) {
                let expr = meta.value()?.parse::<Expr>()?;
                if !cont.collection.mark(ctxt, &meta.path, COLLECTION) {
                    return Ok(());
                }
                let hint = format!("`#[subset(collection = \"{}\")]`", ex.collection);
                if let Some(lit) = expect_str(ctxt, COLLECTION, &expr, &hint) {
                    let checked = subset_spec::check_collection(NameRole::Collection, &lit.value());
                    if name_ok(ctxt, &lit, checked, &hint) {
                        cont.collection.value = Some(lit);
                    }
                }
                Ok(())
            } else {
                unknown_key(ctxt, &meta.path, key.as_deref(), Place::Container, "", None);
                skip_value(&meta)
            }
        });
        if let Err(err) = parsed {
            ctxt.syn_error(err);
        }
    }
    cont
}

/// Parses every `#[subset]` attribute on a child struct; `full_example` names the full type in
/// messages.
pub(crate) fn child_container<'a>(
    ctxt: &Ctxt,
    attrs: &'a [Attribute],
    full_example: &str,
) -> Container<'a> {
    let mut cont = Container::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident(SUBSET)) {
        cont.attr.get_or_insert(attr);
        let parsed = attr.parse_nested_meta(|meta| {
            let key = key_name(&meta.path);
            if key.as_deref() != Some(PREVIEW_OF) {
                unknown_key(ctxt, &meta.path, key.as_deref(), Place::Child, "", None);
                return skip_value(&meta);
            }
            let value = meta.value()?;
            let hint = format!("`#[subset(preview_of = {full_example})]`");
            // A literal is no type: read it whole to say so, rather than let `Type` fail on it.
            let ty = if value.peek(Lit) {
                let lit = value.parse::<Lit>()?;
                let quotes = if matches!(lit, Lit::Str(_)) {
                    ", without quotes"
                } else {
                    ""
                };
                ctxt.error_spanned_by(
                    &lit,
                    format!("`preview_of` names the full child type{quotes}: {hint}"),
                );
                None
            } else {
                let ty = value.parse::<Type>()?;
                match ungroup_type(&ty) {
                    Type::Path(_) => Some(ty),
                    _ => {
                        ctxt.error_spanned_by(
                            &ty,
                            format!("`preview_of` names the full child type, a struct that derives `subset::Child`, by its path: {hint}"),
                        );
                        None
                    }
                }
            };
            if cont.preview_of.mark(ctxt, &meta.path, PREVIEW_OF) {
                cont.preview_of.value = ty;
            }
            Ok(())
        });
        if let Err(err) = parsed {
            ctxt.syn_error(err);
        }
    }
    cont
}

/// A type passed through a `macro_rules!` fragment arrives wrapped in an invisible group.
pub(crate) fn ungroup_type(mut ty: &Type) -> &Type {
    while let Type::Group(group) = ty {
        ty = &group.elem;
    }
    ty
}

/// Parses the `#[subset]` attributes of one parent field; `None` if it has none.
pub(crate) fn field<'a>(
    ctxt: &Ctxt,
    attrs: &'a [Attribute],
    child_ex: &Examples,
) -> Option<Field<'a>> {
    let mut subset_attrs = attrs.iter().filter(|a| a.path().is_ident(SUBSET));
    let first = subset_attrs.next()?;
    let mut field = Field {
        attr: first,
        child: Given::default(),
        keep: Given::default(),
        sort: Given::default(),
        key: Given::default(),
        count: Given::default(),
        sum: Given::default(),
        filter: Given::default(),
        misspelled: Vec::new(),
    };
    for attr in std::iter::once(first).chain(subset_attrs) {
        if let Err(err) =
            attr.parse_nested_meta(|meta| field_key(ctxt, &mut field, &meta, child_ex))
        {
            ctxt.syn_error(err);
        }
    }
    Some(field)
}

fn field_key(
    ctxt: &Ctxt,
    field: &mut Field<'_>,
    meta: &ParseNestedMeta<'_>,
    ex: &Examples,
) -> syn::Result<()> {
    let key = key_name(&meta.path);
    let Some(known) = key.as_deref().filter(|k| FIELD_KEYS.contains(k)) else {
        unknown_key(
            ctxt,
            &meta.path,
            key.as_deref(),
            Place::Field,
            &ex.collection,
            Some(&mut field.misspelled),
        );
        return skip_value(meta);
    };
    let expr = meta.value()?.parse::<Expr>()?;
    match known {
        CHILD => {
            if field.child.mark(ctxt, &meta.path, CHILD) {
                let hint = format!("`#[subset(child = \"{}\")]`", ex.collection);
                field.child.value = expect_str(ctxt, CHILD, &expr, &hint).filter(|lit| {
                    let checked =
                        subset_spec::check_collection(NameRole::ChildCollection, &lit.value());
                    name_ok(ctxt, lit, checked, &hint)
                });
            }
        }
        KEEP => {
            if field.keep.mark(ctxt, &meta.path, KEEP) {
                field.keep.value = parse_keep(ctxt, &expr);
            }
        }
        SORT => {
            if field.sort.mark(ctxt, &meta.path, SORT) {
                let hint = "`#[subset(sort = \"created_at desc\")]`";
                field.sort.value =
                    expect_str(ctxt, SORT, &expr, hint).and_then(|lit| sort_attr(ctxt, lit));
            }
        }
        KEY => {
            if field.key.mark(ctxt, &meta.path, KEY) {
                let hint = format!("`#[subset(key = \"{}\")]`", ex.key);
                field.key.value = expect_str(ctxt, KEY, &expr, &hint)
                    .filter(|lit| name_ok(ctxt, lit, subset_spec::check_key(&lit.value()), &hint));
            }
        }
        SUM => {
            if field.sum.mark(ctxt, &meta.path, SUM) {
                let hint = "`#[subset(sum = \"rating_total = rating\")]`";
                field.sum.value =
                    expect_str(ctxt, SUM, &expr, hint).and_then(|lit| sum_attr(ctxt, lit));
            }
        }
        FILTER => {
            if field.filter.mark(ctxt, &meta.path, FILTER) {
                let hint = "`#[subset(filter = \"verified\")]`";
                field.filter.value =
                    expect_str(ctxt, FILTER, &expr, hint).and_then(|lit| filter_attr(ctxt, lit));
            }
        }
        _ => {
            if field.count.mark(ctxt, &meta.path, COUNT) {
                let hint = "`#[subset(count = \"total_reviews\")]`";
                field.count.value = expect_str(ctxt, COUNT, &expr, hint);
            }
        }
    }
    Ok(())
}

/// The key as a string when it is a single identifier.
fn key_name(path: &Path) -> Option<String> {
    path.get_ident().map(Ident::to_string)
}

#[derive(Clone, Copy)]
enum Place {
    /// The parent struct.
    Container,
    /// A parent field.
    Field,
    /// A child struct.
    Child,
}

/// Reports an unknown key, listing the keys valid where it was written.
///
/// A key close to a valid one (`subset_spec::closest`) is recorded in `misspelled` (and `collection` on a field
/// as a stand-in for `child`), so that the valid key is not also reported as missing.
fn unknown_key(
    ctxt: &Ctxt,
    path: &Path,
    key: Option<&str>,
    place: Place,
    child_example: &str,
    misspelled: Option<&mut Vec<&'static str>>,
) {
    let (valid, other, here, there) = match place {
        Place::Container => (CONTAINER_KEYS, FIELD_KEYS, "the struct", "a `Vec` field"),
        Place::Field => (FIELD_KEYS, CONTAINER_KEYS, "a field", "the struct"),
        Place::Child => (CHILD_KEYS, &[][..], "a child struct", ""),
    };
    let list = valid
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let shown = key.map_or_else(
        || quote::quote!(#path).to_string().replace(' ', ""),
        str::to_owned,
    );
    let message = match key {
        // The parent collection written where the child collection belongs.
        Some(COLLECTION) if matches!(place, Place::Field) => {
            if let Some(misspelled) = misspelled {
                misspelled.push(CHILD);
            }
            format!(
                "`collection` names the parent collection and goes on the struct: on a field, name the child collection with `child`, `#[subset(child = \"{child_example}\")]`"
            )
        }
        Some(k) if other.contains(&k) => {
            format!("`{k}` belongs on {there}, not on {here}: keys on {here} are {list}")
        }
        Some(PREVIEW_OF) => format!(
            "`preview_of` belongs on a preview struct that derives `subset::Child`, not on a parent: keys on {here} are {list}"
        ),
        Some(k) if matches!(place, Place::Child) && (CONTAINER_KEYS.contains(&k) || FIELD_KEYS.contains(&k)) => {
            format!("`{k}` belongs on a parent that derives `subset::Subset`, not on a child: the key on a child struct is {list}, `#[subset(preview_of = Review)]`")
        }
        _ => {
            let close = key.and_then(|k| subset_spec::closest(k, valid.iter().copied()));
            if let (Some(close), Some(misspelled)) = (close, misspelled) {
                misspelled.push(close);
            }
            let hint = close.map_or_else(String::new, |v| format!(" (did you mean `{v}`?)"));
            format!("unknown `#[subset]` key `{shown}`: keys on {here} are {list}{hint}")
        }
    };
    ctxt.error_spanned_by(path, message);
}

/// Consumes the value of a key being skipped: `= expr`, `(...)` or nothing.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// A value passed through a `macro_rules!` fragment arrives wrapped in an invisible group.
pub(crate) fn ungroup(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

/// The string literal of `key = "..."`, or a reported error.
fn expect_str(ctxt: &Ctxt, key: &str, expr: &Expr, hint: &str) -> Option<LitStr> {
    match ungroup(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit.clone()),
        _ => {
            ctxt.error_spanned_by(expr, format!("`{key}` must be a string literal: {hint}"));
            None
        }
    }
}

fn parse_keep(ctxt: &Ctxt, expr: &Expr) -> Option<u32> {
    const HINT: &str = "`#[subset(keep = 5)]`";
    match ungroup(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            let checked = int
                .base10_parse::<u64>()
                .map_err(|_| format!("{KEEP_RULE}, not {}", int.base10_digits()))
                .and_then(|n| subset_spec::check_keep(n).map_err(|e| e.to_string()));
            match checked {
                Ok(keep) => Some(keep),
                Err(message) => {
                    ctxt.error_spanned_by(expr, format!("{message}: {HINT}"));
                    None
                }
            }
        }
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr: inner,
            ..
        }) if matches!(
            &**inner,
            Expr::Lit(ExprLit {
                lit: Lit::Int(_),
                ..
            })
        ) =>
        {
            ctxt.error_spanned_by(expr, format!("{KEEP_RULE}, not a negative number: {HINT}"));
            None
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(_), ..
        }) => {
            ctxt.error_spanned_by(
                expr,
                format!("{KEEP_RULE}, not a string: write it without quotes, {HINT}"),
            );
            None
        }
        _ => {
            ctxt.error_spanned_by(expr, format!("{KEEP_RULE}: {HINT}"));
            None
        }
    }
}

/// Reports a name that breaks a rule: the shared message, then the example built from the
/// user's own names, which the runtime cannot know.
fn name_ok(ctxt: &Ctxt, lit: &LitStr, checked: Result<(), NameError>, hint: &str) -> bool {
    match checked {
        Ok(()) => true,
        Err(error) => {
            ctxt.error_spanned_by(lit, format!("{error}: {hint}"));
            false
        }
    }
}

/// Parses a sort literal with the shared grammar, reporting every problem at the literal, then
/// checks what only the derive cares about: each field is a Rust field name (`r#` allowed), and
/// no field appears twice once `r#` is dropped.
fn sort_attr(ctxt: &Ctxt, lit: LitStr) -> Option<Sort> {
    let value = lit.value();
    let parsed = subset_spec::parse_sort(&value);
    let mut ok = parsed.errors.is_empty();
    for error in &parsed.errors {
        ctxt.error_at(word_span(&lit, &value, error.at()), error);
    }
    let mut keys: Vec<SortKey> = Vec::new();
    for key in parsed.keys {
        let name = key.field.strip_prefix("r#").unwrap_or(key.field).to_owned();
        let span = word_span(&lit, &value, key.at.clone());
        if keys.iter().any(|k| k.name == name) {
            ok = false;
            let error = SortError::DuplicateField {
                field: name,
                at: key.at,
            };
            ctxt.error_at(span, error);
            continue;
        }
        // `type` is not an identifier but `r#type` is; `self` and `1x` are neither.
        let ident = syn::parse_str::<Ident>(&name)
            .or_else(|_| syn::parse_str::<Ident>(&format!("r#{name}")));
        match ident {
            Ok(mut ident) => {
                ident.set_span(lit.span());
                keys.push(SortKey {
                    name,
                    ident,
                    direction: key.direction,
                });
            }
            Err(_) => {
                ok = false;
                ctxt.error_at(
                    span,
                    format!("`{name}` is not a Rust field name: `sort` names fields of the child struct, e.g. \"created_at desc\""),
                );
            }
        }
    }
    ok.then_some(Sort { lit, keys })
}

fn filter_attr(ctxt: &Ctxt, lit: LitStr) -> Option<Filter> {
    let value = lit.value();
    let parsed = match subset_spec::parse_filter(&value) {
        Ok(parsed) => parsed,
        Err(error) => {
            ctxt.error_at(word_span(&lit, &value, error.at()), &error);
            return None;
        }
    };
    let field = parsed.field.strip_prefix("r#").unwrap_or(parsed.field);
    let ident =
        syn::parse_str::<Ident>(field).or_else(|_| syn::parse_str::<Ident>(&format!("r#{field}")));
    match ident {
        Ok(mut ident) => {
            ident.set_span(lit.span());
            Some(Filter {
                field: field.to_owned(),
                ident,
                equals: parsed.equals,
                lit,
            })
        }
        Err(_) => {
            ctxt.error_at(
                word_span(&lit, &value, parsed.at),
                format!("`{field}` is not a Rust field name: `filter` names a `bool` field of the child struct, e.g. \"verified\" or \"!hidden\""),
            );
            None
        }
    }
}

fn sum_attr(ctxt: &Ctxt, lit: LitStr) -> Option<Sums> {
    let value = lit.value();
    let parsed = match subset_spec::parse_sums(&value) {
        Ok(parsed) => parsed,
        Err(error) => {
            ctxt.error_at(word_span(&lit, &value, error.at()), &error);
            return None;
        }
    };
    let mut ok = true;
    let mut pairs = Vec::new();
    for pair in parsed {
        let child = pair
            .child
            .strip_prefix("r#")
            .unwrap_or(pair.child)
            .to_owned();
        let ident = syn::parse_str::<Ident>(&child)
            .or_else(|_| syn::parse_str::<Ident>(&format!("r#{child}")));
        match ident {
            Ok(mut ident) => {
                ident.set_span(lit.span());
                pairs.push(SumPair {
                    parent: pair
                        .parent
                        .strip_prefix("r#")
                        .unwrap_or(pair.parent)
                        .to_owned(),
                    child,
                    child_ident: ident,
                });
            }
            Err(_) => {
                ok = false;
                ctxt.error_at(
                    word_span(&lit, &value, pair.child_at),
                    format!("`{child}` is not a Rust field name: the right of `=` names a field of the child struct, e.g. \"rating_total = rating\""),
                );
            }
        }
    }
    ok.then_some(Sums { lit, pairs })
}

/// The span of the word at `at` in the literal's value: the literal itself, unless the compiler
/// can point inside it (`Literal::subspan`, nightly only for now) and the literal is written
/// plainly, so that byte offsets in the value are offsets in the source.
fn word_span(lit: &LitStr, value: &str, at: std::ops::Range<usize>) -> Span {
    let token = lit.token();
    if at.is_empty() || token.to_string() != format!("\"{value}\"") {
        return lit.span();
    }
    token
        .subspan(at.start + 1..at.end + 1)
        .unwrap_or_else(|| lit.span())
}

#[cfg(test)]
mod tests {
    use super::*;
    use subset_runtime::spec::SpecBuilder;

    /// Every message the derive reports for a field's `#[subset(<key> = <value>)]`.
    fn derive_errors(key: &str, value: impl quote::ToTokens) -> Vec<String> {
        let key = Ident::new(key, Span::call_site());
        let attr: Attribute = syn::parse_quote!(#[subset(#key = #value)]);
        let ctxt = Ctxt::new();
        let ex = Examples {
            collection: "reviews".to_owned(),
            key: "product_id".to_owned(),
        };
        let _ = field(&ctxt, std::slice::from_ref(&attr), &ex);
        match ctxt.check() {
            Ok(()) => Vec::new(),
            Err(errors) => errors.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn lit(value: &str) -> LitStr {
        LitStr::new(value, Span::call_site())
    }

    /// The message the runtime's builder reports.
    fn runtime_error(builder: SpecBuilder) -> String {
        builder.build().map(|_| ()).unwrap_err().to_string()
    }

    fn builder() -> SpecBuilder {
        SpecBuilder::new("reviews", "reviews", "product_id").sort("date desc")
    }

    /// The derive and the runtime say the same thing about the same sort string.
    #[test]
    fn sort_wording_is_shared() {
        for sort in [
            "date desc,",
            "",
            "  ",
            "date sideways",
            "date DESC",
            "date",
            "date desc date asc",
            "date desc, date asc",
            ",date desc",
            "a asc,, b desc",
            "a.b asc",
            "$a asc",
            "a\0 asc",
        ] {
            let runtime = runtime_error(builder().sort(sort));
            assert_eq!(derive_errors(SORT, lit(sort)), [runtime], "{sort:?}");
        }
    }

    /// The same for names, where the derive adds an example built from the user's types.
    #[test]
    fn name_wording_is_shared() {
        for child in ["", "re$views", "re\0views", "system.reviews"] {
            let runtime = runtime_error(SpecBuilder::new("reviews", child, "product_id"));
            let derive = format!("{runtime}: `#[subset(child = \"reviews\")]`");
            assert_eq!(derive_errors(CHILD, lit(child)), [derive], "{child:?}");
        }
        for key in ["", "_id", "$id", "product.id", "product\0id"] {
            let runtime = runtime_error(SpecBuilder::new("reviews", "reviews", key));
            let derive = format!("{runtime}: `#[subset(key = \"product_id\")]`");
            assert_eq!(derive_errors(KEY, lit(key)), [derive], "{key:?}");
        }
        for keep in [0_u32, 1001] {
            let runtime = runtime_error(builder().keep(keep));
            let derive = format!("{runtime}: `#[subset(keep = 5)]`");
            let int = syn::LitInt::new(&keep.to_string(), Span::call_site());
            assert_eq!(derive_errors(KEEP, int), [derive], "{keep}");
        }
    }

    /// What only the derive checks: sort fields are Rust field names.
    #[test]
    fn sort_fields_are_rust_names() {
        assert!(derive_errors(SORT, lit("r#type asc, date desc")).is_empty());
        assert_eq!(
            derive_errors(SORT, lit("1x asc")),
            ["`1x` is not a Rust field name: `sort` names fields of the child struct, e.g. \"created_at desc\""]
        );
        assert_eq!(derive_errors(SORT, lit("self asc")).len(), 1);
        assert_eq!(
            derive_errors(SORT, lit("r#type asc, type desc")),
            ["`type` appears twice in `sort`: list each field once"]
        );
        // Every problem of one literal, not just the first.
        assert_eq!(derive_errors(SORT, lit("a up, b, 1x asc,")).len(), 4);
    }
}
