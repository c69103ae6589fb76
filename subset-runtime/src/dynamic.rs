//! Subset descriptors made at run time, from strings: for tools that learn the collections and
//! fields from their configuration or command line instead of from a derive.
//!
//! The engine ([`crate::RawStore`], [`crate::RawSubset`]) takes the same [`SubsetSpec`] the derive
//! emits as a constant, whose names are `&'static str`. [`SpecBuilder::build`] gets there by
//! leaking the strings it was given: a descriptor describes the program's configuration and lives
//! as long as the program, so the few bytes are never reclaimed anyway, and the engine keeps one
//! descriptor type (and one implementation) for both the derive and run-time callers. Build a
//! descriptor once per configuration, not once per request.
//!
//! ```
//! # use subset_runtime as subset;
//! use subset::{Direction, SpecBuilder};
//!
//! let spec = SpecBuilder::new("reviews", "reviews", "shop_id")
//!     .keep(10)
//!     .sort("date desc, rating asc")
//!     .count("total_reviews")
//!     .build()?;
//! assert_eq!(spec.sort[0].field, "date");
//! assert_eq!(spec.sort[1].direction, Direction::Asc);
//! # Ok::<(), subset::SpecError>(())
//! ```

use crate::model::{Direction, SortKey, SubsetSpec};
use crate::values::SortValues;

/// The largest `keep` the derive accepts, and so the builder: a bigger subset defeats the
/// pattern (the parent document grows with it).
pub const MAX_KEEP: u32 = 1000;

/// A descriptor that cannot be built, naming the word or value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The sort string is empty.
    #[error("the sort order is empty: name at least one child field and a direction, e.g. \"date desc\"")]
    EmptySort,

    /// A sort key without a direction, or with an empty key between commas.
    #[error("sort key `{key}` needs a direction, `asc` or `desc`: \"{key} desc\"")]
    MissingDirection {
        /// The key as written (empty for `"a asc,,b desc"` or a trailing comma).
        key: String,
    },

    /// A direction that is neither `asc` nor `desc`.
    #[error(
        "unknown sort direction `{word}` for `{field}`: use `asc` or `desc`, \"{field} desc\""
    )]
    UnknownDirection {
        /// The field it follows.
        field: String,
        /// The word found.
        word: String,
    },

    /// A word after `field direction` with no comma before it.
    #[error("unexpected `{word}` after `{key}` in the sort order: separate sort keys with commas, e.g. \"rating desc, date desc\"")]
    UnexpectedWord {
        /// The key before it.
        key: String,
        /// The extra word.
        word: String,
    },

    /// A field named twice in the sort order.
    #[error("`{field}` appears twice in the sort order: list each field once")]
    DuplicateSortField {
        /// The field.
        field: String,
    },

    /// A name MongoDB would reject or the engine cannot use as a top-level field.
    #[error("{what} `{name}` {problem}")]
    BadFieldName {
        /// Which name (`sort field`, `subset field`, `key`, `count`).
        what: &'static str,
        /// The name as given.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },

    /// A collection name MongoDB rejects.
    #[error("child collection `{name}` {problem}")]
    BadCollectionName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },

    /// `keep` out of range.
    #[error("`keep` must be from 1 to {MAX_KEEP}, not {keep}")]
    Keep {
        /// The value given.
        keep: u32,
    },

    /// Two roles given the same field name.
    #[error("`{name}` cannot be both the {first} and the {second}")]
    SameName {
        /// The name.
        name: String,
        /// One role.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
}

