//! The sort grammar: `"field asc|desc[, field asc|desc …]"`.

use std::fmt;
use std::ops::Range;

use crate::name::{check_field, NameError, NameRole};

/// The direction of one sort key: as a sort string writes it, and as a subset's descriptor holds
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `asc`: smallest first (`1`).
    Asc,
    /// `desc`: largest first (`-1`).
    Desc,
}

impl Direction {
    /// The word a sort string writes: `asc` or `desc`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::Asc => "asc",
            Direction::Desc => "desc",
        }
    }

    /// The number MongoDB uses for this direction in sort and index specifications.
    pub const fn as_i32(self) -> i32 {
        match self {
            Direction::Asc => 1,
            Direction::Desc => -1,
        }
    }
}

/// One `field direction` of a sort string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey<'a> {
    /// The field as written: a BSON name to the runtime, a Rust name (maybe with `r#`) to the
    /// derive.
    pub field: &'a str,
    /// Its direction.
    pub direction: Direction,
    /// The byte range of `field` in the sort string.
    pub at: Range<usize>,
}

/// One problem in a sort string. `Display` is the message both the derive and the runtime show;
/// [`SortError::at`] is the byte range of the word (or comma) at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SortError {
    /// Nothing but whitespace and commas.
    Empty {
        /// The whole string.
        at: Range<usize>,
    },
    /// A comma before the first key.
    LeadingComma {
        /// The string without empty keys: what was meant.
        fixed: String,
        /// The comma.
        at: Range<usize>,
    },
    /// A comma after the last key.
    TrailingComma {
        /// The string without empty keys: what was meant.
        fixed: String,
        /// The comma.
        at: Range<usize>,
    },
    /// Two commas with no key between them.
    EmptyKey {
        /// The string without empty keys: what was meant.
        fixed: String,
        /// From the first comma to the second.
        at: Range<usize>,
    },
    /// A field with no direction after it.
    MissingDirection {
        /// The field.
        field: String,
        /// The field.
        at: Range<usize>,
    },
    /// A direction that is neither `asc` nor `desc`.
    UnknownDirection {
        /// The field it follows.
        field: String,
        /// The word found.
        word: String,
        /// The word.
        at: Range<usize>,
    },
    /// `asc` or `desc` written in another case (`DESC`): directions are lowercase.
    DirectionCase {
        /// The field it follows.
        field: String,
        /// The word found.
        word: String,
        /// The direction meant: `word` in lowercase.
        direction: Direction,
        /// The word.
        at: Range<usize>,
    },
    /// A word after `field direction` with no comma before it.
    UnexpectedWord {
        /// The key before it, `field direction`.
        key: String,
        /// The extra word.
        word: String,
        /// The extra word.
        at: Range<usize>,
    },
    /// A field named twice.
    DuplicateField {
        /// The field.
        field: String,
        /// Its second occurrence.
        at: Range<usize>,
    },
    /// A field name that breaks a name rule ([`crate::check_field`]).
    BadField {
        /// The rule broken.
        error: NameError,
        /// The field.
        at: Range<usize>,
    },
}

impl SortError {
    /// The byte range, in the sort string, of the word or comma at fault (the whole string for
    /// [`SortError::Empty`]).
    pub fn at(&self) -> Range<usize> {
        match self {
            SortError::Empty { at }
            | SortError::LeadingComma { at, .. }
            | SortError::TrailingComma { at, .. }
            | SortError::EmptyKey { at, .. }
            | SortError::MissingDirection { at, .. }
            | SortError::UnknownDirection { at, .. }
            | SortError::DirectionCase { at, .. }
            | SortError::UnexpectedWord { at, .. }
            | SortError::DuplicateField { at, .. }
            | SortError::BadField { at, .. } => at.clone(),
        }
    }
}

/// The example quoted where the user's own words give none.
const EXAMPLE: &str = "created_at desc";

impl fmt::Display for SortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SortError::Empty { .. } => write!(
                f,
                "`sort` is empty: name at least one child field and a direction, e.g. \"{EXAMPLE}\""
            ),
            SortError::LeadingComma { fixed, .. } => {
                write!(f, "leading comma in `sort`: \"{fixed}\"")
            }
            SortError::TrailingComma { fixed, .. } => {
                write!(f, "trailing comma in `sort`: \"{fixed}\"")
            }
            SortError::EmptyKey { fixed, .. } => {
                write!(f, "empty key between commas in `sort`: \"{fixed}\"")
            }
            SortError::MissingDirection { field, .. } => write!(
                f,
                "sort key `{field}` needs a direction, `asc` or `desc`: \"{field} desc\""
            ),
            SortError::UnknownDirection { field, word, .. } => write!(
                f,
                "unknown sort direction `{word}` for `{field}`: use `asc` or `desc`, \"{field} desc\""
            ),
            SortError::DirectionCase {
                field,
                word,
                direction,
                ..
            } => {
                let direction = direction.as_str();
                write!(
                    f,
                    "sort direction `{word}` for `{field}` must be lowercase: write `{direction}`, \"{field} {direction}\""
                )
            }
            SortError::UnexpectedWord { key, word, .. } => write!(
                f,
                "unexpected `{word}` after `{key}` in `sort`: separate sort keys with commas, e.g. \"rating desc, {EXAMPLE}\""
            ),
            SortError::DuplicateField { field, .. } => {
                write!(f, "`{field}` appears twice in `sort`: list each field once")
            }
            SortError::BadField { error, .. } => error.fmt(f),
        }
    }
}

