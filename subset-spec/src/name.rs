//! The names MongoDB rejects, or that the engine cannot use.

use std::fmt;

/// What a name names, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameRole {
    /// The parent collection.
    Collection,
    /// The child collection.
    ChildCollection,
    /// The parent's array field holding the subset.
    SubsetField,
    /// The child field holding the parent's `_id`.
    KeyField,
    /// The parent's field counting the children.
    CountField,
    /// A child field in the sort order.
    SortField,
    /// The parent's field holding a running sum.
    SumField,
    /// The child field a running sum adds up.
    SumChildField,
    /// A child field kept in a preview's embedded copies.
    EmbedField,
    /// The `bool` child field a filtered view keeps children by.
    FilterField,
}

impl NameRole {
    /// The role as messages name it: `child collection`, `key field`.
    pub fn noun(self) -> &'static str {
        match self {
            NameRole::Collection => "collection",
            NameRole::ChildCollection => "child collection",
            NameRole::SubsetField => "subset field",
            NameRole::KeyField => "key field",
            NameRole::CountField => "count field",
            NameRole::SortField => "sort field",
            NameRole::SumField => "sum field",
            NameRole::SumChildField => "summed child field",
            NameRole::EmbedField => "embedded field",
            NameRole::FilterField => "filter field",
        }
    }
}

/// What is wrong with a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// A field name starting with `$`.
    StartsWithDollar,
    /// A collection name containing `$`.
    ContainsDollar,
    /// A field name containing `.`.
    ContainsDot,
    /// A NUL character anywhere.
    ContainsNul,
    /// A collection name starting with `system.`.
    SystemPrefix,
    /// The key field named `_id`.
    Id,
}

/// A name that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    /// What the name names.
    pub role: NameRole,
    /// The name as given.
    pub name: String,
    /// The rule it breaks.
    pub problem: NameProblem,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = self.role.noun();
        let name = Escaped(&self.name);
        match self.problem {
            NameProblem::Empty => write!(f, "{role} name is empty"),
            NameProblem::StartsWithDollar => write!(
                f,
                "{role} `{name}` starts with `$`, which MongoDB reserves for operators"
            ),
            NameProblem::ContainsDollar => write!(
                f,
                "{role} `{name}` contains `$`, which MongoDB rejects in collection names"
            ),
            NameProblem::ContainsDot => write!(
                f,
                "{role} `{name}` contains `.`, which MongoDB reads as a path into a nested document"
            ),
            NameProblem::ContainsNul => write!(
                f,
                "{role} `{name}` contains a NUL character, which MongoDB rejects"
            ),
            NameProblem::SystemPrefix => write!(
                f,
                "{role} `{name}` starts with `system.`, a prefix MongoDB reserves for its own collections"
            ),
            NameProblem::Id => write!(f, "{role} cannot be `_id`, the child's own id"),
        }
    }
}

impl std::error::Error for NameError {}

/// A name with its control characters (NUL above all) escaped, so messages stay printable.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_debug())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

fn fail(role: NameRole, name: &str, problem: NameProblem) -> Result<(), NameError> {
    Err(NameError {
        role,
        name: name.to_owned(),
        problem,
    })
}

/// Checks a collection name against the rules MongoDB enforces: not empty, no `$`, no NUL, no
/// `system.` prefix.
///
/// # Errors
///
/// [`NameError`] naming the first rule broken.
pub fn check_collection(role: NameRole, name: &str) -> Result<(), NameError> {
    let problem = if name.is_empty() {
        NameProblem::Empty
    } else if name.contains('\0') {
        NameProblem::ContainsNul
    } else if name.contains('$') {
        NameProblem::ContainsDollar
    } else if name.starts_with("system.") {
        NameProblem::SystemPrefix
    } else {
        return Ok(());
    };
    fail(role, name, problem)
}

/// Checks a top-level field name: not empty, no leading `$`, no `.`, no NUL.
///
/// The engine reads and writes these fields with `doc.get(name)` and `$set`, so a dotted path
/// would not address the same field everywhere, and MongoDB reads a leading `$` as an operator.
///
/// # Errors
///
/// [`NameError`] naming the first rule broken.
pub fn check_field(role: NameRole, name: &str) -> Result<(), NameError> {
    let problem = if name.is_empty() {
        NameProblem::Empty
    } else if name.contains('\0') {
        NameProblem::ContainsNul
    } else if name.starts_with('$') {
        NameProblem::StartsWithDollar
    } else if name.contains('.') {
        NameProblem::ContainsDot
    } else {
        return Ok(());
    };
    fail(role, name, problem)
}

/// Checks the key field, the child field holding the parent's `_id`: a field name
/// ([`check_field`]) other than `_id`, which is the child's own id.
///
/// # Errors
///
/// [`NameError`] with [`NameRole::KeyField`], naming the first rule broken.
pub fn check_key(name: &str) -> Result<(), NameError> {
    check_field(NameRole::KeyField, name)?;
    if name == "_id" {
        return fail(NameRole::KeyField, name, NameProblem::Id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collection(name: &str) -> String {
        check_collection(NameRole::ChildCollection, name)
            .unwrap_err()
            .to_string()
    }

    fn key(name: &str) -> String {
        check_key(name).unwrap_err().to_string()
    }

    #[test]
    fn collection_names() {
        assert!(check_collection(NameRole::Collection, "reviews").is_ok());
        assert!(check_collection(NameRole::Collection, "my.reviews").is_ok());
        assert_eq!(collection(""), "child collection name is empty");
        assert_eq!(
            collection("re$views"),
            "child collection `re$views` contains `$`, which MongoDB rejects in collection names"
        );
        assert_eq!(
            collection("re\0views"),
            "child collection `re\\0views` contains a NUL character, which MongoDB rejects"
        );
        assert_eq!(
            collection("system.reviews"),
            "child collection `system.reviews` starts with `system.`, a prefix MongoDB reserves for its own collections"
        );
    }

    #[test]
    fn field_names() {
        assert!(check_field(NameRole::CountField, "total_reviews").is_ok());
        assert!(check_field(NameRole::SortField, "a$b").is_ok());
        assert_eq!(key(""), "key field name is empty");
        assert_eq!(
            key("$id"),
            "key field `$id` starts with `$`, which MongoDB reserves for operators"
        );
        assert_eq!(
            key("product.id"),
            "key field `product.id` contains `.`, which MongoDB reads as a path into a nested document"
        );
        assert_eq!(
            key("a\0"),
            "key field `a\\0` contains a NUL character, which MongoDB rejects"
        );
        assert_eq!(key("_id"), "key field cannot be `_id`, the child's own id");
        assert!(check_field(NameRole::SortField, "_id").is_ok());
    }
}
