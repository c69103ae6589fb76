//! When a read asks for the child collection's answer together with the parent: while a
//! store's reads keep finding parents whose views they must compute (a model changed and not
//! yet rebuilt), `get` and a first page send one `aggregate` (the parent, and the children
//! through `$lookup`) where such a parent takes a `find` of it and then a read of its
//! children. A parent that turns out to be built here costs a little more that way than its
//! `find`, so the store looks ahead only while computed views are frequent.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// What a read that found a view to compute adds to the score.
const STALE: u32 = 8;
/// The score from which reads look ahead.
const OPEN: u32 = 2 * STALE;
/// The highest score: a run of `CAP - OPEN + 1` reads that compute nothing ends a look-ahead.
const CAP: u32 = 8 * STALE;

/// How often this store's reads have lately computed each view: each read that computed it
/// adds [`STALE`] to its score, each that did not takes one off. Reads look a view ahead from
/// [`OPEN`]: once one read in eight or more computes it, or two close together do (the first
/// reads of a rolling model change). Per view, so that a view added to a model is read ahead
/// without the views built already. Shared by a store's clones; in memory only.
///
/// A server that refuses the read ahead (one without `$lookup` from a sharded collection, say)
/// is read apart from then on: [`Lookahead::refused`].
#[derive(Debug)]
pub(crate) struct Lookahead {
    scores: Box<[AtomicU32]>,
    refused: AtomicBool,
}

impl Lookahead {
    /// The scores of a model of `views` views, none read ahead.
    pub(crate) fn new(views: usize) -> Self {
        Lookahead {
            scores: (0..views).map(|_| AtomicU32::new(0)).collect(),
            refused: AtomicBool::new(false),
        }
    }

    /// Whether the next read should ask for the children of the `view`th view with the
    /// parent.
    pub(crate) fn wanted(&self, view: usize) -> bool {
        !self.refused.load(Ordering::Relaxed)
            && self
                .scores
                .get(view)
                .is_some_and(|score| score.load(Ordering::Relaxed) >= OPEN)
    }

    /// Records that the server refused a read ahead: no read of this store asks again.
    pub(crate) fn refused(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Counts a read that found (`stale`) or did not find the `view`th view to compute.
    pub(crate) fn saw(&self, view: usize, stale: bool) {
        let Some(score) = self.scores.get(view) else {
            return;
        };
        let step = |score: u32| match stale {
            true => Some(score.saturating_add(STALE).min(CAP)),
            false => score.checked_sub(1),
        };
        // A read of a fresh view at a score of 0, the steady state, writes nothing shared.
        if stale || score.load(Ordering::Relaxed) > 0 {
            let _ = score.fetch_update(Ordering::Relaxed, Ordering::Relaxed, step);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_computed_views_open_it_and_a_run_of_fresh_reads_closes_it() {
        let ahead = Lookahead::new(2);
        ahead.saw(1, true);
        assert!(!ahead.wanted(1), "one computed view is not a pattern");
        ahead.saw(1, true);
        assert!(ahead.wanted(1));
        assert!(!ahead.wanted(0), "each view apart");
        for _ in 0..20 {
            ahead.saw(1, true);
        }
        for _ in 0..CAP - OPEN {
            ahead.saw(1, false);
        }
        assert!(ahead.wanted(1), "held open by the reads before");
        ahead.saw(1, false);
        assert!(!ahead.wanted(1));
        for _ in 0..CAP {
            ahead.saw(1, false);
        }
        assert!(!ahead.wanted(1));
        // A view the store does not list is never read ahead.
        ahead.saw(2, true);
        ahead.saw(2, true);
        assert!(!ahead.wanted(2));
        // Nor, once refused, any.
        ahead.saw(0, true);
        ahead.saw(0, true);
        assert!(ahead.wanted(0));
        ahead.refused();
        assert!(!ahead.wanted(0));
    }

    #[test]
    fn it_stays_closed_when_computed_views_are_rare() {
        let ahead = Lookahead::new(1);
        for read in 0..1000 {
            ahead.saw(0, read % 10 == 0);
            assert!(!ahead.wanted(0), "read {read}");
        }
    }
}