impl std::error::Error for SortError {}

/// What [`parse_sort`] read: the keys without problems, and every problem, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedSort<'a> {
    /// The keys that parsed, in order.
    pub keys: Vec<SortKey<'a>>,
    /// Every problem found; empty when the whole string parsed.
    pub errors: Vec<SortError>,
}

impl<'a> ParsedSort<'a> {
    /// The keys, or the first problem.
    ///
    /// # Errors
    ///
    /// The first [`SortError`] found.
    pub fn into_result(self) -> Result<Vec<SortKey<'a>>, SortError> {
        match self.errors.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(self.keys),
        }
    }
}

/// Parses `"field asc|desc[, field asc|desc …]"`, reporting every problem.
///
/// Directions are lowercase `asc` or `desc` (`DESC` is an error that names the right form);
/// whitespace around words and commas is free. Fields are taken as written and checked with
/// [`crate::check_field`]; a field named twice is an error. What a field name means (a Rust field
/// or a BSON field) is the caller's business.
pub fn parse_sort(value: &str) -> ParsedSort<'_> {
    let mut out = ParsedSort::default();
    let segments = segments(value);
    if segments.iter().all(|s| s.words.is_empty()) {
        out.errors.push(SortError::Empty { at: 0..value.len() });
        return out;
    }
    let fixed = || {
        segments
            .iter()
            .filter(|s| !s.words.is_empty())
            .map(|s| {
                s.words
                    .iter()
                    .map(|(w, _)| *w)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        match segment.words.as_slice() {
            // A segment other than the first starts just after a comma.
            [] if i == last => out.errors.push(SortError::TrailingComma {
                fixed: fixed(),
                at: segment.start - 1..segment.start,
            }),
            [] if i == 0 => out.errors.push(SortError::LeadingComma {
                fixed: fixed(),
                at: segment.end..segment.end + 1,
            }),
            [] => out.errors.push(SortError::EmptyKey {
                fixed: fixed(),
                at: segment.start - 1..segment.end + 1,
            }),
            [(field, at)] => out.errors.push(SortError::MissingDirection {
                field: (*field).to_owned(),
                at: at.clone(),
            }),
            [(field, field_at), (word, direction_at), rest @ ..] => {
                let mut good = true;
                if let Err(error) = check_field(NameRole::SortField, field) {
                    good = false;
                    out.errors.push(SortError::BadField {
                        error,
                        at: field_at.clone(),
                    });
                }
                let direction = match named_direction(word) {
                    Some(direction) if direction.as_str() == *word => direction,
                    // One spelling, so that every sort string (an attribute, a CLI argument, the
                    // docs) reads alike; another case is a slip, told as one.
                    Some(direction) => {
                        good = false;
                        out.errors.push(SortError::DirectionCase {
                            field: (*field).to_owned(),
                            word: (*word).to_owned(),
                            direction,
                            at: direction_at.clone(),
                        });
                        direction
                    }
                    None => {
                        good = false;
                        out.errors.push(SortError::UnknownDirection {
                            field: (*field).to_owned(),
                            word: (*word).to_owned(),
                            at: direction_at.clone(),
                        });
                        Direction::Asc
                    }
                };
                if let Some((extra, at)) = rest.first() {
                    good = false;
                    out.errors.push(SortError::UnexpectedWord {
                        key: format!("{field} {word}"),
                        word: (*extra).to_owned(),
                        at: at.clone(),
                    });
                }
                if out.keys.iter().any(|k| k.field == *field) {
                    good = false;
                    out.errors.push(SortError::DuplicateField {
                        field: (*field).to_owned(),
                        at: field_at.clone(),
                    });
                }
                if good {
                    out.keys.push(SortKey {
                        field,
                        direction,
                        at: field_at.clone(),
                    });
                }
            }
        }
    }
    out
}

/// The direction `word` names in any case: `asc`, `DESC`, `Desc`.
fn named_direction(word: &str) -> Option<Direction> {
    [Direction::Asc, Direction::Desc]
        .into_iter()
        .find(|d| word.eq_ignore_ascii_case(d.as_str()))
}

/// The text between two commas: its byte range and its words with theirs.
struct Segment<'a> {
    start: usize,
    end: usize,
    words: Vec<(&'a str, Range<usize>)>,
}

fn segments(value: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    for piece in value.split(',') {
        let end = start + piece.len();
        out.push(Segment {
            start,
            end,
            words: words(piece, start),
        });
        start = end + 1;
    }
    out
}

/// The words of `piece` (as `str::split_whitespace` finds them), with byte ranges offset by
/// `offset`.
fn words(piece: &str, offset: usize) -> Vec<(&str, Range<usize>)> {
    let mut out = Vec::new();
    let mut word_start = None;
    for (i, c) in piece.char_indices() {
        match (c.is_whitespace(), word_start) {
            (true, Some(s)) => {
                out.push((&piece[s..i], offset + s..offset + i));
                word_start = None;
            }
            (false, None) => word_start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = word_start {
        out.push((&piece[s..], offset + s..offset + piece.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: &str) -> Vec<(&str, Direction)> {
        let parsed = parse_sort(value);
        assert!(parsed.errors.is_empty(), "{value}: {:?}", parsed.errors);
        parsed.keys.iter().map(|k| (k.field, k.direction)).collect()
    }

    fn errors(value: &str) -> Vec<String> {
        parse_sort(value)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The text each error points at.
    fn at(value: &str) -> Vec<&str> {
        parse_sort(value)
            .errors
            .iter()
            .map(|e| &value[e.at()])
            .collect()
    }

    #[test]
    fn keys_parse() {
        assert_eq!(keys("date desc"), [("date", Direction::Desc)]);
        assert_eq!(
            keys("  rating asc ,created_at   desc "),
            [("rating", Direction::Asc), ("created_at", Direction::Desc)]
        );
        assert_eq!(keys("r#type asc"), [("r#type", Direction::Asc)]);
        assert_eq!(keys("_id desc"), [("_id", Direction::Desc)]);
        let parsed = parse_sort(" a asc,\tbé desc");
        assert_eq!(parsed.keys[1].at, 8..11);
    }

    #[test]
    fn directions_are_mongodb_numbers() {
        assert_eq!((Direction::Asc.as_i32(), Direction::Desc.as_i32()), (1, -1));
        assert_eq!(
            (Direction::Asc.as_str(), Direction::Desc.as_str()),
            ("asc", "desc")
        );
    }

    #[test]
    fn every_message() {
        let one = |value: &str| {
            let errors = errors(value);
            assert_eq!(errors.len(), 1, "{value}: {errors:?}");
            errors.into_iter().next().unwrap_or_default()
        };
        assert_eq!(
            one(""),
            "`sort` is empty: name at least one child field and a direction, e.g. \"created_at desc\""
        );
        assert_eq!(one(" , "), one(""));
        assert_eq!(one("date desc,"), "trailing comma in `sort`: \"date desc\"");
        assert_eq!(one(",date desc"), "leading comma in `sort`: \"date desc\"");
        assert_eq!(
            one("a asc,, b  desc"),
            "empty key between commas in `sort`: \"a asc, b desc\""
        );
        assert_eq!(
            one("date"),
            "sort key `date` needs a direction, `asc` or `desc`: \"date desc\""
        );
        assert_eq!(
            one("date sideways"),
            "unknown sort direction `sideways` for `date`: use `asc` or `desc`, \"date desc\""
        );
        assert_eq!(
            one("date DESC"),
            "sort direction `DESC` for `date` must be lowercase: write `desc`, \"date desc\""
        );
        assert_eq!(
            one("created_at Asc"),
            "sort direction `Asc` for `created_at` must be lowercase: write `asc`, \"created_at asc\""
        );
        assert_eq!(
            one("date desc date asc"),
            "unexpected `date` after `date desc` in `sort`: separate sort keys with commas, e.g. \"rating desc, created_at desc\""
        );
        assert_eq!(
            one("date desc, date asc"),
            "`date` appears twice in `sort`: list each field once"
        );
        assert_eq!(
            one("a.b asc"),
            "sort field `a.b` contains `.`, which MongoDB reads as a path into a nested document"
        );
        assert_eq!(
            one("$a asc"),
            "sort field `$a` starts with `$`, which MongoDB reserves for operators"
        );
    }

    #[test]
    fn every_problem_is_reported_where_it_is() {
        assert_eq!(
            errors("a up, b, c asc,").len(),
            3,
            "{:?}",
            errors("a up, b, c asc,")
        );
        assert_eq!(at("a up, b, c asc,"), ["up", "b", ","]);
        assert_eq!(at(",date desc"), [","]);
        assert_eq!(at("a asc, ,b desc"), [", ,"]);
        assert_eq!(at("date desc date asc"), ["date"]);
        assert_eq!(parse_sort("date desc date asc").errors[0].at(), 10..14);
        assert_eq!(parse_sort("a asc, a desc").errors[0].at(), 7..8);
        assert_eq!(at("  "), ["  "]);
        assert_eq!(at("é DESC"), ["DESC"]);
    }

    #[test]
    fn first_error_for_the_runtime() {
        assert!(matches!(
            parse_sort("a, b up").into_result(),
            Err(SortError::MissingDirection { .. })
        ));
        assert_eq!(parse_sort("a asc").into_result().map(|k| k.len()), Ok(1));
    }
}
