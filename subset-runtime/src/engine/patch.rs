//! Partial updates of one child: `$set`, `$unset` and `$inc` of some of its fields, applied to
//! the child collection and to every embedded copy in one write each.
//!
//! The child is changed first, with `findOneAndUpdate`, which returns it as it was: the change
//! and the state it applied to are one atomic fact, so each patch knows exactly what it moved
//! (a `+1` vote moves a sum by 1 whatever other votes land meanwhile). Then each view of the
//! child is brought along by the cheapest write that keeps it true:
//!
//! - a view the child neither was nor is in: nothing;
//! - a view whose order or filter the patch touches: recomputed from the child collection
//!   (the child may enter or leave it, with backfill), its count and sums moved by the
//!   difference;
//! - any other view: the same operators on the embedded copy (`latest.$[c0].helpful`, matched
//!   by `_id` with an array filter), and its sums moved by the difference, all views in one
//!   parent update; none at all when the patch touches no field a view embeds or sums.
//!
//! The operators are the same ones the child got, so the server applies them to the copy as it
//! did to the child: concurrent `$inc`s commute and leave the copy exact in either write mode.
//!
//! In a transaction of ours, the patches queued on one parent run together (group commit):
//! each child's patches composed into one ([`ChildPatch::then`]), equal patches that change no
//! field a view orders, filters or sums by (votes on different reviews) as one `update` of all
//! their children, since nothing needs them as they were, and every copy changed in place in
//! one parent update.

use crate::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::resync::CountFix;
use super::sums::Num;
use super::{driver_error, query, RawSubset, WriteMode};
use crate::action::Action;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// A change to some fields of one stored child, by BSON name: what [`RawSubset::patch`]
/// applies to the child and to its embedded copies. The typed API builds one from field
/// constants (`Review::HELPFUL`) through [`crate::patch::Patch`].
///
/// ```
/// # use subset_runtime as subset;
/// use subset::raw::ChildPatch;
/// let vote = ChildPatch::new().inc("helpful", 1).set("edited", true);
/// assert_eq!(vote.fields().collect::<Vec<_>>(), ["helpful", "edited"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChildPatch {
    ops: Vec<(String, Op)>,
}

/// One field's change.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Set(Bson),
    Unset,
    Inc(Bson),
}

impl ChildPatch {
    /// A patch that changes nothing yet.
    pub fn new() -> Self {
        ChildPatch::default()
    }

    /// Sets `field` (a BSON name, or a dotted path into an embedded document) to `value`.
    pub fn set(mut self, field: impl Into<String>, value: impl Into<Bson>) -> Self {
        self.ops.push((field.into(), Op::Set(value.into())));
        self
    }

    /// Removes `field` from the child.
    pub fn unset(mut self, field: impl Into<String>) -> Self {
        self.ops.push((field.into(), Op::Unset));
        self
    }

    /// Adds `by` (an int32, int64 or double; negative to decrement) to `field`, which a child
    /// without it gets as `by`.
    pub fn inc(mut self, field: impl Into<String>, by: impl Into<Bson>) -> Self {
        self.ops.push((field.into(), Op::Inc(by.into())));
        self
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The fields the patch changes, in the order given.
    pub fn fields(&self) -> impl Iterator<Item = &str> + '_ {
        self.ops.iter().map(|(field, _)| field.as_str())
    }

    /// The update document that applies the patch to the child.
    pub(crate) fn update(&self) -> Document {
        let mut update = Update::default();
        self.add_to(&mut update, "", |_| true);
        update.into_document()
    }

