//! How many children may stay embedded.

use std::fmt;

/// The smallest `keep`: a subset of nothing is no subset.
pub const MIN_KEEP: u32 = 1;

/// The largest `keep`: a bigger subset defeats the pattern, since the parent document grows with
/// it (and every push rewrites its array).
pub const MAX_KEEP: u32 = 1000;

/// The rule, as messages state it.
pub const KEEP_RULE: &str = "`keep` must be an integer from 1 to 1000";

/// Checks a `keep`.
///
/// # Errors
///
/// [`KeepError`] when `keep` is outside [`MIN_KEEP`]`..=`[`MAX_KEEP`].
pub fn check_keep(keep: u64) -> Result<u32, KeepError> {
    match u32::try_from(keep) {
        Ok(n) if (MIN_KEEP..=MAX_KEEP).contains(&n) => Ok(n),
        _ => Err(KeepError { keep }),
    }
}

/// A `keep` out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepError {
    /// The value given.
    pub keep: u64,
}

impl fmt::Display for KeepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{KEEP_RULE}, not {}", self.keep)
    }
}

impl std::error::Error for KeepError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_states_the_range() {
        assert_eq!(
            KEEP_RULE,
            format!("`keep` must be an integer from {MIN_KEEP} to {MAX_KEEP}")
        );
    }

    #[test]
    fn range_is_inclusive() {
        assert_eq!(check_keep(1), Ok(1));
        assert_eq!(check_keep(1000), Ok(1000));
        assert_eq!(
            check_keep(0).unwrap_err().to_string(),
            "`keep` must be an integer from 1 to 1000, not 0"
        );
        assert!(check_keep(1001).is_err());
        assert!(check_keep(u64::from(u32::MAX) + 1).is_err());
    }
}
