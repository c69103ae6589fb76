//! Which name a misspelt one most likely meant: the suggestions of the derive's messages, at
//! expansion (unknown `#[subset]` keys, parent fields) and in constant evaluation (child fields),
//! all by one rule, [`is_better`].

/// The longest name [`edit_distance`] measures; longer names are never close to anything.
pub const MAX_MEASURED: usize = 64;

/// Edit distance between `a` and `b`, by byte (Rust field names and `#[subset]` keys are ASCII
/// in practice): insertions, deletions, replacements and swaps of two neighbouring bytes, each
/// one edit (the optimal string alignment distance), so that `sotr` is as near `sort` as `srot`
/// is; `usize::MAX` when `b` is longer than [`MAX_MEASURED`] bytes. A `const fn`, so that checks
/// running in constant evaluation can suggest names too.
pub const fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if b.len() > MAX_MEASURED {
        return usize::MAX;
    }
    // Three rows of the distance table: the one before last (for a swap), the last, this one.
    let mut before = [0_usize; MAX_MEASURED + 1];
    let mut last = [0_usize; MAX_MEASURED + 1];
    let mut j = 0;
    while j <= b.len() {
        last[j] = j;
        j += 1;
    }
    let mut i = 0;
    while i < a.len() {
        let mut row = [0_usize; MAX_MEASURED + 1];
        row[0] = i + 1;
        let mut j = 0;
        while j < b.len() {
            let replace = last[j] + if a[i] == b[j] { 0 } else { 1 };
            let mut best = replace;
            if last[j + 1] + 1 < best {
                best = last[j + 1] + 1;
            }
            if row[j] + 1 < best {
                best = row[j] + 1;
            }
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] && before[j - 1] + 1 < best {
                best = before[j - 1] + 1;
            }
            row[j + 1] = best;
            j += 1;
        }
        before = last;
        last = row;
        i += 1;
    }
    last[b.len()]
}

/// Whether `candidate` is close enough to `typo` to suggest: at most one edit per three bytes of
/// `typo` (one for a name of up to five bytes), as rustc suggests field names.
pub const fn is_close(typo: &str, candidate: &str) -> bool {
    let len = if typo.len() < 3 { 3 } else { typo.len() };
    edit_distance(typo, candidate) <= len / 3
}

/// Whether `candidate` is a better suggestion for `typo` than `best`, the best found so far:
/// close to `typo` ([`is_close`]) and nearer than `best` (the first of two as near stays). The one
/// rule every suggestion follows, a `const fn` for the loops of constant evaluation;
/// [`closest`] applies it to a list.
pub const fn is_better(typo: &str, candidate: &str, best: Option<&str>) -> bool {
    if !is_close(typo, candidate) {
        return false;
    }
    match best {
        Some(best) => edit_distance(typo, candidate) < edit_distance(typo, best),
        None => true,
    }
}

/// The name among `candidates` that `typo` most likely meant, if any is close ([`is_better`]).
pub fn closest<'a>(typo: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates.into_iter().fold(None, |best, candidate| {
        if is_better(typo, candidate, best) {
            Some(candidate)
        } else {
            best
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kepp", "keep"), 1);
        assert_eq!(edit_distance("sort", "sort"), 0);
        assert_eq!(edit_distance("", "key"), 3);
        assert_eq!(edit_distance("key", ""), 3);
        assert_eq!(edit_distance("verifed", "verified"), 1);
        assert_eq!(edit_distance("isVerified", "is_verified"), 2);
        assert_eq!(edit_distance("sotr", "sort"), 1);
        assert_eq!(edit_distance("kepe", "keep"), 1);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("abc", "ca"), 3);
        assert_eq!(
            edit_distance("a", &"b".repeat(MAX_MEASURED + 1)),
            usize::MAX
        );
        const D: usize = edit_distance("dat", "date");
        assert_eq!(D, 1);
    }

    #[test]
    fn closeness() {
        assert!(is_close("dat", "date"));
        assert!(is_close("verifed", "verified"));
        assert!(is_close("isVerified", "is_verified"));
        assert!(!is_close("id", "body"));
        assert!(!is_close("x", "id"));
        assert!(!is_close("rating", "date"));
    }

    #[test]
    fn the_nearest_close_name_is_suggested() {
        assert_eq!(closest("dat", ["id", "date", "data"]), Some("date"));
        assert_eq!(closest("ratng", ["rating", "date"]), Some("rating"));
        assert_eq!(closest("kepp", ["keep", "key"]), Some("keep"));
        assert_eq!(closest("kepe", ["keep", "key"]), Some("keep"));
        assert_eq!(closest("sotr", ["sort", "keep"]), Some("sort"));
        assert_eq!(closest("colour", ["id", "date"]), None);
        assert_eq!(closest("x", []), None);
        assert!(is_better("dat", "date", Some("dates")));
        assert!(!is_better("dat", "dates", Some("date")));
    }
}