    /// One patch that does what `self` and then `next` do, when each field they change is
    /// changed by one of them, or by both with `$set`, `$unset` and `$inc` that compose (an
    /// `$inc` after an `$inc` adds up; a `$set` or `$unset` after anything wins; an `$inc`
    /// after a `$set` of a number sets the sum; after an `$unset` it sets the increment);
    /// `None` when two fields overlap (one inside the other) or an `$inc` follows a `$set` of
    /// something that is not a number, whose error the server must report.
    pub(crate) fn then(&self, next: &ChildPatch) -> Option<ChildPatch> {
        let mut ops = self.ops.clone();
        for (field, op) in &next.ops {
            let same = ops.iter().position(|(f, _)| f == field);
            if ops
                .iter()
                .enumerate()
                .any(|(i, (f, _))| Some(i) != same && overlap(f, field))
            {
                return None;
            }
            let Some(at) = same else {
                ops.push((field.clone(), op.clone()));
                continue;
            };
            let both = match (&ops[at].1, op) {
                (_, Op::Set(_) | Op::Unset) => op.clone(),
                (Op::Inc(a), Op::Inc(b)) => Op::Inc(plus(a, b)?),
                (Op::Set(a), Op::Inc(b)) => Op::Set(plus(a, b)?),
                (Op::Unset, Op::Inc(b)) => Op::Set(b.clone()),
            };
            ops[at].1 = both;
        }
        Some(ChildPatch { ops })
    }

