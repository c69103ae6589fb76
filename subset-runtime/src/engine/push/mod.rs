//! `push` and `push_many`: each child into the child collection, and one capped `$push`
//! (`$each`, `$sort`, `$slice: keep`) with `$inc` of the count into the parent.

use crate::bson::{doc, Bson, Document};
use mongodb::ClientSession;

use super::exec::traffic::ParentKey;
use super::exec::{self, is_transient, Ctx, Retry, Steps};
use super::parent_write::{ParentUpdate, Written};
use super::query;
use super::RawChildren;
use parent_update::{PushAs, ViewPush};

pub(super) mod fold;
mod ordered;
mod parent_update;
use crate::action::{span, Action, Operation};
use crate::error::{driver, Error, Result};

use super::abreast::{Aboard, Cargo};
use super::batch::{Prepared, Queued};
use std::sync::Arc;

/// How a push reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strategy {
    /// Its own steps, in the caller's session.
    Direct,
    /// With every push queued on the same parent in this process (`exec::traffic`), in one
    /// transaction of ours, or without transactions in one turn on the parent. In a
    /// transaction, a conflict with another process's transaction on the parent reports the
    /// parent as contended.
    GroupCommit,
    /// Through the parent's queue document, with other processes' pushes (`fold/`): only for a
    /// contended parent, and only when the store folds ([`crate::StoreOptions::folding`]).
    Fold,
}

impl<'a> RawChildren<'a> {
    /// Adds children (documents with an `_id`); see [`crate::Children::push`].
    ///
    /// # Errors
    ///
    /// As [`crate::Children::push`].
    pub fn push<'r>(&'r self, parent: &Bson, children: Vec<Document>) -> Action<'r, ()> {
        Action::of(Push {
            subset: *self,
            parent: parent.clone(),
            children,
        })
    }
}

/// The push subsystem of one subset field: how a batch of children reaches the child collection
/// and the parent (group commit, folding, the capped `$push`), for pushes and the restores of a
/// retried one.
#[derive(Clone, Copy)]
pub(crate) struct Pushes<'a> {
    subset: RawChildren<'a>,
}

impl<'a> std::ops::Deref for Pushes<'a> {
    type Target = RawChildren<'a>;

    fn deref(&self) -> &RawChildren<'a> {
        &self.subset
    }
}

impl<'a> RawChildren<'a> {
    /// The push subsystem of this field.
    pub(crate) fn pushes(&self) -> Pushes<'a> {
        Pushes { subset: *self }
    }
}

