//! Subset descriptors made at run time, from strings: for tools that learn the collections and
//! fields from their configuration or command line instead of from a derive.
//!
//! The engine ([`crate::raw::Store`], [`crate::raw::Children`]) takes the same [`SubsetSpec`] the derive
//! emits as a constant, whose names are `&'static str`. [`SpecBuilder::build`] gets there by
//! leaking the strings it was given: a descriptor describes the program's configuration and lives
//! as long as the program, so the few bytes are never reclaimed anyway, and the engine keeps one
//! descriptor type (and one implementation) for both the derive and run-time callers. Build a
//! descriptor once per configuration, not once per request.
//!
//! ```
//! # use subset_runtime as subset;
//! use subset::spec::{Direction, SpecBuilder};
//!
//! let spec = SpecBuilder::new("reviews", "reviews", "shop_id")
//!     .keep(10)
//!     .sort("date desc, rating asc")
//!     .count("total_reviews")
//!     .build()?;
//! assert_eq!(spec.sort[0].field, "date");
//! assert_eq!(spec.sort[1].direction, Direction::Asc);
//! # Ok::<(), subset::spec::SpecError>(())
//! ```

use subset_spec::{
    check_collection, check_field, check_keep, check_key, FilterError, KeepError, NameError,
    NameRole, SortError, SumError,
};

use crate::model::{Direction, FieldName, FilterSpec, NumberType, SortKey, SubsetSpec, SumSpec};
use crate::values::SortValues;

/// The largest `keep`, the same constant the derive checks against: a bigger subset defeats the
/// pattern (the parent document grows with it).
pub use subset_spec::MAX_KEEP;