    /// The fields the patch increments.
    pub(crate) fn increments(&self) -> impl Iterator<Item = &str> + '_ {
        self.ops
            .iter()
            .filter(|(_, op)| matches!(op, Op::Inc(_)))
            .map(|(field, _)| field.as_str())
    }

    /// Whether the patch changes `field` or a field inside it, or sets or removes a document
    /// that holds it.
    pub(crate) fn touches(&self, field: &str) -> bool {
        self.fields().any(|path| overlap(path, field))
    }

    /// Refuses what cannot be applied to a child of `views` (see [`Error::InvalidPatch`]).
    pub(crate) fn check(&self, views: &[SubsetSpec]) -> Result<()> {
        let Some(spec) = views.first() else {
            return Ok(());
        };
        let invalid = |field: &str, reason: String| Error::InvalidPatch {
            collection: spec.child_collection.to_owned(),
            field: field.to_owned(),
            reason,
        };
        for (i, (field, op)) in self.ops.iter().enumerate() {
            if field.is_empty() || field.split('.').any(|s| s.is_empty() || s.starts_with('$')) {
                return Err(invalid(
                    field,
                    "is not a field path: name a field, or fields inside it with dots, none empty or `$`-prefixed".into(),
                ));
            }
            if overlap(field, "_id") {
                return Err(invalid(
                    field,
                    "is the child's `_id`, its identity: remove the child and push it with the new `_id`".into(),
                ));
            }
            if overlap(field, spec.key) {
                return Err(invalid(
                    field,
                    format!(
                        "is the parent key `{}`: move the child to another parent instead",
                        spec.key
                    ),
                ));
            }
            if let Some((other, _)) = self.ops[..i].iter().find(|(o, _)| overlap(o, field)) {
                return Err(invalid(
                    field,
                    format!("is changed twice (with `{other}`): change each field once in a patch"),
                ));
            }
            if let Some(role) = views.iter().find_map(|v| use_of(v, field)) {
                match (op, role) {
                    (Op::Unset, _) => {
                        return Err(invalid(
                            field,
                            format!("is {role}: every child must hold it, so it cannot be unset"),
                        ))
                    }
                    (Op::Set(Bson::Null), _) => {
                        return Err(invalid(field, format!("is {role}: it cannot be null")))
                    }
                    (Op::Set(v), Use::Summed(_)) if Num::of(v).is_none() => {
                        return Err(invalid(
                            field,
                            format!(
                                "is {role}: it must be set to a number, not {}",
                                type_name(v)
                            ),
                        ))
                    }
                    (Op::Set(v), Use::Filter(_)) if !matches!(v, Bson::Boolean(_)) => {
                        return Err(invalid(
                            field,
                            format!("is {role}: it must be set to a bool, not {}", type_name(v)),
                        ))
                    }
                    _ => {}
                }
            }
            if let Op::Inc(by) = op {
                if Num::of(by).is_none() {
                    return Err(invalid(
                        field,
                        format!(
                            "is incremented by {}: `inc` takes an int32, int64 or double",
                            type_name(by)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Adds to `update` what applies the patch to a document, each field's path after `prefix`
    /// (empty for the child itself, `latest.$[c0].` for an embedded copy); only the fields
    /// `holds` (a preview's copies hold only some).
    fn add_to(&self, update: &mut Update, prefix: &str, holds: impl Fn(&str) -> bool) {
        for (field, op) in self.ops.iter().filter(|(field, _)| holds(field)) {
            let path = format!("{prefix}{field}");
            match op {
                Op::Set(v) => update.set.insert(path, v.clone()),
                Op::Unset => update.unset.insert(path, ""),
                Op::Inc(by) => update.inc.insert(path, by.clone()),
            };
        }
    }

    /// The child as the patch leaves `before`: what views are decided and sums moved by. An
    /// `$inc` adds as the running sums do (integers exactly); the stored copy is the server's.
    pub(crate) fn apply(&self, before: &Document) -> Document {
        let mut after = before.clone();
        for (field, op) in &self.ops {
            let mut path = field.split('.').peekable();
            let mut at = &mut after;
            while let Some(segment) = path.next() {
                if path.peek().is_none() {
                    match op {
                        Op::Set(v) => {
                            at.insert(segment, v.clone());
                        }
                        Op::Unset => {
                            at.remove(segment);
                        }
                        Op::Inc(by) => {
                            let old = at.get(segment).and_then(Num::of).unwrap_or(Num::Int(0));
                            let by = Num::of(by).unwrap_or(Num::Int(0));
                            at.insert(segment, old.add(by).into_bson());
                        }
                    }
                    break;
                }
                let inner = at
                    .entry(segment.to_owned())
                    .or_insert_with(|| Bson::Document(Document::new()));
                if !matches!(inner, Bson::Document(_)) {
                    *inner = Bson::Document(Document::new());
                }
                let Bson::Document(inner) = inner else {
                    break;
                };
                at = inner;
            }
        }
        after
    }
}

/// An update being built: the fields of each operator.
#[derive(Debug, Default)]
struct Update {
    set: Document,
    unset: Document,
    inc: Document,
}

impl Update {
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.unset.is_empty() && self.inc.is_empty()
    }

    /// The update document, without the operators that change nothing.
    fn into_document(self) -> Document {
        [
            ("$set", self.set),
            ("$unset", self.unset),
            ("$inc", self.inc),
        ]
        .into_iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(operator, fields)| (operator.to_owned(), Bson::Document(fields)))
        .collect()
    }
}

/// `a + b` as the server's `$inc` adds them: two int32s stay an int32 while the sum fits (so
/// that composed votes leave a field the type separate ones would), anything else as the
/// running sums add; `None` for what is not a number.
fn plus(a: &Bson, b: &Bson) -> Option<Bson> {
    if let (Bson::Int32(a), Bson::Int32(b)) = (a, b) {
        if let Some(sum) = a.checked_add(*b) {
            return Some(Bson::Int32(sum));
        }
    }
    Some(Num::of(a)?.add(Num::of(b)?).into_bson())
}

/// What a field is to a view, for messages.
#[derive(Clone, Copy)]
enum Use {
    Sort(&'static str),
    Filter(&'static str),
    Summed(&'static str),
}

impl std::fmt::Display for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Use::Sort(view) => write!(f, "a sort key of `{view}`"),
            Use::Filter(view) => write!(f, "the filter of `{view}`"),
            Use::Summed(view) => write!(f, "summed by `{view}`"),
        }
    }
}

fn use_of(view: &SubsetSpec, field: &str) -> Option<Use> {
    if view.sort.iter().any(|k| overlap(k.field, field)) {
        return Some(Use::Sort(view.field));
    }
    if view.filter.is_some_and(|f| overlap(f.field, field)) {
        return Some(Use::Filter(view.field));
    }
    if view.sums.iter().any(|s| overlap(s.child, field)) {
        return Some(Use::Summed(view.field));
    }
    None
}

fn type_name(value: &Bson) -> &'static str {
    crate::decode::type_name(value.element_type())
}

/// Whether two field paths name the same field, or one is inside the other.
fn overlap(a: &str, b: &str) -> bool {
    let inside = |long: &str, short: &str| {
        long.strip_prefix(short)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    inside(a, b) || inside(b, a)
}

/// Whether a patch changes what `view` orders or filters by, so that the child may move in it.
fn moves_in(patch: &ChildPatch, view: &SubsetSpec) -> bool {
    view.sort.iter().any(|k| patch.touches(k.field))
        || view.filter.is_some_and(|f| patch.touches(f.field))
}

/// Whether `view`'s embedded copies hold the field at `path`.
fn holds(view: &SubsetSpec, path: &str) -> bool {
    match view.embed {
        None => true,
        Some(fields) => fields.iter().any(|f| overlap(f.bson, path)),
    }
}

/// Whether a patch changes a field `view`'s embedded copies hold.
fn shows_in(patch: &ChildPatch, view: &SubsetSpec) -> bool {
    patch.fields().any(|path| holds(view, path))
}

/// The patches of one caller, as the group commit queues them: (child `_id`, patch).
pub(super) type Batch = Vec<(Bson, ChildPatch)>;

impl RawSubset<'_> {
    /// Changes some fields of a stored child (matched by `_id` under `parent`) in the child
    /// collection and in every embedded copy of it, in every view: see [`ChildPatch`] and
    /// [`crate::Subset::patch`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPatch`] (nothing is written), [`Error::ChildNotFound`],
    /// [`Error::ParentNotFound`], [`Error::Mongo`].
    pub fn patch<'r>(
        &'r self,
        parent: &'r Bson,
        child: &'r Bson,
        patch: &'r ChildPatch,
    ) -> Action<'r, ()> {
        Action::new(move |session| Box::pin(self.patch_in(parent, child, patch, session)))
    }

    /// What [`RawSubset::patch`] checks before it writes anything: the patch names neither the
    /// `_id` nor the parent key nor one field twice, unsets or nulls no field a view of these
    /// children orders, filters or sums by, and increments by numbers.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPatch`] naming the field.
    pub fn check_patch(&self, patch: &ChildPatch) -> Result<()> {
        patch.check(self.view_specs())
    }

    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field))]
    pub(crate) async fn patch_in(
        &self,
        parent: &Bson,
        child: &Bson,
        patch: &ChildPatch,
        caller: Option<&mut ClientSession>,
    ) -> Result<()> {
        self.store().check_parent_id(parent)?;
        self.check_child_id(child)?;
        self.check_patch(patch)?;
        if patch.is_empty() {
            return Ok(());
        }
        let batch = vec![(child.clone(), patch.clone())];
        // Within a transaction of ours, patches of one parent's children go together: votes on
        // one hot child would otherwise conflict and retry (see `combine.rs`).
        if caller.is_none() && self.store().mode().await? == WriteMode::Transactional {
            return self.patch_combined(parent, batch).await;
        }
        self.patch_alone(parent, &batch, caller).await
    }

    async fn patch_alone(
        &self,
        parent: &Bson,
        patches: &[(Bson, ChildPatch)],
        caller: Option<&mut ClientSession>,
    ) -> Result<()> {
        let steps = PatchSteps {
            subset: self,
            parent,
            patches,
        };
        exec::execute(self.store(), caller, &steps).await
    }

    /// `batch` in a transaction of ours, together with the patches queued on the same parent.
    async fn patch_combined(&self, parent: &Bson, batch: Batch) -> Result<()> {
        let group = self.view_specs().first().unwrap_or(self.spec()).field;
        let together = |mine: &Batch, theirs: &[&Batch]| {
            Some(
                mine.iter()
                    .chain(theirs.iter().copied().flatten())
                    .cloned()
                    .collect(),
            )
        };
        let run = |batch: &Batch| {
            let batch = batch.clone();
            async move { self.patch_alone(parent, &batch, None).await }
        };
        let patches = &self.store().patches;
        patches.run(group, parent, batch, together, run).await
    }
}

