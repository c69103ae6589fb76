//! The names the library writes under: [`Names`].

use std::sync::Arc;

/// The field each parent the library writes carries: the definition of the model its views
/// were built under (see the guide's *Changing a model on live data*).
pub(crate) const MARKER: &str = "_subset";

/// The prefix of the library's collections unless a store is given another
/// ([`crate::StoreOptions::bookkeeping_prefix`]).
pub const DEFAULT_PREFIX: &str = "subset";

/// The longest prefix, in bytes: the longest collection name built from it stays far below what
/// any server accepts, with the database name in front.
pub const MAX_PREFIX_LEN: usize = 64;

/// The names the library writes under: the marker field of each parent, and its four
/// collections, each `<prefix>_<what>`.
///
/// `Names::default()` is the prefix [`DEFAULT_PREFIX`]: `subset_definitions`, `subset_folds`,
/// `subset_jobs`, `subset_followers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix: Arc<str>,
    definitions: Arc<str>,
    folds: Arc<str>,
    jobs: Arc<str>,
    followers: Arc<str>,
}

impl Default for Names {
    fn default() -> Self {
        Names::of(DEFAULT_PREFIX)
    }
}

impl Names {
    /// The names under `prefix`: `<prefix>_definitions`, `<prefix>_folds`, `<prefix>_jobs`,
    /// `<prefix>_followers`.
    ///
    /// # Errors
    ///
    /// [`PrefixError`] for an empty prefix, one longer than [`MAX_PREFIX_LEN`] bytes, or one
    /// with a `$`, a `.` or a NUL (which no collection name may start with or hold).
    pub fn with_prefix(prefix: &str) -> Result<Names, PrefixError> {
        let problem = if prefix.is_empty() {
            Some(PrefixProblem::Empty)
        } else if prefix.len() > MAX_PREFIX_LEN {
            Some(PrefixProblem::TooLong { len: prefix.len() })
        } else if prefix.contains('$') {
            Some(PrefixProblem::Dollar)
        } else if prefix.contains('.') {
            Some(PrefixProblem::Dot)
        } else if prefix.contains('\0') {
            Some(PrefixProblem::Nul)
        } else {
            None
        };
        match problem {
            Some(problem) => Err(PrefixError {
                prefix: prefix.to_owned(),
                problem,
            }),
            None => Ok(Names::of(prefix)),
        }
    }

    fn of(prefix: &str) -> Names {
        let name = |what: &str| Arc::from(format!("{prefix}_{what}"));
        Names {
            prefix: Arc::from(prefix),
            definitions: name("definitions"),
            folds: name("folds"),
            jobs: name("jobs"),
            followers: name("followers"),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The field each parent the library writes carries (`_subset`). The same under every
    /// prefix: it lives in the application's documents, and every reader of them must know it.
    pub fn marker(&self) -> &'static str {
        MARKER
    }

    /// The registry of model definitions: one document per parent collection.
    pub fn definitions(&self) -> &str {
        &self.definitions
    }

    /// The queues of folded pushes: one document per parent and child group whose pushes a
    /// store folded ([`crate::StoreOptions::folding`]).
    pub fn folds(&self) -> &str {
        &self.folds
    }

    /// The journals of jobs by filter run without transactions: one document per job under way.
    pub fn jobs(&self) -> &str {
        &self.jobs
    }

    /// Where followers save their places, unless a follower is given another collection
    /// ([`crate::follow::FollowOptions::token_collection`]).
    pub fn followers(&self) -> &str {
        &self.followers
    }

    /// Every collection of the library under this prefix, in the order of the guide's table.
    pub fn collections(&self) -> [&str; 4] {
        [
            self.definitions(),
            self.folds(),
            self.jobs(),
            self.followers(),
        ]
    }
}

/// A bookkeeping prefix no collection name can start with ([`Names::with_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bookkeeping prefix `{prefix}` {problem}")]
pub struct PrefixError {
    /// The prefix refused.
    pub prefix: String,
    /// What is wrong with it.
    pub problem: PrefixProblem,
}

/// What is wrong with a bookkeeping prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixProblem {
    /// It is empty.
    #[error("is empty: give a word such as `subset` (the default) or `myapp_subset`")]
    Empty,
    /// It is longer than [`MAX_PREFIX_LEN`] bytes.
    #[error("is {len} bytes long: at most {max} are allowed", max = MAX_PREFIX_LEN)]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// It holds a `$`, which collection names may not.
    #[error("holds a `$`, which collection names may not: use letters, digits and `_`")]
    Dollar,
    /// It holds a `.`, which would put the collections in a namespace of their own.
    #[error("holds a `.`: use `_` to separate words, e.g. `myapp_subset`")]
    Dot,
    /// It holds a NUL byte.
    #[error("holds a NUL byte: use letters, digits and `_`")]
    Nul,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_under_the_prefix() {
        let names = Names::default();
        assert_eq!(
            names.collections(),
            [
                "subset_definitions",
                "subset_folds",
                "subset_jobs",
                "subset_followers"
            ]
        );
        assert_eq!(names.marker(), "_subset");
        let names = Names::with_prefix("shop_sub").unwrap();
        assert!(names
            .collections()
            .iter()
            .all(|c| c.starts_with("shop_sub_")));
        assert_eq!(names.prefix(), "shop_sub");
    }

    #[test]
    fn a_bad_prefix_is_named_with_its_problem() {
        let cases = [
            ("", PrefixProblem::Empty),
            ("a$b", PrefixProblem::Dollar),
            ("a.b", PrefixProblem::Dot),
            ("a\0b", PrefixProblem::Nul),
        ];
        for (prefix, problem) in cases {
            let err = Names::with_prefix(prefix).unwrap_err();
            assert_eq!(err.problem, problem, "{prefix:?}");
            assert_eq!(err.prefix, prefix);
        }
        let long = "x".repeat(MAX_PREFIX_LEN + 1);
        let err = Names::with_prefix(&long).unwrap_err();
        assert_eq!(err.problem, PrefixProblem::TooLong { len: 65 });
        assert!(err.to_string().contains("at most 64"), "{err}");
        assert!(Names::with_prefix(&long[1..]).is_ok());
    }
}
