//! Parses `#[subset(...)]` attributes with `syn::Meta::parse_nested_meta`, one branch per key.
//!
//! Rules about a single value (the range of `keep`, the syntax of `sort`, what MongoDB accepts as
//! a collection name) are checked here, where the literal's span is at hand. Rules that involve
//! several keys or fields live in `valid.rs`.

use proc_macro2::{Ident, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, ExprLit, ExprUnary, Lit, LitStr, Path, Token, UnOp};

use crate::case::edit_distance;
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

const CONTAINER_KEYS: &[&str] = &[COLLECTION];
const FIELD_KEYS: &[&str] = &[CHILD, KEEP, SORT, KEY, COUNT];

/// Smallest and largest accepted `keep`.
const KEEP_RANGE: std::ops::RangeInclusive<u64> = 1..=1000;

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

/// `#[subset(...)]` on the parent struct.
#[derive(Default)]
pub(crate) struct Container<'a> {
    /// The first `#[subset]` attribute on the struct, if any.
    pub(crate) attr: Option<&'a Attribute>,
    pub(crate) collection: Given<LitStr>,
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
    /// Valid keys that an unknown key looked like a typo of.
    pub(crate) misspelled: Vec<&'static str>,
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
    /// The same name as an identifier spanned at the sort literal, so that rustc's "no field"
    /// error points at the string.
    pub(crate) ident: Ident,
    pub(crate) direction: Direction,
}

/// A sort direction as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Asc,
    Desc,
}

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
                    if check_collection_name(ctxt, COLLECTION, &lit, &hint) {
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
                field.child.value = expect_str(ctxt, CHILD, &expr, &hint)
                    .filter(|lit| check_collection_name(ctxt, CHILD, lit, &hint));
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
                field.key.value =
                    expect_str(ctxt, KEY, &expr, &hint).filter(|lit| check_key(ctxt, lit, &hint));
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
    Container,
    Field,
}

/// Reports an unknown key, listing the keys valid where it was written.
///
/// A key within two edits of a valid one is recorded in `misspelled` (and `collection` on a field
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
        _ => {
            let close = key.and_then(|k| valid.iter().copied().find(|v| edit_distance(k, v) <= 2));
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
    let range = format!(
        "`keep` must be an integer from {} to {}",
        KEEP_RANGE.start(),
        KEEP_RANGE.end()
    );
    match ungroup(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => match int.base10_parse::<u64>() {
            Ok(n) if KEEP_RANGE.contains(&n) => u32::try_from(n).ok(),
            _ => {
                let digits = int.base10_digits();
                ctxt.error_spanned_by(expr, format!("{range}, not {digits}: {HINT}"));
                None
            }
        },
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
            ctxt.error_spanned_by(expr, format!("{range}, not a negative number: {HINT}"));
            None
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(_), ..
        }) => {
            ctxt.error_spanned_by(
                expr,
                format!("{range}, not a string: write it without quotes, {HINT}"),
            );
            None
        }
        _ => {
            ctxt.error_spanned_by(expr, format!("{range}: {HINT}"));
            None
        }
    }
}

/// Checks a collection name against the rules MongoDB enforces; reports and returns `false` when
/// it breaks one.
fn check_collection_name(ctxt: &Ctxt, key: &str, lit: &LitStr, hint: &str) -> bool {
    let name = lit.value();
    let problem = if name.is_empty() {
        "is empty".to_owned()
    } else if name.contains('\0') {
        "contains a NUL character, which MongoDB rejects".to_owned()
    } else if name.contains('$') {
        format!("`{name}` contains `$`, which MongoDB rejects")
    } else if name.starts_with("system.") {
        format!("`{name}` starts with `system.`, a prefix MongoDB reserves for its own collections")
    } else {
        return true;
    };
    let what = if key == CHILD {
        "child collection name"
    } else {
        "collection name"
    };
    ctxt.error_spanned_by(lit, format!("{what} {problem}: {hint}"));
    false
}

/// Checks the name of the child field holding the parent id.
fn check_key(ctxt: &Ctxt, lit: &LitStr, hint: &str) -> bool {
    let name = lit.value();
    let problem = if name.is_empty() {
        "cannot be empty"
    } else if name == "_id" {
        "cannot be `_id`, the child's own id"
    } else if name.starts_with('$') {
        "cannot start with `$`"
    } else if name.contains('.') {
        "cannot contain `.`, which MongoDB reads as a path into a nested document"
    } else if name.contains('\0') {
        "cannot contain a NUL character"
    } else {
        return true;
    };
    ctxt.error_spanned_by(lit, format!("`key` {problem}: {hint}"));
    false
}