/// [`RawSubset::patch`]: one or more patches of one parent's children, in order.
///
/// Every child is changed first, then the views follow all of them at once: one parent update
/// for every copy the patches change in place (and every sum they move), then one recompute
/// per view whose order or filter some patch touched, with the counts and sums those patches
/// moved. A group commit of eight votes on one hot review is then one `findAndModify` (the
/// votes composed into one `$inc`), one parent update and one commit.
struct PatchSteps<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    patches: &'s [(Bson, ChildPatch)],
}

/// What the patches of one run do to the parent, gathered before it is written.
#[derive(Default)]
struct ParentWrite {
    /// The operators on copies in place, and the sums they move.
    update: Update,
    /// One array filter per (view, child) changed in place.
    filters: Vec<Document>,
    /// The children changed in place, to write the update before one comes again (two
    /// filters on one element would conflict).
    copies: Vec<Bson>,
    /// Per view (by index in [`RawSubset::views`]): the `$inc` of counts and sums of the
    /// patches that move a child in it, when one does.
    moved: Vec<Option<Document>>,
}

impl Steps for PatchSteps<'_, '_> {
    type Output = ();

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let s = self.subset;
        let mut write = ParentWrite {
            moved: vec![None; s.view_specs().len()],
            ..ParentWrite::default()
        };
        let mut changed = Vec::with_capacity(self.patches.len());
        let mut composed = compose(self.patches);
        // In a transaction, patches that need not know the child as it was go first, a group
        // of equal ones (votes on different reviews) as one `update` of all their children.
        if ctx.atomic() {
            for (patch, children) in blind(&mut composed, s.view_specs()) {
                if children.iter().any(|c| write.copies.contains(c)) {
                    self.write(ctx, &mut write).await?;
                }
                self.change_all(ctx, &children, &patch).await?;
                for (i, view) in s.view_specs().iter().enumerate() {
                    in_place(&mut write, i, view, &children, &patch);
                }
            }
        }
        for (child, patch) in composed {
            if write.copies.contains(&child) {
                self.write(ctx, &mut write).await?;
            }
            let before = self.change(ctx, &child, &patch).await?;
            let after = patch.apply(&before);
            self.plan(&mut write, &child, &patch, &before, &after);
            changed.push((child, before));
        }
        match self.follow(ctx, write).await {
            // Refused by the server (the copy would not fit, say) outside a transaction: the
            // children go back as they were, so the write leaves nothing, as a transaction
            // would.
            Err(e) if !ctx.atomic() && driver_error::was_refused(&e) => {
                let children = s.children::<Document>();
                for (child, before) in changed.iter().rev() {
                    let filter = doc! { "_id": child.clone(), s.spec().key: self.parent.clone() };
                    let put_back = children.replace_one(filter, before);
                    ctx.run(put_back).await.map_err(|e| s.mongo_child(e))?;
                }
                Err(e)
            }
            other => other,
        }
    }
}

