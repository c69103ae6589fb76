//! Settling a parent a write found built under another definition of the model: rebuilt under
//! this one when it is the current one, else marked as built under none.

use crate::bson::{doc, oid::ObjectId, Bson, Document};

use super::MARKER;
use crate::engine::exec::{Ctx, Steps};
use crate::engine::parent_write::{Guard, ParentUpdate, Written};
use crate::engine::RawStore;
use crate::error::Result;

/// How many times an ordered rebuild of one parent starts again when a concurrent writer
/// marked the parent while it read.
const ORDERED_REBUILDS: usize = 4;

impl RawStore {
    /// Settles a parent a write found built under another definition, after the write's own
    /// child-collection change: rebuilt under this definition when it is the current one, else
    /// marked as built under none (see the module documentation). `true` when rebuilt. Run by
    /// the executor after the steps (see [`Ctx::outdated`]).
    pub(crate) async fn settle(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<bool> {
        let registry = self.refresh_registry().await?;
        // A store of some fields never rebuilds: it cannot build the views it does not know.
        if registry.current == self.definition.digest() && !self.definition.partial {
            self.rebuild_parent(ctx, parent).await.map(|()| true)
        } else {
            tracing::debug!(parent = %parent, "a parent of another definition: marked for rebuild");
            unmark(self, ctx, parent).await.map(|_| false)
        }
    }

    /// Whether settling a parent rebuilds it (this store's definition is the current one and
    /// whole), as the registry was last read; otherwise settling marks it for a rebuild.
    pub(crate) async fn rebuilds_outdated(&self) -> Result<bool> {
        let registry = self.registry().await?;
        Ok(registry.current == self.definition.digest() && !self.definition.partial)
    }

    /// Marks `parent` as built under no definition, outside any operation: its writer lost its
    /// lease before it could bring the views along (see [`crate::Error::Unsettled`]). Readers
    /// then compute its views and the next writer rebuilds them.
    pub(crate) async fn mark_unsettled(&self, parent: &Bson) {
        let parents = self.parents::<Document>();
        let unmark = parents.update_one(doc! { "_id": parent.clone() }, unmarked(ObjectId::new()));
        if let Err(e) = unmark.await {
            tracing::warn!(collection = self.collection_name(), parent = %parent, error = %e, "could not mark a parent for a rebuild; reconcile repairs it");
        }
    }

    /// Rebuilds every view of `parent` from the child collections and marks it as built under
    /// this definition. In a transaction, in one snapshot. In order, the parent is first
    /// marked as built under none with a nonce, and marked as built here only if the nonce is
    /// still there after every view is rebuilt: a writer of another definition that changed a
    /// child meanwhile (one that holds no lease: a process of an older version) has marked it
    /// again, and the rebuild starts over, so it never marks a view that missed that child.
    pub(crate) async fn rebuild_parent(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<()> {
        let mark = || ParentUpdate {
            guard: Guard::Rebuild,
            ..ParentUpdate::of(self.definition.marking())
        };
        if ctx.atomic() {
            for spec in self.spec().subsets {
                self.children(spec).rebuild_view(ctx, parent).await?;
            }
            self.write_parent(ctx, parent, mark()).await?;
            return Ok(());
        }
        for attempt in 0..ORDERED_REBUILDS {
            if attempt > 0 {
                crate::engine::exec::backoff(attempt as u32).await;
            }
            let Some(nonce) = unmark(self, ctx, parent).await? else {
                return Ok(());
            };
            let mut rebuilt = true;
            for spec in self.spec().subsets {
                let drift = self.children(spec).rebuild_view(ctx, parent).await?;
                rebuilt &= drift.fixed || drift.is_in_sync();
            }
            if !rebuilt {
                // A view changed under every attempt: left marked as built under none.
                tracing::debug!(parent = %parent, "rebuild contended; left for the next write");
                return Ok(());
            }
            let still = ParentUpdate {
                filter: doc! { format!("{MARKER}.n"): nonce },
                ..mark()
            };
            if self.write_parent(ctx, parent, still).await? == Written::Applied {
                return Ok(());
            }
        }
        // Contended every time: left marked as built under none, which every reader computes
        // and the next write or rebuild finishes.
        tracing::debug!(parent = %parent, "rebuild contended; left for the next write");
        Ok(())
    }
}

/// The update that marks a parent as built under no definition, with `nonce`, keeping its
/// lease.
fn unmarked(nonce: ObjectId) -> Document {
    doc! {
        "$set": { format!("{MARKER}.d"): "", format!("{MARKER}.n"): nonce },
        "$unset": { format!("{MARKER}.v"): "" },
    }
}

/// [`RawStore::rebuild_parent`] as an operation of its own (a rebuild's visit).
pub(crate) struct RebuildSteps<'a> {
    store: &'a RawStore,
    parent: &'a Bson,
}

impl RawStore {
    pub(crate) fn rebuild_steps<'a>(&'a self, parent: &'a Bson) -> RebuildSteps<'a> {
        RebuildSteps {
            store: self,
            parent,
        }
    }
}

impl Steps for RebuildSteps<'_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![self.parent]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        self.store.rebuild_parent(ctx, self.parent).await
    }
}

/// Marks `parent` as built under no definition; returns the nonce it wrote, or `None`
/// when there is no such parent. The lease, if any, stays.
async fn unmark(store: &RawStore, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Option<ObjectId>> {
    let nonce = ObjectId::new();
    let write = ParentUpdate {
        guard: Guard::Rebuild,
        ..ParentUpdate::of(unmarked(nonce))
    };
    let written = store.write_parent(ctx, parent, write).await?;
    Ok((written == Written::Applied).then_some(nonce))
}