/// Parses a sort order, `"field asc|desc[, field asc|desc …]"`, by BSON field name.
///
/// Directions are lowercase `asc` or `desc`; whitespace around words and commas is free.
///
/// # Errors
///
/// The first problem found, naming the word at fault: [`SpecError::EmptySort`],
/// [`SpecError::MissingDirection`], [`SpecError::UnknownDirection`],
/// [`SpecError::UnexpectedWord`], [`SpecError::DuplicateSortField`],
/// [`SpecError::BadFieldName`].
pub fn parse_sort(value: &str) -> Result<Vec<(String, Direction)>, SpecError> {
    if value.trim().is_empty() {
        return Err(SpecError::EmptySort);
    }
    let mut keys: Vec<(String, Direction)> = Vec::new();
    for segment in value.split(',') {
        let words: Vec<&str> = segment.split_whitespace().collect();
        match words.as_slice() {
            [] => {
                return Err(SpecError::MissingDirection { key: String::new() });
            }
            [field] => {
                return Err(SpecError::MissingDirection {
                    key: (*field).to_owned(),
                })
            }
            [field, direction, rest @ ..] => {
                check_field_name("sort field", field)?;
                let direction = match *direction {
                    "asc" => Direction::Asc,
                    "desc" => Direction::Desc,
                    other => {
                        return Err(SpecError::UnknownDirection {
                            field: (*field).to_owned(),
                            word: other.to_owned(),
                        })
                    }
                };
                if let Some(word) = rest.first() {
                    return Err(SpecError::UnexpectedWord {
                        key: format!("{field} {}", words[1]),
                        word: (*word).to_owned(),
                    });
                }
                if keys.iter().any(|(name, _)| name == field) {
                    return Err(SpecError::DuplicateSortField {
                        field: (*field).to_owned(),
                    });
                }
                keys.push(((*field).to_owned(), direction));
            }
        }
    }
    Ok(keys)
}

/// Builds a [`SubsetSpec`] from run-time strings.
///
/// The result is `&'static`, like the descriptors the derive emits as constants, so that the
/// engine has one descriptor type for both: [`SpecBuilder::build`] leaks the strings it was given.
/// A descriptor describes the program's configuration and lives as long as the program, so those
/// few bytes would never be reclaimed anyway; build one per configuration, not per request.
#[derive(Debug, Clone)]
#[must_use]
pub struct SpecBuilder {
    field: String,
    child_collection: String,
    key: String,
    keep: u32,
    sort: String,
    count: Option<String>,
}

impl SpecBuilder {
    /// A subset kept in the parent's array `field`, whose children live in `child_collection`
    /// and hold their parent's `_id` in `key`. Defaults: `keep` 10, sort `"_id asc"`, no count.
    pub fn new(
        field: impl Into<String>,
        child_collection: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        SpecBuilder {
            field: field.into(),
            child_collection: child_collection.into(),
            key: key.into(),
            keep: 10,
            sort: "_id asc".to_owned(),
            count: None,
        }
    }

    /// How many children stay embedded (1 to [`MAX_KEEP`]).
    pub fn keep(mut self, keep: u32) -> Self {
        self.keep = keep;
        self
    }

    /// The sort order, as [`parse_sort`] reads it.
    pub fn sort(mut self, sort: impl Into<String>) -> Self {
        self.sort = sort.into();
        self
    }

    /// The parent's integer field kept equal to the number of children.
    pub fn count(mut self, count: impl Into<String>) -> Self {
        self.count = Some(count.into());
        self
    }