impl PatchSteps<'_, '_> {
    /// Applies `patch` to the child in the child collection: the child as it was.
    async fn change(
        &self,
        ctx: &mut Ctx<'_>,
        child: &Bson,
        patch: &ChildPatch,
    ) -> Result<Document> {
        let s = self.subset;
        let spec = s.spec();
        let filter = doc! { "_id": child.clone(), spec.key: self.parent.clone() };
        let children = s.children::<Document>();
        let change = children
            .find_one_and_update(filter, patch.update())
            .return_document(ReturnDocument::Before);
        ctx.run(change)
            .await
            .map_err(|e| s.mongo_child(e))?
            .ok_or_else(|| Error::ChildNotFound {
                collection: spec.child_collection.to_owned(),
                parent: Box::new(self.parent.clone()),
                id: Box::new(child.clone()),
            })
    }

    /// Applies `patch` to each of `children` in the child collection, in one write: each must
    /// be there (else `ChildNotFound`, naming one that is not, which aborts the transaction).
    async fn change_all(
        &self,
        ctx: &mut Ctx<'_>,
        children: &[Bson],
        patch: &ChildPatch,
    ) -> Result<()> {
        let s = self.subset;
        let spec = s.spec();
        let coll = s.children::<Document>();
        let filter = query::owned(spec, self.parent, children.to_vec());
        let changed = ctx
            .run(coll.update_many(filter.clone(), patch.update()))
            .await
            .map_err(|e| s.mongo_child(e))?;
        if changed.matched_count == children.len() as u64 {
            return Ok(());
        }
        let found = coll.find(filter).projection(doc! { "_id": 1 });
        let found = ctx.collect(found).await.map_err(|e| s.mongo_child(e))?;
        let missing = children
            .iter()
            .find(|c| !found.iter().any(|f| f.get("_id") == Some(c)));
        Err(Error::ChildNotFound {
            collection: spec.child_collection.to_owned(),
            parent: Box::new(self.parent.clone()),
            id: Box::new(missing.unwrap_or(&children[0]).clone()),
        })
    }