impl Pushes<'_> {
    /// How `batch`, pushed to the parent of `key` without a session of the caller's, reaches
    /// the server: folded when the parent is contended across processes, the store folds and
    /// the batch is small enough to queue; else with group commit. Asked before a batch is sent
    /// and again when its transaction conflicts (which may make the parent contended).
    fn strategy(&self, key: &fold::Key, batch: &[Prepared]) -> Strategy {
        // The size is measured only for a parent being folded: it serializes every child.
        let small = || super::bson_len(batch.iter().map(|p| &p.stored)) <= fold::LARGEST_ENTRY;
        match self.store().shared.folds.folding(key) && small() {
            true => Strategy::Fold,
            false => Strategy::GroupCommit,
        }
    }

    /// One batch, in the caller's session if given. Optimistic: stored children (a retry) are
    /// looked for only after a duplicate aborted the first attempt. In the caller's transaction,
    /// where that abort would be the caller's, the steps look first instead (see
    /// `PushSteps::run`). Under `Strategy::GroupCommit`, a transient error (a conflict with
    /// another process's transaction) makes the parent contended (see `fold/`).
    pub(super) async fn push_alone(
        &self,
        parent: &Bson,
        batch: &[Prepared],
        mut caller: Option<&mut ClientSession>,
        strategy: Strategy,
    ) -> Result<()> {
        let steps = PushSteps {
            strategy,
            ..PushSteps::new(self, parent, batch)
        };
        match exec::execute(self.store(), caller.as_deref_mut(), &steps).await {
            Err(e) if e.mongo_error().is_some_and(driver::is_duplicate) => {
                let steps = PushSteps {
                    look_first: true,
                    ..steps
                };
                exec::execute(self.store(), caller, &steps).await
            }
            other => other,
        }
    }

    /// `batch` with the pushes queued on the same parent (see [`exec::traffic`]); folded
    /// with other processes' when the parent is contended and the store folds (see `fold/`).
    /// In transactions, with the pushes queued for other parents too, while another group is
    /// in flight ([`exec::traffic::Across`]).
    async fn push_combined(&self, parent: &Bson, children: Vec<Prepared>) -> Result<()> {
        let key = self.group_key(parent);
        let run = |work: &Queued| {
            let batch = match work {
                Queued::Pushes { children, .. } => Arc::clone(children),
                _ => Arc::from([]),
            };
            let key = &key;
            async move {
                if self.strategy(key, &batch) == Strategy::Fold {
                    return self.push_folded(parent, &batch).await;
                }
                let alone = |_: Arc<Aboard>| {
                    let batch = Arc::clone(&batch);
                    async move { self.push_grouped(key, &batch, parent).await }
                };
                let cargo = Cargo::Pushes(Arc::clone(&batch));
                let aboard = Aboard::new(self.spec().field, parent.clone(), cargo);
                self.store().ride(aboard, alone).await
            }
        };
        let work = Queued::Pushes {
            group: key.0,
            children: children.into(),
        };
        self.store().traffic().together(parent, work, run).await
    }

    /// `batch`, the pushes queued on `parent` in this process, in a transaction of its own (or
    /// a turn without transactions); folded when the parent is contended meanwhile and the
    /// store folds.
    async fn push_grouped(&self, key: &fold::Key, batch: &[Prepared], parent: &Bson) -> Result<()> {
        match self
            .pushes()
            .push_alone(parent, batch, None, Strategy::GroupCommit)
            .await
        {
            Err(e) if is_transient(&e) && self.strategy(key, batch) == Strategy::Fold => {
                self.push_folded(parent, batch).await
            }
            other => other,
        }
    }

    /// `child` ready to be written into this field's [`RawChildren::views`].
    pub(super) fn prepare(&self, parent: &Bson, child: Document) -> Result<Prepared> {
        let id = self.child_id(&child)?;
        // Keyed before its embedded copies are made: they keep the key where the children
        // hold it as a field.
        let child = super::parent_key::keyed(self.spec(), parent, child)?;
        let embedded = self
            .view_specs()
            .iter()
            .map(|spec| {
                super::sums::check_child(spec, &child)?;
                Ok(embedded_in(spec, &child))
            })
            .collect::<Result<_>>()?;
        Ok(Prepared {
            id,
            embedded,
            stored: child,
        })
    }

    /// Puts a child that is already in the child collection back into the subset if it is
    /// missing there, without counting it again. `$push`/`$sort`/`$slice` drops it again at once
    /// when it does not rank in the top `keep`, so this never disturbs a correct subset.
    pub(super) async fn restore(&self, ctx: &mut Ctx<'_>, parent: &Bson, id: &Bson) -> Result<()> {
        let spec = self.spec();
        let children = self.children::<Document>();
        let stored = ctx
            .run(children.find_one(doc! { "_id": id.clone() }))
            .await
            .map_err(|e| self.mongo_child(e))?;
        let Some(stored) = stored else {
            // Gone again (deleted by someone else): nothing to restore.
            return Ok(());
        };
        let owner = stored.get(spec.key).cloned().unwrap_or(Bson::Null);
        if !crate::engine::parent_key::same_key(&owner, parent) {
            return Err(Error::ChildOwnedElsewhere {
                collection: spec.child_collection.to_owned(),
                id: Box::new(id.clone()),
                parent: Box::new(parent.clone()),
                owner: Box::new(owner),
            });
        }
        let restored = Prepared {
            id: id.clone(),
            // A child stored around this crate may not pass the checks a push makes; it is
            // restored as it is.
            embedded: self
                .view_specs()
                .iter()
                .map(|spec| embedded_in(spec, &stored))
                .collect(),
            stored,
        };
        let push = ViewPush::new(&[&restored]);
        // No match: the child is embedded already, the parent is of another definition (and
        // settling it embeds the stored child), or the parent is gone (its children left
        // behind by an interrupted delete), which a push must report.
        match self
            .pushes()
            .capped_push(
                ctx,
                parent,
                &push,
                &Document::new(),
                PushAs {
                    skip_embedded: true,
                    last: false,
                },
            )
            .await?
        {
            Written::Applied | Written::Missed | Written::Outdated => Ok(()),
            Written::Missing => Err(self.parent_not_found(parent)),
        }
    }
}

