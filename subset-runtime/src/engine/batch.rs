//! What writers of a parent queue for its turn holder to take along (see [`super::exec::traffic`]):
//! data only, so that the executor below the operations can carry it.

use std::sync::Arc;

use crate::bson::{Bson, Document};

use super::exec::traffic::Work;
use super::patch::child_patch::ChildPatch;

/// A child ready to be pushed: its `_id`, its embedded form in each view, and its
/// child-collection form (the whole child plus the parent key).
#[derive(Clone)]
pub(super) struct Prepared {
    pub(super) id: Bson,
    /// For each view of [`super::RawChildren::views`], in order: the whole child or its
    /// preview, or `None` when the view's filter leaves the child out.
    pub(super) embedded: Vec<Option<Document>>,
    pub(super) stored: Document,
}

/// One writer's work in a parent's queue.
pub(super) enum Queued {
    /// Work that goes alone: nothing joins it.
    Alone,
    /// The children of one push, through the field `group` (the first view of the children):
    /// shared, so that the turn's holder takes them along without copying each child.
    Pushes {
        group: &'static str,
        children: Arc<[Prepared]>,
    },
    /// Patches of children (child `_id`, patch), through the view group `group`.
    Patches {
        group: &'static str,
        patches: Vec<(Bson, ChildPatch)>,
    },
}

impl Queued {
    /// The children of pushes; none for other work.
    pub(super) fn children(&self) -> &[Prepared] {
        match self {
            Queued::Pushes { children, .. } => children,
            _ => &[],
        }
    }

    /// The patches; none for other work.
    pub(super) fn patches(&self) -> &[(Bson, ChildPatch)] {
        match self {
            Queued::Patches { patches, .. } => patches,
            _ => &[],
        }
    }
}

impl Work for Queued {
    fn alone() -> Self {
        Queued::Alone
    }

    fn joins(&self, other: &Self) -> bool {
        match (self, other) {
            (Queued::Pushes { group: a, .. }, Queued::Pushes { group: b, .. })
            | (Queued::Patches { group: a, .. }, Queued::Patches { group: b, .. }) => a == b,
            _ => false,
        }
    }

    fn together(&self, others: &[&Self]) -> Option<Self> {
        match self {
            Queued::Alone => None,
            // All in one write, unless the same child comes from two writers (then each on
            // its own, so that one stores it and the other finds it stored).
            Queued::Pushes { group, children } => {
                let all: Vec<Prepared> = children
                    .iter()
                    .chain(others.iter().flat_map(|o| o.children()))
                    .cloned()
                    .collect();
                let mut ids: Vec<String> = all.iter().map(|p| p.id.to_string()).collect();
                ids.sort_unstable();
                ids.dedup();
                (ids.len() == all.len()).then_some(Queued::Pushes {
                    group,
                    children: all.into(),
                })
            }
            // Patches of one child compose; see `patch/`.
            Queued::Patches { group, patches } => Some(Queued::Patches {
                group,
                patches: patches
                    .iter()
                    .chain(others.iter().flat_map(|o| o.patches()))
                    .cloned()
                    .collect(),
            }),
        }
    }
}