/// Parses a sort literal, reporting every problem at the literal.
fn sort_attr(ctxt: &Ctxt, lit: LitStr) -> Option<Sort> {
    let parsed = parse_sort(&lit.value());
    let mut keys = Vec::new();
    let mut ok = parsed.errors.is_empty();
    for message in parsed.errors {
        ctxt.error_spanned_by(&lit, message);
    }
    for (name, direction) in parsed.keys {
        // `type` is not an identifier but `r#type` is; `self` is neither.
        let ident = syn::parse_str::<Ident>(&name)
            .or_else(|_| syn::parse_str::<Ident>(&format!("r#{name}")));
        match ident {
            Ok(mut ident) => {
                ident.set_span(lit.span());
                keys.push(SortKey {
                    name,
                    ident,
                    direction,
                });
            }
            Err(_) => {
                ok = false;
                ctxt.error_spanned_by(
                    &lit,
                    format!("`{name}` cannot be a field name: `sort` lists fields of the child struct, e.g. `#[subset(sort = \"created_at desc\")]`"),
                );
            }
        }
    }
    ok.then_some(Sort { lit, keys })
}

/// The result of [`parse_sort`]: the keys that parsed, and one message per problem.
#[derive(Debug, Default, PartialEq)]
struct ParsedSort {
    keys: Vec<(String, Direction)>,
    errors: Vec<String>,
}

/// Parses `"field asc|desc[, field asc|desc ...]"`. Field names are Rust field names, optionally
/// written with `r#`; directions are lowercase.
fn parse_sort(value: &str) -> ParsedSort {
    let mut out = ParsedSort::default();
    if value.trim().is_empty() {
        out.errors.push(
            "`sort` is empty: name at least one child field and a direction, `#[subset(sort = \"created_at desc\")]`"
                .to_owned(),
        );
        return out;
    }
    let segments: Vec<&str> = value.split(',').map(str::trim).collect();
    let fixed = segments
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        let words: Vec<&str> = segment.split_whitespace().collect();
        match words.as_slice() {
            [] if i == last => out.errors.push(format!(
                "trailing comma in `sort`: `#[subset(sort = \"{fixed}\")]`"
            )),
            [] => out.errors.push(format!(
                "empty key between commas in `sort`: `#[subset(sort = \"{fixed}\")]`"
            )),
            [field] => out.errors.push(format!(
                "sort key `{field}` needs a direction, `asc` or `desc`: `#[subset(sort = \"{field} desc\")]`"
            )),
            [field, direction, rest @ ..] => {
                let field = field.strip_prefix("r#").unwrap_or(field);
                let mut good = true;
                if !is_field_name(field) {
                    good = false;
                    out.errors.push(format!(
                        "`{field}` is not a field name: `sort` lists fields of the child struct by their Rust name, e.g. `#[subset(sort = \"created_at desc\")]`"
                    ));
                }
                let direction = match *direction {
                    "asc" => Direction::Asc,
                    "desc" => Direction::Desc,
                    other => {
                        good = false;
                        out.errors.push(format!(
                            "unknown sort direction `{other}` for `{field}`: use `asc` or `desc`, `#[subset(sort = \"{field} desc\")]`"
                        ));
                        Direction::Asc
                    }
                };
                if let Some(extra) = rest.first() {
                    good = false;
                    out.errors.push(format!(
                        "unexpected `{extra}` after `{field} {}` in `sort`: separate sort keys with commas, e.g. `#[subset(sort = \"rating desc, created_at desc\")]`",
                        words[1]
                    ));
                }
                if out.keys.iter().any(|(name, _)| name == field) {
                    good = false;
                    out.errors.push(format!(
                        "`{field}` appears twice in `sort`: list each field once"
                    ));
                }
                if good {
                    out.keys.push((field.to_owned(), direction));
                }
            }
        }
    }
    out
}

fn is_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        && name != "_"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: &str) -> Vec<(String, Direction)> {
        let parsed = parse_sort(value);
        assert!(parsed.errors.is_empty(), "{value}: {:?}", parsed.errors);
        parsed.keys
    }

    fn errors(value: &str) -> Vec<String> {
        parse_sort(value).errors
    }

    #[test]
    fn sort_keys() {
        assert_eq!(keys("date desc"), [("date".to_owned(), Direction::Desc)]);
        assert_eq!(
            keys("  rating asc ,created_at   desc "),
            [
                ("rating".to_owned(), Direction::Asc),
                ("created_at".to_owned(), Direction::Desc)
            ]
        );
        assert_eq!(keys("r#type asc"), [("type".to_owned(), Direction::Asc)]);
    }

    #[test]
    fn sort_errors_name_the_problem() {
        assert!(errors("")[0].contains("`sort` is empty"));
        assert!(errors("   ")[0].contains("`sort` is empty"));
        assert!(errors("date sideways")[0].contains("`sideways`"));
        assert!(errors("date DESC")[0].contains("`DESC`"));
        assert!(errors("date")[0].contains("needs a direction"));
        let trailing = errors("date desc,");
        assert_eq!(trailing.len(), 1);
        assert!(trailing[0].contains("trailing comma"));
        assert!(trailing[0].contains("\"date desc\""));
        assert!(errors("a asc,, b desc")[0].contains("\"a asc, b desc\""));
        assert!(errors("date desc rating")[0].contains("unexpected `rating`"));
        assert!(errors("1x asc")[0].contains("`1x` is not a field name"));
        assert!(errors("a asc, a desc")[0].contains("appears twice"));
        assert_eq!(errors("a up, b, c asc,").len(), 3);
    }
}