    /// Adds to `write` what every view needs after `patch` changed `child` from `before` to
    /// `after`.
    fn plan(
        &self,
        write: &mut ParentWrite,
        child: &Bson,
        patch: &ChildPatch,
        before: &Document,
        after: &Document,
    ) {
        for (i, view) in self.subset.view_specs().iter().enumerate() {
            let (was, is) = (view.admits(before), view.admits(after));
            if !was && !is {
                continue;
            }
            let moves = super::sums::inc(view, &[after], &[before]);
            if was != is || moves_in(patch, view) {
                let inc = write.moved[i].get_or_insert_with(Document::new);
                add_inc(inc, moves);
                continue;
            }
            add_inc(&mut write.update.inc, moves);
            in_place(write, i, view, std::slice::from_ref(child), patch);
        }
    }

    /// Writes the gathered in-place changes, if any, and starts a new gathering of them.
    async fn write(&self, ctx: &mut Ctx<'_>, write: &mut ParentWrite) -> Result<()> {
        let update = std::mem::take(&mut write.update);
        let filters = std::mem::take(&mut write.filters);
        write.copies.clear();
        if update.is_empty() {
            return Ok(());
        }
        let s = self.subset;
        let parents = s.store().parents::<Document>();
        let update = parents
            .update_one(doc! { "_id": self.parent.clone() }, update.into_document())
            .array_filters(filters);
        let written = match ctx.run(update).await {
            Ok(written) => written,
            // The copies grow by what the patches set: unknown here, so the message says the
            // parent's size as stored.
            Err(e) => return Err(s.parent_write_error(e, self.parent, 0).await),
        };
        if written.matched_count == 0 {
            return Err(s.parent_not_found(self.parent));
        }
        Ok(())
    }