/// A descriptor that cannot be built, naming the word or value at fault.
///
/// The sort, name and `keep` errors are the ones `#[derive(Subset)]` reports at compile time for
/// the same mistakes, with the same message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A sort order that does not parse; [`SortError::at`] is the byte range at fault.
    #[error(transparent)]
    Sort(#[from] SortError),

    /// A collection or field name MongoDB would reject or the engine cannot use.
    #[error(transparent)]
    Name(#[from] NameError),

    /// `keep` out of range.
    #[error(transparent)]
    Keep(#[from] KeepError),

    /// A sum list that does not parse; [`SumError::at`] is the byte range at fault.
    #[error(transparent)]
    Sum(#[from] SumError),

    /// A filter that does not parse; [`FilterError::at`] is the byte range at fault.
    #[error(transparent)]
    Filter(#[from] FilterError),

    /// Two roles given the same field name.
    #[error("`{name}` cannot be both the {first} and {second}")]
    SameName {
        /// The name.
        name: String,
        /// One role (`key field`).
        first: &'static str,
        /// The other, with its article (`a sort field`).
        second: &'static str,
    },

    /// A type given ([`SpecBuilder::values`]) for a field that is neither a sort key nor `_id`.
    #[error("`{field}` is given a type but is not a sort key: types are for the fields of the sort order and `_id`")]
    Untyped {
        /// The field.
        field: String,
    },
}

/// Parses a sort order, `"field asc|desc[, field asc|desc …]"`, by BSON field name.
///
/// Directions are lowercase `asc` or `desc`; whitespace around words and commas is free. The
/// grammar is the derive's, on BSON names instead of Rust names.
///
/// # Errors
///
/// [`SpecError::Sort`] with the first problem found, naming the word at fault.
pub fn parse_sort(value: &str) -> Result<Vec<(String, Direction)>, SpecError> {
    let keys = subset_spec::parse_sort(value).into_result()?;
    Ok(keys
        .into_iter()
        .map(|key| (key.field.to_owned(), key.direction))
        .collect())
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
    sums: Vec<(String, String)>,
    embed: Option<Vec<String>>,
    embed_key: bool,
    filter: Option<String>,
    values: Vec<(String, SortValues)>,
    numbers: Vec<(String, NumberType)>,
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
            sums: Vec::new(),
            embed: None,
            embed_key: false,
            filter: None,
            values: Vec::new(),
            numbers: Vec::new(),
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

    /// The values a sort key (or the children's `_id`) holds, where the descriptor would
    /// otherwise admit any ([`SortValues::Scalar`], [`SortValues::Id`]): a child whose value is
    /// of another type is then malformed (reported by checks, never embedded), as it is for a
    /// descriptor of the derive, which knows the Rust field's type.
    pub fn values(mut self, field: impl Into<String>, values: SortValues) -> Self {
        self.values.push((field.into(), values));
        self
    }

    /// The numbers the count or sum field `field` (by BSON name) holds, where the descriptor
    /// would otherwise not know them ([`NumberType::Unknown`]): a write that would carry it
    /// past them is then refused, as for a descriptor of the derive, which knows the Rust
    /// field's type.
    pub fn number_type(mut self, field: impl Into<String>, ty: NumberType) -> Self {
        self.numbers.push((field.into(), ty));
        self
    }

    /// The parent's integer field kept equal to the number of children.
    pub fn count(mut self, count: impl Into<String>) -> Self {
        self.count = Some(count.into());
        self
    }

    /// A parent numeric field kept equal to the sum of the child field `child` over every
    /// child (see [`SumSpec`]); call once per sum.
    pub fn sum(mut self, parent: impl Into<String>, child: impl Into<String>) -> Self {
        self.sums.push((parent.into(), child.into()));
        self
    }

    /// Embeds previews instead of whole children: each embedded copy keeps `_id`, every sort
    /// key and these child fields (by BSON name); the child collection keeps whole children.
    /// See [`SubsetSpec::embed`].
    pub fn embed<S: Into<String>>(mut self, fields: impl IntoIterator<Item = S>) -> Self {
        self.embed = Some(fields.into_iter().map(Into::into).collect());
        self
    }

    /// Whether the children hold the parent key as a field of their own, which the embedded
    /// copies then keep too (default `false`: only the child collection holds it). See
    /// [`SubsetSpec::embed_key`].
    pub fn embed_key(mut self, embed_key: bool) -> Self {
        self.embed_key = embed_key;
        self
    }

    /// Makes the field a filtered view: `"verified"` keeps the children whose `verified` is true,
    /// `"!hidden"` those whose `hidden` is false (by BSON name, the derive's grammar). Its
    /// subset, count, sums and pages cover only those children. See [`FilterSpec`].
    pub fn filter(mut self, filter: impl Into<String>) -> Self {
        self.filter = Some(filter.into());
        self
    }

    /// Sums in the derive's grammar, `"parent_field = child_field[, …]"` on BSON names, added
    /// to those given by [`SpecBuilder::sum`].
    ///
    /// # Errors
    ///
    /// [`SpecError::Sum`] naming the part at fault.
    pub fn sums(mut self, sums: &str) -> Result<Self, SpecError> {
        let pairs = subset_spec::parse_sums(sums)?;
        self.sums.extend(
            pairs
                .into_iter()
                .map(|p| (p.parent.to_owned(), p.child.to_owned())),
        );
        Ok(self)
    }

    /// Checks every part and returns the descriptor, leaked for the program's lifetime.
    ///
    /// # Errors
    ///
    /// The first problem found: a field name that is empty, starts with `$`, or contains `.`
    /// or NUL, a key of `_id`, a collection name MongoDB rejects, `keep` out of range, a bad
    /// sort order (see [`parse_sort`]), or one name given two roles.
    pub fn build(self) -> Result<&'static SubsetSpec, SpecError> {
        check_field(NameRole::SubsetField, &self.field)?;
        check_key(&self.key)?;
        check_collection(NameRole::ChildCollection, &self.child_collection)?;
        if let Some(count) = &self.count {
            check_field(NameRole::CountField, count)?;
        }
        for (parent, child) in &self.sums {
            check_field(NameRole::SumField, parent)?;
            check_field(NameRole::SumChildField, child)?;
        }
        for field in self.embed.iter().flatten() {
            check_field(NameRole::EmbedField, field)?;
            // A preview may keep the key only where the children hold it as a field.
            if *field == self.key && !self.embed_key {
                return Err(SpecError::SameName {
                    name: field.clone(),
                    first: "key field",
                    second: "an embedded field",
                });
            }
        }
        // A sum field shares its name with no other parent field of this subset.
        let mut taken = vec![(self.field.as_str(), "subset field")];
        taken.extend(self.count.as_deref().map(|c| (c, "count field")));
        for (parent, _) in &self.sums {
            if let Some((_, first)) = taken.iter().find(|(name, _)| name == parent) {
                return Err(SpecError::SameName {
                    name: parent.clone(),
                    first,
                    second: "a sum field",
                });
            }
            taken.push((parent, "sum field"));
        }
        if let Some((_, child)) = self.sums.iter().find(|(_, c)| *c == self.key) {
            return Err(SpecError::SameName {
                name: child.clone(),
                first: "key field",
                second: "a summed child field",
            });
        }
        check_keep(u64::from(self.keep))?;
        let filter = match &self.filter {
            None => None,
            Some(written) => {
                let parsed = subset_spec::parse_filter(written)?;
                if parsed.field == self.key {
                    return Err(SpecError::SameName {
                        name: self.key.clone(),
                        first: "key field",
                        second: "the filter field",
                    });
                }
                Some(FilterSpec {
                    field: leak(parsed.field.to_owned()),
                    equals: parsed.equals,
                })
            }
        };
        let sort = parse_sort(&self.sort)?;
        if let Some((field, _)) = sort.iter().find(|(f, _)| *f == self.key) {
            return Err(SpecError::SameName {
                name: field.clone(),
                first: "key field",
                second: "a sort field",
            });
        }
        if self.count.as_deref() == Some(self.field.as_str()) {
            return Err(SpecError::SameName {
                name: self.field,
                first: "subset field",
                second: "the count field",
            });
        }
        if let Some((field, _)) = self
            .values
            .iter()
            .find(|(f, _)| f != "_id" && !sort.iter().any(|(s, _)| s == f))
        {
            return Err(SpecError::Untyped {
                field: field.clone(),
            });
        }
        let typed = |field: &str, otherwise| {
            self.values
                .iter()
                .rev()
                .find(|(f, _)| f == field)
                .map_or(otherwise, |(_, v)| *v)
        };
        let id_values = typed("_id", SortValues::Id);
        let sort: Vec<SortKey> = sort
            .into_iter()
            .map(|(field, direction)| SortKey {
                // Without a type given, any value a sort key can have.
                values: typed(&field, SortValues::Scalar),
                field: leak(field),
                direction,
            })
            .collect();
        // A preview holds `_id` and the sort keys besides the fields asked for, in that order,
        // each once.
        let embed = self.embed.map(|fields| {
            let mut names: Vec<&'static str> = vec!["_id"];
            let asked = sort
                .iter()
                .map(|k| k.field)
                .chain(fields.into_iter().map(leak));
            for name in asked {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            let fields: Vec<FieldName> = names
                .into_iter()
                .map(|name| FieldName {
                    rust: name,
                    bson: name,
                })
                .collect();
            &*Box::leak(fields.into_boxed_slice())
        });
        let numbers = self.numbers;
        let number_type = |name: &str| {
            numbers
                .iter()
                .find_map(|(field, ty)| (field == name).then_some(*ty))
                .unwrap_or(NumberType::Unknown)
        };
        let field = leak(self.field);
        Ok(Box::leak(Box::new(SubsetSpec {
            field,
            rust_field: field,
            child_collection: leak(self.child_collection),
            key: leak(self.key),
            keep: self.keep,
            sort: Box::leak(sort.into_boxed_slice()),
            count_type: self
                .count
                .as_deref()
                .map_or(NumberType::Unknown, number_type),
            count: self.count.map(leak),
            sums: Box::leak(
                self.sums
                    .into_iter()
                    .map(|(parent, child)| SumSpec {
                        ty: number_type(&parent),
                        parent: leak(parent),
                        child: leak(child),
                    })
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            ),
            id_values,
            embed,
            embed_key: self.embed_key,
            filter,
        })))
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
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
        assert!(err("date desc,").contains("trailing comma"));
        assert!(err("date desc rating").contains("unexpected `rating` after `date desc`"));
        assert!(err("a asc, a desc").contains("`a` appears twice"));
        assert!(err("a.b asc").contains("`a.b` contains `.`"));
        assert!(err("$a asc").contains("`$a` starts with `$`"));
        assert_eq!(
            parse_sort("date desc,").unwrap_err(),
            SpecError::Sort(SortError::TrailingComma {
                fixed: "date desc".to_owned(),
                at: 9..10
            })
        );
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
        assert!(bad(base().keep(MAX_KEEP + 1)).contains("from 1 to 1000"));
        assert!(bad(SpecBuilder::new("r", "system.x", "k")).contains("`system.x`"));
        assert_eq!(
            bad(SpecBuilder::new("r", "c", "_id")),
            "key field cannot be `_id`, the child's own id"
        );
        assert_eq!(
            bad(base().sort("shop_id asc")),
            "`shop_id` cannot be both the key field and a sort field"
        );
        assert!(bad(base().count("reviews")).contains("`reviews` cannot be both"));
        assert_eq!(
            bad(base().count("n").sum("n", "rating")),
            "`n` cannot be both the count field and a sum field"
        );
        assert_eq!(
            bad(base().sum("t", "rating").sum("t", "helpful")),
            "`t` cannot be both the sum field and a sum field"
        );
        assert!(bad(base().sum("t", "$r")).contains("summed child field `$r` starts with `$`"));
        let spec = base()
            .sums("t = rating, h = helpful")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            spec.sums,
            [
                SumSpec {
                    parent: "t",
                    child: "rating",
                    ty: NumberType::Unknown
                },
                SumSpec {
                    parent: "h",
                    child: "helpful",
                    ty: NumberType::Unknown
                }
            ]
        );
        assert!(base()
            .sums("t rating")
            .unwrap_err()
            .to_string()
            .contains("`t rating`"));
        assert_eq!(
            bad(SpecBuilder::new("", "c", "k")),
            "subset field name is empty"
        );
    }
}