/// [`RawChildren::push`].
struct Push<'a> {
    subset: RawChildren<'a>,
    parent: Bson,
    children: Vec<Document>,
}

impl<'s, 'a: 's> Operation<'s> for Push<'a> {
    type Output = ();

    fn span(&self) -> tracing::Span {
        let s = self.subset;
        let span = span!(
            "subset.push",
            s.store(),
            Some(s.spec().field),
            Some(&self.parent)
        );
        span.record("subset.children", self.children.len());
        span
    }

    fn check(&self) -> Result<()> {
        self.subset.store().check_parent_id(&self.parent)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<()> {
        if self.children.is_empty() {
            return Ok(());
        }
        let (s, parent) = (self.subset, &self.parent);
        let batch = self
            .children
            .into_iter()
            .map(|c| s.pushes().prepare(parent, c))
            .collect::<Result<Vec<_>>>()?;
        if let Some(twice) = repeated(&batch) {
            return Err(Error::RepeatedChild {
                collection: s.spec().child_collection.to_owned(),
                parent: Box::new(parent.clone()),
                id: Box::new(twice.clone()),
            });
        }
        // In the caller's session its own steps; else with the pushes queued on the parent.
        match caller {
            Some(_) => {
                s.pushes()
                    .push_alone(parent, &batch, caller, Strategy::Direct)
                    .await
            }
            None => s.pushes().push_combined(parent, batch).await,
        }
    }
}

/// The first `_id` that `batch` holds twice, keyed by its bytes as the engine keys `_id`s (a
/// batch may be large); a lone child, most pushes, has nothing to repeat.
fn repeated(batch: &[Prepared]) -> Option<&Bson> {
    if batch.len() < 2 {
        return None;
    }
    let mut seen = std::collections::HashSet::with_capacity(batch.len());
    batch
        .iter()
        .map(|p| &p.id)
        .find(|id| !seen.insert(ParentKey::of(id)))
}

/// The writes of one push.
pub(super) struct PushSteps<'s, 'a> {
    pub(super) subset: &'s RawChildren<'a>,
    pub(super) parent: &'s Bson,
    pub(super) batch: &'s [Prepared],
    /// Look for children of the batch already stored before writing (a retry), restoring them
    /// into the subset instead of inserting them again.
    look_first: bool,
    /// How the push reaches the server: under group commit, a transient error reports the
    /// parent as contended, and, when the store folds, ends the retries, for the push to be
    /// folded instead (see `fold/`).
    strategy: Strategy,
    /// Without a transaction, the children this push inserted, for [`Steps::take_back`].
    inserted: std::sync::Mutex<Vec<Bson>>,
}

impl<'s, 'a> PushSteps<'s, 'a> {
    /// The writes of `batch`, optimistic (see [`RawChildren::push_alone`]).
    pub(super) fn new(
        subset: &'s RawChildren<'a>,
        parent: &'s Bson,
        batch: &'s [Prepared],
    ) -> Self {
        PushSteps {
            subset,
            parent,
            batch,
            look_first: false,
            strategy: Strategy::Direct,
            inserted: std::sync::Mutex::default(),
        }
    }
}

