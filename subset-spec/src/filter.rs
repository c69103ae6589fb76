//! The filter grammar of a filtered view: `"verified"` keeps the children whose `verified` is
//! true, `"!hidden"` those whose `hidden` is false.

use std::fmt;
use std::ops::Range;

use crate::name::{check_field, NameError, NameRole};

/// A parsed filter: the `bool` child field and the value a child must hold there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFilter<'a> {
    /// The child field, as written (without `!`).
    pub field: &'a str,
    /// `true` for `"field"`, `false` for `"!field"`.
    pub equals: bool,
    /// The byte range of `field` in the string.
    pub at: Range<usize>,
}

/// A filter that does not parse. `Display` is the message both the derive and the runtime show;
/// [`FilterError::at`] is the byte range at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterError {
    /// Nothing but whitespace (and perhaps `!`).
    Empty {
        /// The whole string.
        at: Range<usize>,
    },
    /// A field name MongoDB would reject, or more than one word.
    Name {
        /// What is wrong with it.
        error: NameError,
        /// Its byte range.
        at: Range<usize>,
    },
    /// More than a field name, e.g. `"verified == true"` or `"a, b"`.
    NotAField {
        /// The string as written, trimmed.
        written: String,
        /// Its byte range.
        at: Range<usize>,
    },
}

impl FilterError {
    /// The byte range of the part at fault.
    pub fn at(&self) -> Range<usize> {
        match self {
            FilterError::Empty { at }
            | FilterError::Name { at, .. }
            | FilterError::NotAField { at, .. } => at.clone(),
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::Empty { .. } => write!(
                f,
                "`filter` names no field: write a `bool` child field, `filter = \"verified\"`, or its negation, `filter = \"!hidden\"`"
            ),
            FilterError::Name { error, .. } => write!(f, "{error}"),
            FilterError::NotAField { written, .. } => write!(
                f,
                "`filter` is one `bool` child field, optionally negated with `!`, not `{written}`: write `filter = \"verified\"` or `filter = \"!hidden\"`"
            ),
        }
    }
}

impl std::error::Error for FilterError {}

/// Parses a filter: one field name, optionally preceded by `!`, with free whitespace around.
///
/// # Errors
///
/// [`FilterError`] naming the part at fault.
pub fn parse_filter(value: &str) -> Result<ParsedFilter<'_>, FilterError> {
    let start = value.len() - value.trim_start().len();
    let trimmed = value.trim();
    let (equals, rest, offset) = match trimmed.strip_prefix('!') {
        Some(rest) => (false, rest, start + 1),
        None => (true, trimmed, start),
    };
    let field = rest.trim_start();
    let at = offset + (rest.len() - field.len())..offset + rest.len();
    if field.is_empty() {
        return Err(FilterError::Empty { at: 0..value.len() });
    }
    if field.contains(|c: char| c.is_whitespace() || "!=,<>".contains(c)) {
        return Err(FilterError::NotAField {
            written: trimmed.to_owned(),
            at: start..start + trimmed.len(),
        });
    }
    check_field(NameRole::FilterField, field).map_err(|error| FilterError::Name {
        error,
        at: at.clone(),
    })?;
    Ok(ParsedFilter { field, equals, at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_or_its_negation() {
        let f = parse_filter(" verified ").unwrap();
        assert_eq!((f.field, f.equals, f.at), ("verified", true, 1..9));
        let f = parse_filter("! hidden").unwrap();
        assert_eq!((f.field, f.equals, f.at), ("hidden", false, 2..8));
    }

    #[test]
    fn errors_say_what_to_write() {
        let err = |s: &str| parse_filter(s).unwrap_err().to_string();
        assert!(err("").contains("names no field"));
        assert!(err("!").contains("names no field"));
        assert!(err("verified == true").contains("not `verified == true`"));
        assert!(err("a, b").contains("one `bool` child field"));
        assert!(err("!!a").contains("one `bool` child field"));
        assert!(err("a.b").contains("`a.b`"), "{}", err("a.b"));
        assert!(err("$a").contains("`$a`"));
    }
}