    /// The in-place changes, then a recompute of each view a patch moved a child in.
    async fn follow(&self, ctx: &mut Ctx<'_>, mut write: ParentWrite) -> Result<()> {
        self.write(ctx, &mut write).await?;
        for (view, moves) in self.subset.views().zip(write.moved) {
            if let Some(moves) = moves {
                view.resync(ctx, self.parent, &CountFix::Inc(moves), true)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Adds to `write` the operators of `patch` on the copies of `children` in view `i`, where
/// its copies hold a field the patch changes (the array filter matches none of a child that
/// is not embedded there).
fn in_place(
    write: &mut ParentWrite,
    i: usize,
    view: &SubsetSpec,
    children: &[Bson],
    patch: &ChildPatch,
) {
    if !shows_in(patch, view) {
        return;
    }
    let copy = format!("c{i}x{}", write.filters.len());
    let prefix = format!("{}.$[{copy}].", view.field);
    patch.add_to(&mut write.update, &prefix, |path| holds(view, path));
    let ids = match children {
        [one] => one.clone(),
        many => Bson::Document(doc! { "$in": many.to_vec() }),
    };
    write.filters.push(doc! { format!("{copy}._id"): ids });
    for child in children {
        if !write.copies.contains(child) {
            write.copies.push(child.clone());
        }
    }
}

/// Takes out of `patches` those no view needs the child as it was for (they change no field
/// any view orders, filters or sums by: the copies take the same operators wherever they
/// are), grouped by equal patch: (patch, its children). A child with more than one patch
/// (ones that do not compose) keeps them all, in order.
fn blind(
    patches: &mut Vec<(Bson, ChildPatch)>,
    views: &[SubsetSpec],
) -> Vec<(ChildPatch, Vec<Bson>)> {
    let sees = |patch: &ChildPatch| {
        views
            .iter()
            .any(|v| moves_in(patch, v) || v.sums.iter().any(|s| patch.touches(s.child)))
    };
    let once: Vec<bool> = patches
        .iter()
        .map(|(child, _)| patches.iter().filter(|(c, _)| c == child).count() == 1)
        .collect();
    let mut once = once.into_iter();
    let mut groups: Vec<(ChildPatch, Vec<Bson>)> = Vec::new();
    patches.retain(|(child, patch)| {
        if !once.next().unwrap_or(false) || sees(patch) {
            return true;
        }
        match groups.iter_mut().find(|(p, _)| p == patch) {
            Some((_, children)) => children.push(child.clone()),
            None => groups.push((patch.clone(), vec![child.clone()])),
        }
        false
    });
    groups
}

/// Adds each number of `moves` to the same field of `inc`.
fn add_inc(inc: &mut Document, moves: Document) {
    for (field, by) in moves {
        let sum = match (inc.get(&field).and_then(Num::of), Num::of(&by)) {
            (Some(a), Some(b)) => a.add(b).into_bson(),
            _ => by,
        };
        inc.insert(field, sum);
    }
}

/// The patches as fewer: each child's patches composed into one where they compose (see
/// [`ChildPatch::then`]), so that votes queued on one hot child are one write. Patches of
/// different children commute, so a child's patch joins its last one wherever that stands.
fn compose(patches: &[(Bson, ChildPatch)]) -> Vec<(Bson, ChildPatch)> {
    let mut composed: Vec<(Bson, ChildPatch)> = Vec::with_capacity(patches.len());
    for (child, patch) in patches {
        let last = composed.iter_mut().rev().find(|(c, _)| c == child);
        if let Some((_, before)) = last {
            if let Some(both) = before.then(patch) {
                *before = both;
                continue;
            }
        }
        composed.push((child.clone(), patch.clone()));
    }
    composed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FilterSpec, SumSpec, TEST_SPEC};

    const SPEC: SubsetSpec = SubsetSpec {
        count: Some("n"),
        sums: &[SumSpec {
            parent: "stars",
            child: "stars",
        }],
        filter: Some(FilterSpec {
            field: "verified",
            equals: true,
        }),
        ..TEST_SPEC
    };

    fn problem(patch: ChildPatch) -> String {
        match patch.check(&[SPEC]) {
            Err(Error::InvalidPatch { field, reason, .. }) => format!("{field}: {reason}"),
            other => panic!("expected InvalidPatch, got {other:?}"),
        }
    }

    #[test]
    fn a_patch_cannot_touch_identity_key_or_one_field_twice() {
        assert!(problem(ChildPatch::new().set("_id", 2)).starts_with("_id: is the child's `_id`"));
        assert!(problem(ChildPatch::new().set("product_id", 2)).contains("move the child"));
        let twice = ChildPatch::new().inc("helpful", 1).set("helpful.x", 2);
        assert!(problem(twice).contains("changed twice (with `helpful`)"));
        assert!(problem(ChildPatch::new().set("a..b", 1)).contains("not a field path"));
        assert!(problem(ChildPatch::new().set("$where", 1)).contains("not a field path"));
    }

    #[test]
    fn what_views_need_cannot_go_away_or_change_kind() {
        assert!(problem(ChildPatch::new().unset("rating")).contains("a sort key of `recent`"));
        assert!(problem(ChildPatch::new().set("date", Bson::Null)).contains("cannot be null"));
        assert!(problem(ChildPatch::new().set("stars", "five")).contains("a number, not a string"));
        assert!(problem(ChildPatch::new().set("verified", 1)).contains("a bool, not an int32"));
        assert!(problem(ChildPatch::new().inc("helpful", "1")).contains("`inc` takes"));
        let fine = ChildPatch::new()
            .inc("stars", 1)
            .set("verified", false)
            .unset("note");
        assert!(fine.check(&[SPEC]).is_ok());
    }

    #[test]
    fn apply_is_what_the_server_does() {
        let before = doc! { "_id": 1, "helpful": 41, "text": "x", "note": "n" };
        let patch = ChildPatch::new()
            .inc("helpful", 1)
            .inc("new", 2.5)
            .set("text", "y")
            .unset("note")
            .set("meta.seen", true);
        assert_eq!(
            patch.apply(&before),
            doc! {
                "_id": 1, "helpful": 42_i64, "text": "y", "new": 2.5,
                "meta": { "seen": true },
            }
        );
        let mut update = Update::default();
        patch.add_to(&mut update, "latest.$[c0].", |_| true);
        assert_eq!(
            update.into_document(),
            doc! {
                "$inc": { "latest.$[c0].helpful": 1, "latest.$[c0].new": 2.5 },
                "$set": { "latest.$[c0].text": "y", "latest.$[c0].meta.seen": true },
                "$unset": { "latest.$[c0].note": "" },
            }
        );
    }

    #[test]
    fn queued_patches_of_one_child_compose() {
        let vote = ChildPatch::new().inc("helpful", 1);
        let three = vote.then(&vote).and_then(|p| p.then(&vote)).unwrap();
        assert_eq!(three, ChildPatch::new().inc("helpful", 3));
        let long = ChildPatch::new().inc("helpful", 1_i64);
        assert_eq!(
            vote.then(&long).unwrap(),
            ChildPatch::new().inc("helpful", 2_i64)
        );
        let hide = ChildPatch::new().set("hidden", true);
        assert_eq!(
            vote.then(&hide).unwrap(),
            ChildPatch::new().inc("helpful", 1).set("hidden", true)
        );
        let set = ChildPatch::new().set("helpful", 10);
        assert_eq!(
            set.then(&vote).unwrap(),
            ChildPatch::new().set("helpful", 11)
        );
        let gone = ChildPatch::new().unset("helpful");
        assert_eq!(
            gone.then(&vote).unwrap(),
            ChildPatch::new().set("helpful", 1)
        );
        assert_eq!(vote.then(&gone).unwrap(), gone);
        // Overlapping paths, and an `$inc` of what is not a number, stay apart.
        assert_eq!(
            ChildPatch::new()
                .set("meta", 1)
                .then(&ChildPatch::new().set("meta.a", 2)),
            None
        );
        assert_eq!(ChildPatch::new().set("helpful", "x").then(&vote), None);

        let (a, b) = (Bson::Int32(1), Bson::Int32(2));
        let queued = [
            (a.clone(), vote.clone()),
            (a.clone(), vote.clone()),
            (b.clone(), vote.clone()),
            (a.clone(), vote.clone()),
        ];
        let composed = compose(&queued);
        let children: Vec<&Bson> = composed.iter().map(|(c, _)| c).collect();
        assert_eq!(children, [&a, &b]);
        assert_eq!(composed[0].1, ChildPatch::new().inc("helpful", 3));
    }

    #[test]
    fn equal_patches_no_view_needs_the_child_for_go_together() {
        let vote = ChildPatch::new().inc("helpful", 1);
        let rated = ChildPatch::new().inc("stars", 1);
        let (a, b, c) = (Bson::Int32(1), Bson::Int32(2), Bson::Int32(3));
        let mut patches = vec![
            (a.clone(), vote.clone()),
            (b.clone(), rated.clone()),
            (c.clone(), vote.clone()),
            (Bson::Int32(4), ChildPatch::new().set("meta", 1)),
            (Bson::Int32(4), ChildPatch::new().set("meta.x", 1)),
        ];
        let groups = blind(&mut patches, &[SPEC]);
        assert_eq!(groups, [(vote, vec![a, c])]);
        // A summed field needs the child as it was; a child patched twice keeps its order.
        let left: Vec<&Bson> = patches.iter().map(|(child, _)| child).collect();
        assert_eq!(left, [&b, &Bson::Int32(4), &Bson::Int32(4)]);
    }

    #[test]
    fn views_move_or_show_by_what_the_patch_touches() {
        let votes = ChildPatch::new().inc("helpful", 1);
        assert!(!moves_in(&votes, &SPEC));
        assert!(moves_in(&ChildPatch::new().set("rating", 3), &SPEC));
        assert!(moves_in(&ChildPatch::new().set("verified", false), &SPEC));
        assert!(shows_in(&votes, &SPEC));
        let preview = SubsetSpec {
            embed: Some(&[crate::model::FieldName {
                rust: "text",
                bson: "body",
            }]),
            ..SPEC
        };
        assert!(!shows_in(&votes, &preview));
        assert!(shows_in(&ChildPatch::new().set("body", "x"), &preview));
        let mut update = Update::default();
        let edit = ChildPatch::new().set("body", "x").inc("helpful", 1);
        edit.add_to(&mut update, "p.$[c1].", |path| holds(&preview, path));
        assert_eq!(
            update.into_document(),
            doc! { "$set": { "p.$[c1].body": "x" } }
        );
    }
}