impl Steps for PushSteps<'_, '_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![self.parent]
    }

    fn shares(&self) -> bool {
        true
    }

    async fn take_back(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let ids = std::mem::take(&mut *self.inserted.lock().unwrap_or_else(|e| e.into_inner()));
        if ids.is_empty() {
            return Ok(());
        }
        let s = self.subset;
        let children = s.children::<Document>();
        ctx.run(children.delete_many(query::owned(s.spec(), self.parent, ids)))
            .await
            .map_err(|e| s.mongo_child(e))?;
        Ok(())
    }

    async fn before_retry(&self, attempt: u32, error: Error) -> Result<Retry<()>> {
        if self.strategy == Strategy::GroupCommit {
            let s = self.subset;
            let key = s.pushes().group_key(self.parent);
            s.store()
                .shared
                .folds
                .contend(key.clone(), s.store().collection_name());
            // Folded instead, now that the parent is contended.
            if s.pushes().strategy(&key, self.batch) == Strategy::Fold {
                return Err(error);
            }
        }
        exec::again_after_backoff(attempt, &error).await
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        ctx.storing(self.batch.iter().map(|p| p.id.clone()));
        if !ctx.atomic() {
            return self.ordered(ctx).await;
        }
        let fresh = if self.look_first || ctx.joined() {
            self.set_aside_stored(ctx).await?
        } else {
            self.batch.iter().collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        // The parent update first, so that a missing parent or a write conflict on a hot parent
        // is found before the insert does any work.
        let s = self.subset;
        let inc = s.pushes().added_inc(&fresh);
        let push = ViewPush::new(&fresh);
        let written = s
            .pushes()
            .capped_push(
                ctx,
                self.parent,
                &push,
                &inc,
                PushAs {
                    skip_embedded: false,
                    last: false,
                },
            )
            .await?;
        if written == Written::Missing {
            return Err(s.parent_not_found(self.parent));
        }
        let children = s.children::<Document>();
        let inserted = match fresh.as_slice() {
            [one] => ctx.run(children.insert_one(&one.stored)).await.map(|_| ()),
            _ => ctx
                .run(children.insert_many(fresh.iter().map(|p| &p.stored)))
                .await
                .map(|_| ()),
        };
        // Of another definition: the executor settles it after this insert, so that the
        // rebuild sees these children.
        inserted.map_err(|e| s.mongo_child(e))
    }
}

impl PushSteps<'_, '_> {
    /// This push's parent update as one of a group's ([`crate::engine::abreast`]): every child
    /// of the batch into every view, counted; in a transaction as [`Steps::run`] sends it,
    /// without one as [`Self::push_to_parent`] first sends it, as the last write. `None` when
    /// nothing goes into the parent (no view admits a child and nothing is counted).
    pub(in crate::engine) fn parent_write(&self, ordered: bool) -> Option<ParentUpdate> {
        let fresh: Vec<&Prepared> = self.batch.iter().collect();
        let inc = self.subset.pushes().added_inc(&fresh);
        let push = ViewPush::new(&fresh);
        if push.is_empty() && inc.is_empty() {
            return None;
        }
        let how = PushAs {
            skip_embedded: ordered,
            last: ordered,
        };
        Some(self.subset.pushes().capped_write(&push, &inc, how))
    }

    /// Finds which children of the batch are already stored, checks they are this parent's,
    /// restores them into the subset if missing, and returns the others.
    async fn set_aside_stored(&self, ctx: &mut Ctx<'_>) -> Result<Vec<&Prepared>> {
        let s = self.subset;
        let ids: Vec<Bson> = self.batch.iter().map(|p| p.id.clone()).collect();
        let children = s.children::<Document>();
        let find = children
            .find(doc! { "_id": { "$in": ids } })
            .projection(doc! { "_id": 1 });
        let stored = ctx.collect(find).await.map_err(|e| s.mongo_child(e))?;
        let stored: Vec<&Bson> = stored.iter().filter_map(|d| d.get("_id")).collect();
        for id in &stored {
            s.pushes().restore(ctx, self.parent, id).await?;
        }
        Ok(self
            .batch
            .iter()
            .filter(|p| !stored.contains(&&p.id))
            .collect())
    }
}

/// `child`'s form in the view `spec` (see [`Prepared::embedded`]): `None` when its filter leaves
/// the child out.
fn embedded_in(spec: &crate::model::SubsetSpec, child: &Document) -> Option<Document> {
    spec.admits(child)
        .then(|| query::embedded(spec, child.clone()))
}