    /// Checks every part and returns the descriptor, leaked for the program's lifetime.
    ///
    /// # Errors
    ///
    /// The first problem found: a bad sort order (see [`parse_sort`]), `keep` out of range,
    /// a field name that is empty, starts with `$`, or contains `.` or NUL, a collection name
    /// MongoDB rejects, or one name given two roles.
    pub fn build(self) -> Result<&'static SubsetSpec, SpecError> {
        check_field_name("subset field", &self.field)?;
        check_field_name("key", &self.key)?;
        check_collection_name(&self.child_collection)?;
        if let Some(count) = &self.count {
            check_field_name("count", count)?;
        }
        if !(1..=MAX_KEEP).contains(&self.keep) {
            return Err(SpecError::Keep { keep: self.keep });
        }
        let sort = parse_sort(&self.sort)?;
        if self.key == "_id" {
            return Err(SpecError::SameName {
                name: self.key,
                first: "key",
                second: "child `_id`",
            });
        }
        if let Some((field, _)) = sort.iter().find(|(f, _)| *f == self.key) {
            return Err(SpecError::SameName {
                name: field.clone(),
                first: "key",
                second: "sort field",
            });
        }
        if self.count.as_deref() == Some(self.field.as_str()) {
            return Err(SpecError::SameName {
                name: self.field,
                first: "subset field",
                second: "count",
            });
        }
        let sort: Vec<SortKey> = sort
            .into_iter()
            .map(|(field, direction)| SortKey {
                field: leak(field),
                direction,
                // No Rust types here: any value a sort key can have.
                values: SortValues::Scalar,
            })
            .collect();
        let field = leak(self.field);
        Ok(Box::leak(Box::new(SubsetSpec {
            field,
            rust_field: field,
            child_collection: leak(self.child_collection),
            key: leak(self.key),
            keep: self.keep,
            sort: Box::leak(sort.into_boxed_slice()),
            count: self.count.map(leak),
            id_values: SortValues::Id,
        })))
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// A top-level field name the engine can use: it reads and writes these with `doc.get(name)`
/// and `$set`, so a dotted path would not address the same field everywhere.
fn check_field_name(what: &'static str, name: &str) -> Result<(), SpecError> {
    let problem = if name.is_empty() {
        Some("is empty")
    } else if name.starts_with('$') {
        Some("starts with `$`, which MongoDB reserves for operators")
    } else if name.contains('.') {
        Some("contains `.`: name a top-level field of the document")
    } else if name.contains('\0') {
        Some("contains a NUL character")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(SpecError::BadFieldName {
            what,
            name: name.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// The rules MongoDB enforces on collection names.
fn check_collection_name(name: &str) -> Result<(), SpecError> {
    let problem = if name.is_empty() {
        Some("is empty")
    } else if name.contains('$') {
        Some("contains `$`, which MongoDB does not allow in collection names")
    } else if name.contains('\0') {
        Some("contains a NUL character")
    } else if name.starts_with("system.") {
        Some("starts with `system.`, a prefix MongoDB reserves for its own collections")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(SpecError::BadCollectionName {
            name: name.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_parse() {
        assert_eq!(
            parse_sort("  date desc ,rating   asc ").unwrap(),
            [
                ("date".to_owned(), Direction::Desc),
                ("rating".to_owned(), Direction::Asc)
            ]
        );
    }

    #[test]
    fn sort_errors_name_the_word() {
        let err = |s: &str| parse_sort(s).unwrap_err().to_string();
        assert!(err("").contains("empty"));
        assert!(err("date sideways").contains("`sideways`"));
        assert!(err("date DESC").contains("`DESC`"));
        assert!(err("date").contains("`date` needs a direction"));
        assert!(err("date desc,").contains("needs a direction"));
        assert!(err("date desc rating").contains("unexpected `rating` after `date desc`"));
        assert!(err("a asc, a desc").contains("`a` appears twice"));
        assert!(err("a.b asc").contains("`a.b` contains `.`"));
        assert!(err("$a asc").contains("`$a` starts with `$`"));
    }

    #[test]
    fn builder_checks_and_leaks() {
        let spec = SpecBuilder::new("reviews", "reviews", "shop_id")
            .keep(3)
            .sort("date desc")
            .count("n")
            .build()
            .unwrap();
        assert_eq!(spec.keep, 3);
        assert_eq!(spec.count, Some("n"));
        assert_eq!(spec.order().count(), 2);
        let bad = |b: SpecBuilder| b.build().unwrap_err().to_string();
        let base = || SpecBuilder::new("reviews", "reviews", "shop_id").sort("date desc");
        assert!(bad(base().keep(0)).contains("not 0"));
        assert!(bad(base().keep(1001)).contains("not 1001"));
        assert!(bad(SpecBuilder::new("r", "system.x", "k")).contains("`system.x`"));
        assert!(bad(SpecBuilder::new("r", "c", "_id")).contains("`_id` cannot be both"));
        assert!(bad(base().sort("shop_id asc")).contains("`shop_id` cannot be both"));
        assert!(bad(base().count("reviews")).contains("`reviews` cannot be both"));
        assert!(bad(SpecBuilder::new("", "c", "k")).contains("subset field `` is empty"));
    }
}
