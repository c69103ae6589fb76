//! The running-sum grammar: `"parent_field = child_field[, parent_field = child_field …]"`.

use std::fmt;
use std::ops::Range;

use crate::name::{check_field, NameError, NameRole};

/// The form quoted by every message.
const EXAMPLE: &str = "`sum = \"rating_total = rating\"`";

/// One `parent = child` of a sum list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SumPair<'a> {
    /// The parent field holding the sum, as written.
    pub parent: &'a str,
    /// The child field summed, as written.
    pub child: &'a str,
    /// The byte range of `parent` in the string.
    pub parent_at: Range<usize>,
    /// The byte range of `child` in the string.
    pub child_at: Range<usize>,
}

/// One problem in a sum list. `Display` is the message both the derive and the runtime show;
/// [`SumError::at`] is the byte range at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SumError {
    /// Nothing but whitespace and commas.
    Empty {
        /// The whole string.
        at: Range<usize>,
    },
    /// A part that is not two field names around one `=` (an empty part: a stray comma).
    NotAPair {
        /// The part as written, trimmed.
        part: String,
        /// Its byte range.
        at: Range<usize>,
    },
    /// A parent field named twice.
    Duplicate {
        /// The parent field.
        parent: String,
        /// Its second occurrence.
        at: Range<usize>,
    },
    /// A field name MongoDB would reject.
    Name {
        /// What is wrong with it.
        error: NameError,
        /// Its byte range.
        at: Range<usize>,
    },
}

impl SumError {
    /// The byte range of the part at fault.
    pub fn at(&self) -> Range<usize> {
        match self {
            SumError::Empty { at }
            | SumError::NotAPair { at, .. }
            | SumError::Duplicate { at, .. }
            | SumError::Name { at, .. } => at.clone(),
        }
    }
}

impl fmt::Display for SumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SumError::Empty { .. } => write!(
                f,
                "`sum` names no field: write `parent_field = child_field`, e.g. {EXAMPLE}"
            ),
            SumError::NotAPair { part, .. } if part.is_empty() => write!(
                f,
                "`sum` has an empty entry (a stray comma): write `parent_field = child_field` between commas, e.g. {EXAMPLE}"
            ),
            SumError::NotAPair { part, .. } => write!(
                f,
                "`{part}` is not `parent_field = child_field`: e.g. {EXAMPLE}"
            ),
            SumError::Duplicate { parent, .. } => write!(
                f,
                "`{parent}` is summed twice: one parent field holds one sum"
            ),
            SumError::Name { error, .. } => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for SumError {}

/// Parses a sum list: `parent = child` pairs separated by commas, whitespace free around words,
/// `=` and commas.
///
/// # Errors
///
/// [`SumError`] with the first problem found and its byte range.
pub fn parse_sums(value: &str) -> Result<Vec<SumPair<'_>>, SumError> {
    if value.split(',').all(|p| p.trim().is_empty()) {
        return Err(SumError::Empty { at: 0..value.len() });
    }
    let mut pairs: Vec<SumPair<'_>> = Vec::new();
    let mut start = 0;
    for part in value.split(',') {
        let at = trimmed(start, part);
        start += part.len() + 1;
        let not_a_pair = || SumError::NotAPair {
            part: value[at.clone()].to_owned(),
            at: at.clone(),
        };
        let Some((left, right)) = part.split_once('=') else {
            return Err(not_a_pair());
        };
        let one_word = |s: &str| !s.trim().is_empty() && !s.trim().contains(char::is_whitespace);
        if right.contains('=') || !one_word(left) || !one_word(right) {
            return Err(not_a_pair());
        }
        let part_start = at.start - (part.len() - part.trim_start().len());
        let parent_at = trimmed(part_start, left);
        let child_at = trimmed(part_start + left.len() + 1, right);
        let (parent, child) = (&value[parent_at.clone()], &value[child_at.clone()]);
        for (role, name, at) in [
            (NameRole::SumField, parent, &parent_at),
            (NameRole::SumChildField, child, &child_at),
        ] {
            check_field(role, name).map_err(|error| SumError::Name {
                error,
                at: at.clone(),
            })?;
        }
        if pairs.iter().any(|p| p.parent == parent) {
            return Err(SumError::Duplicate {
                parent: parent.to_owned(),
                at: parent_at,
            });
        }
        pairs.push(SumPair {
            parent,
            child,
            parent_at,
            child_at,
        });
    }
    Ok(pairs)
}

/// The byte range of `part` (which starts at `start` in the whole string) without its outer
/// whitespace.
fn trimmed(start: usize, part: &str) -> Range<usize> {
    let lead = part.len() - part.trim_start().len();
    let begin = start + lead;
    begin..begin + part.trim().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_with_ranges() {
        let s = " total = rating ,helpful_total=helpful";
        let pairs = parse_sums(s).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!((pairs[0].parent, pairs[0].child), ("total", "rating"));
        assert_eq!(&s[pairs[0].parent_at.clone()], "total");
        assert_eq!(&s[pairs[0].child_at.clone()], "rating");
        assert_eq!(&s[pairs[1].parent_at.clone()], "helpful_total");
        assert_eq!(&s[pairs[1].child_at.clone()], "helpful");
    }

    #[test]
    fn errors_name_the_part() {
        let err = |s: &str| parse_sums(s).unwrap_err();
        assert!(matches!(err(" , "), SumError::Empty { .. }));
        let e = err("total rating");
        assert_eq!(
            e.to_string(),
            "`total rating` is not `parent_field = child_field`: e.g. `sum = \"rating_total = rating\"`"
        );
        assert_eq!(e.at(), 0..12);
        assert!(err("a = b, ").to_string().contains("stray comma"));
        assert!(err("a = b = c").to_string().contains("`a = b = c`"));
        assert!(err("a = b, c d = e").to_string().contains("`c d = e`"));
        let e = err("a = b, a = c");
        assert_eq!(
            e.to_string(),
            "`a` is summed twice: one parent field holds one sum"
        );
        assert_eq!(e.at(), 7..8);
        let e = err("a = $b");
        assert_eq!(e.at(), 4..6);
        assert!(e.to_string().contains("`$b` starts with `$`"), "{e}");
    }
}
