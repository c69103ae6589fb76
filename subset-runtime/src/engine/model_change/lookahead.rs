//! When a read asks for the child collection's answer together with the parent: while a
//! store's reads mostly find a view they must compute (a model changed and not yet rebuilt),
//! `get` and a first page send one `aggregate` (the parent, and the view's children through
//! `$lookup`) where such a parent takes a `find` of it and then a read of its children. A
//! parent that turns out to be built here pays the `$lookup`s for nothing, about as much as
//! the second command they save, so the store reads ahead only while most reads save it.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// What a read that computed the view adds to its score.
const STALE: u32 = 2;
/// What a read that did not takes off.
const FRESH: u32 = 3;
/// The score from which reads look ahead: four reads in a row that compute the view.
const OPEN: u32 = 4 * STALE;
/// The highest score: a run of nine reads that compute nothing ends a look-ahead.
const CAP: u32 = OPEN + 8 * FRESH;

/// How often this store's reads have lately computed each view: each read that computed it
/// adds [`STALE`] to its score, each that did not takes [`FRESH`] off. Reads look a view ahead
/// from [`OPEN`]: when more than three reads in five compute it, where one command saved on
/// those outweighs the `$lookup`s the others pay, measured as about equal in the benchmark's
/// model change. Per view, so that a view added to a model is read ahead without the views
/// built already. Shared by a store's clones; in memory only.
///
/// A server that cannot run the read ahead (a `$lookup` from a sharded collection before
/// MongoDB 5.1, say) is read apart from then on: [`Lookahead::refused`].
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

    /// Records that the server cannot run a read ahead: no read of this store asks again.
    pub(crate) fn refused(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Starts every view's count again, none read ahead: after a rebuild, and after a read
    /// ahead too large to answer.
    pub(crate) fn reset(&self) {
        for score in &self.scores {
            score.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a read that found (`stale`) or did not find the `view`th view to compute.
    pub(crate) fn saw(&self, view: usize, stale: bool) {
        let Some(score) = self.scores.get(view) else {
            return;
        };
        let step = |score: u32| match stale {
            true => Some(score.saturating_add(STALE).min(CAP)),
            false => Some(score.saturating_sub(FRESH)),
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
    fn four_computed_views_in_a_row_open_it_and_a_run_of_fresh_reads_closes_it() {
        let ahead = Lookahead::new(2);
        for _ in 0..3 {
            ahead.saw(1, true);
        }
        assert!(
            !ahead.wanted(1),
            "three computed views are not yet a pattern"
        );
        ahead.saw(1, true);
        assert!(ahead.wanted(1));
        assert!(!ahead.wanted(0), "each view apart");
        for _ in 0..20 {
            ahead.saw(1, true);
        }
        for _ in 0..(CAP - OPEN) / FRESH {
            ahead.saw(1, false);
        }
        assert!(ahead.wanted(1), "held open by the reads before");
        ahead.saw(1, false);
        assert!(!ahead.wanted(1));
        for _ in 0..4 {
            ahead.saw(1, true);
        }
        ahead.reset();
        assert!(!ahead.wanted(1), "a rebuild starts over");
        for _ in 0..CAP {
            ahead.saw(1, false);
        }
        assert!(!ahead.wanted(1));
        // A view the store does not list is never read ahead.
        for _ in 0..4 {
            ahead.saw(2, true);
            ahead.saw(0, true);
        }
        assert!(!ahead.wanted(2));
        // Nor, once refused, any.
        assert!(ahead.wanted(0));
        ahead.refused();
        assert!(!ahead.wanted(0));
    }

    #[test]
    fn it_stays_closed_while_most_reads_compute_nothing() {
        let ahead = Lookahead::new(1);
        for read in 0..1000 {
            ahead.saw(0, read % 5 < 3);
            assert!(!ahead.wanted(0), "read {read}");
        }
        for read in 0..1000 {
            ahead.saw(0, read % 3 < 2);
        }
        assert!(ahead.wanted(0), "two reads in three");
    }
}
