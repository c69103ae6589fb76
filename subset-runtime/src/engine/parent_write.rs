//! The parent write: the one way an operation updates a parent.
//!
//! An operation says what to change ([`ParentUpdate`]: its own conditions, and what to
//! `$push`, `$set`, `$inc` or `$unset`); [`RawStore::write_parent`] adds what every parent update
//! must carry, sends it, and says what happened ([`Written`]):
//!
//! - the model guard: the parent must be built under this store's definition of the model
//!   ([`crate::engine::model_change`]), so that code of one definition never edits views of
//!   another in place;
//! - in a transaction, the touch of `_subset.w`, so that the update always modifies the parent
//!   and conflicts with any concurrent transaction on it (a rebuild under another model, say,
//!   which read the children before this one changed them);
//! - without one, the fence: the lease's token ([`crate::engine::exec`]), so that a writer
//!   that outlasted its lease writes nothing.
//!
//! When the update matches nothing, one read says why, and what follows from it is recorded
//! for the executor, which settles it after the steps, in one place: a parent of another
//! definition is rebuilt or marked for a rebuild; a parent whose lease was lost is marked and
//! reported.

use crate::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::options::{UpdateModifications, WriteConcern};

use super::exec::Ctx;
use super::model_change::{touch, MARKER};
use super::numbers::Bounds;
use super::RawStore;
use crate::error::{driver, Error, Result};

/// What an operation asks of a parent.
#[derive(Debug, Default)]
pub(crate) struct ParentUpdate {
    /// The operation's own conditions, besides the parent's `_id`.
    pub(crate) filter: Document,
    /// The update; empty when the operation changed children but nothing in the parent (then
    /// the write, in a transaction, is the touch alone: see [`ParentUpdate::touch_only`]).
    pub(crate) update: Document,
    /// The update's array filters.
    pub(crate) array_filters: Vec<Document>,
    /// Aggregation stages to send instead of `update`'s operators (which may then only
    /// `$set` and `$unset`, and follow the stages as stages of their own); no array filters.
    pub(crate) stages: Vec<Document>,
    /// Which model guard the update carries.
    pub(crate) guard: Guard,
    /// Whether this is the operation's last write of the parent once it applies: without a
    /// transaction, it then gives the lease back in the same update, saving a round trip.
    pub(crate) last: bool,
    /// Another update to send when this one matches nothing, before anything is read (a push
    /// at the head of a view, whose guard fails for a child arriving late, then sorts).
    pub(crate) otherwise: Option<Box<ParentUpdate>>,
}

/// The model guard a parent update carries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Built under this store's definition, with every subset field present: an update in
    /// place, which must never create a field (a parent without one is settled instead).
    #[default]
    InPlace,
    /// Built under this store's definition: a recompute, which writes a field whole.
    Marked,
    /// None: a rebuild, which writes every view whole whatever the parent was built under.
    Rebuild,
}

/// What a parent update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// It applied.
    Applied,
    /// The parent is as the guard asks, but the operation's own conditions did not hold.
    Missed,
    /// There is no such parent.
    Missing,
    /// The parent is built under another definition (or its lease was lost): nothing was
    /// written, and the executor settles it after the steps, from the child collection, so
    /// the operation need not write it further.
    Outdated,
}

impl ParentUpdate {
    /// An update of the parent with no conditions of the operation's own.
    pub(crate) fn of(update: Document) -> Self {
        ParentUpdate {
            update,
            ..ParentUpdate::default()
        }
    }

    /// The write of an operation that changed children but nothing in the parent: the parent
    /// may be built under another model whose views show the change, so where it stands is
    /// found out, and in a transaction the parent is touched (a rebuild under another model
    /// that read the children before this write then conflicts with it and starts over; a
    /// read would not conflict).
    pub(crate) fn touch_only() -> Self {
        ParentUpdate::default()
    }
}

impl RawStore {
    /// Sends `write` to `parent` with the guard, the touch or the fence (see the module docs).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] when the server refuses the update or cannot be reached (the
    /// caller may refine a refusal for the document's size).
    pub(crate) async fn write_parent(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        write: ParentUpdate,
    ) -> Result<Written> {
        let mut next = Some(write);
        let mut guard = Guard::InPlace;
        let mut touch_only = true;
        let mut bounds = Bounds::default();
        while let Some(mut write) = next.take() {
            guard = write.guard;
            touch_only = write.update.is_empty() && write.stages.is_empty();
            next = write.otherwise.take().map(|w| *w);
            if let Some(written) = send(self, ctx, parent, write, &mut bounds).await? {
                return Ok(written);
            }
        }
        match why_missed(self, ctx, parent, guard, &bounds).await? {
            // Nothing to send, and nothing against it.
            Written::Missed if touch_only => Ok(Written::Applied),
            other => Ok(other),
        }
    }
}

/// Sends one update of `store`'s with what every parent update carries; `Some` when it applied
/// (or there was nothing to send). `bounds`: the conditions that kept its counts and sums in
/// range, for [`why_missed`].
async fn send(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    parent: &Bson,
    write: ParentUpdate,
    bounds: &mut Bounds,
) -> Result<Option<Written>> {
    let Some(statement) = statement(store, ctx, parent, write, bounds).await? else {
        return Ok(None);
    };
    let parents = store.parents::<Document>();
    let update = match statement.update {
        Change::Operators(update) => UpdateModifications::Document(update),
        Change::Pipeline(stages) => UpdateModifications::Pipeline(stages),
    };
    let mut send = parents.update_one(statement.filter, update);
    if !statement.array_filters.is_empty() {
        send = send.array_filters(statement.array_filters);
    }
    let sent = match ctx.run(send).await {
        Ok(sent) => sent,
        Err(e) => return Err(refused(store, parent, bounds, e).await),
    };
    if sent.matched_count == 0 {
        return Ok(None);
    }
    if statement.release {
        ctx.released(parent);
    }
    Ok(Some(Written::Applied))
}

/// One parent update as it goes to the server: with the guard, the touch or the fence.
pub(crate) struct Statement {
    filter: Document,
    update: Change,
    array_filters: Vec<Document>,
    /// Whether it gives the lease back when it applies (see [`Ctx::released`]).
    pub(crate) release: bool,
}

/// What a [`Statement`] changes: update operators, or an aggregation pipeline.
enum Change {
    Operators(Document),
    Pipeline(Vec<Document>),
}

impl Statement {
    /// The statement as an `update` command carries it.
    pub(crate) fn command(self) -> Document {
        let update = match self.update {
            Change::Operators(update) => Bson::Document(update),
            Change::Pipeline(stages) => Bson::from(stages),
        };
        let mut statement = doc! { "q": self.filter, "u": update };
        if !self.array_filters.is_empty() {
            statement.insert("arrayFilters", self.array_filters);
        }
        statement
    }
}

/// `write` to `parent` with what every parent update carries; `None` when there is nothing to
/// send.
async fn statement(
    store: &RawStore,
    ctx: &Ctx<'_>,
    parent: &Bson,
    write: ParentUpdate,
    bounds: &mut Bounds,
) -> Result<Option<Statement>> {
    let ParentUpdate {
        filter: own,
        mut update,
        array_filters,
        stages,
        guard,
        last,
        otherwise: _,
    } = write;
    let mut filter = doc! { "_id": parent.clone() };
    match guard {
        Guard::InPlace => filter.extend(store.model().in_place().await?),
        Guard::Marked => filter.extend(store.model().marked(&*store.model().registry().await?)),
        Guard::Rebuild => {}
    }
    filter.extend(own);
    *bounds =
        Bounds::of(store.spec(), &mut update).map_err(|o| o.at(store.collection_name(), parent))?;
    bounds.filter(&mut filter);
    let lease = ctx.lease(parent);
    if let Some(lease) = lease {
        lease.fence(&mut filter);
    }
    if ctx.atomic() {
        // A parent without a marker gets one holding only the touch, which still counts
        // as no marker.
        let (field, value) = touch();
        add(&mut update, "$set", field, value);
    }
    if update.is_empty() && stages.is_empty() {
        return Ok(None);
    }
    // A parent the executor will settle keeps its lease until then; so does one the lease
    // found without a marker, whose `_subset` the executor removes with the lease.
    let release = lease.filter(|_| last && !ctx.is_outdated(parent) && !ctx.is_bare(parent));
    if let Some(lease) = release {
        lease.give_back_with(&mut update);
    }
    let update = match stages.is_empty() {
        true => Change::Operators(update),
        false => Change::Pipeline(pipeline(stages, update)),
    };
    Ok(Some(Statement {
        filter,
        update,
        array_filters,
        release: release.is_some(),
    }))
}

/// `stages`, then `update`'s `$set` and `$unset` (the touch, the lease's give-back) as stages
/// of their own, each value a literal.
fn pipeline(mut stages: Vec<Document>, update: Document) -> Vec<Document> {
    for (op, fields) in update {
        let Bson::Document(fields) = fields else {
            continue;
        };
        match op.as_str() {
            "$set" => {
                let set: Document = fields
                    .into_iter()
                    .map(|(f, v)| (f, Bson::Document(doc! { "$literal": v })))
                    .collect();
                stages.push(doc! { "$set": set });
            }
            "$unset" => {
                let unset: Vec<String> = fields.into_iter().map(|(f, _)| f).collect();
                stages.push(doc! { "$unset": unset });
            }
            // An operator has no stage here: a caller of stages sends none.
            _ => debug_assert!(false, "{op} beside stages"),
        }
    }
    stages
}

/// `write` to `parent` as one statement of an `update` command of several parents (see
/// [`send_updates`]), with what [`RawStore::write_parent`] adds; only its first form, never its
/// [`ParentUpdate::otherwise`]. `None` when there is nothing to send.
pub(crate) async fn parent_statement(
    store: &RawStore,
    ctx: &Ctx<'_>,
    parent: &Bson,
    write: ParentUpdate,
) -> Result<Option<Statement>> {
    statement(store, ctx, parent, write, &mut Bounds::default()).await
}

/// Sends `statements` (`{q, u}` documents) as one unordered `update` command of `collection`
/// (`store`'s parents' or a child collection), in `ctx`'s session and transaction, if any, and
/// otherwise with `concern`, or without one the database's write concern (which the store's
/// other updates carry).
pub(crate) async fn send_updates(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    collection: &str,
    statements: Vec<Document>,
    concern: Option<&WriteConcern>,
) -> Result<Updated> {
    let mut command = doc! {
        "update": collection,
        "updates": statements,
        "ordered": false,
    };
    let concern = concern.or(store.database().write_concern());
    // A write in a transaction carries none of its own.
    if let (Some(concern), false) = (concern, ctx.atomic()) {
        command.insert(
            "writeConcern",
            crate::encode::document(concern, "a write concern")?,
        );
    }
    let reply = ctx
        .run(store.database().run_command(command))
        .await
        .map_err(|e| store.mongo(e))?;
    let matched = match reply.get("n") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        _ => 0,
    };
    let refused = reply.get_array("writeErrors").is_ok_and(|e| !e.is_empty())
        || reply.contains_key("writeConcernError");
    Ok(Updated { matched, refused })
}

/// What [`send_updates`] did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Updated {
    /// How many statements matched a parent.
    pub(crate) matched: i64,
    /// Whether the server refused some statements, or did not write as durably as asked.
    pub(crate) refused: bool,
}

/// The error of an update of `parent` that the server refused, read outside any transaction
/// (the refusal has aborted ours): [`Error::NumberOverflow`] for an increment it would not
/// carry past `i64` (which `bounds` left to it); [`Error::MalformedParent`] for a view's field
/// that is not an array of documents, or a count or sum that is not a number (edited behind
/// the library's back), which no update can apply to; else the server's own error.
async fn refused(
    store: &RawStore,
    parent: &Bson,
    bounds: &Bounds,
    e: mongodb::error::Error,
) -> Error {
    if !driver::is_bad_type(&e) {
        return store.mongo(e);
    }
    let mut projection: Document = bounds
        .fields()
        .map(|f| (f.to_owned(), Bson::Int32(1)))
        .collect();
    for spec in store.spec().subsets {
        projection.extend(super::query::subset_projection(spec));
    }
    let parents = store.parents::<RawDocumentBuf>();
    let find = parents
        .find_one(doc! { "_id": parent.clone() })
        .projection(projection);
    let Ok(Some(found)) = find.await else {
        return store.mongo(e);
    };
    if let Some(o) = bounds.broken(&found) {
        return o.at(store.collection_name(), parent);
    }
    misshapen(store, &found).unwrap_or_else(|| store.mongo(e))
}

/// The first field of `found` (a parent's views, as [`super::query::subset_projection`] reads
/// them) that no update of them can apply to: a view's field that is not an array of
/// documents, or a count or sum that is not a number.
fn misshapen(store: &RawStore, found: &RawDocumentBuf) -> Option<Error> {
    let collection = store.collection_name();
    for spec in store.spec().subsets {
        if matches!(found.get(spec.field), Ok(Some(_))) {
            if let Err(e) = crate::decode::subset_elements(found, collection, spec) {
                return Some(e);
            }
        }
        let totals = spec
            .count
            .into_iter()
            .chain(spec.sums.iter().map(|s| s.parent));
        for field in totals {
            let value = match found.get(field) {
                Ok(Some(value)) => value,
                _ => continue,
            };
            if !crate::values::is_number(value.element_type()) {
                return Some(Error::MalformedParent {
                    collection: collection.to_owned(),
                    id: Box::new(crate::decode::id_of(found)),
                    field: field.to_owned(),
                    problem: format!(
                        "is {}, not a number",
                        crate::values::type_name(value.element_type())
                    ),
                });
            }
        }
    }
    None
}

/// Why an update of `parent` matched nothing (or, for one that sent nothing, whether it would
/// have): one read of the marker, the lease and whether each field is there.
async fn why_missed(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    parent: &Bson,
    guard: Guard,
    bounds: &Bounds,
) -> Result<Written> {
    let parents = store.parents::<RawDocumentBuf>();
    // `$slice: 0` reads none of an array.
    let mut projection = doc! { MARKER: 1 };
    for spec in store.spec().subsets {
        projection.insert(spec.field, doc! { "$slice": 0 });
    }
    for field in bounds.fields() {
        projection.insert(field, 1);
    }
    // Where the parent is as the guard asks, a count or sum the update would have carried out
    // of range is why it missed: refused, with nothing written.
    let overflow = |found: &RawDocumentBuf| match bounds.broken(found) {
        Some(o) => Err(o.at(store.collection_name(), parent)),
        None => Ok(Written::Missed),
    };
    let find = parents
        .find_one(doc! { "_id": parent.clone() })
        .projection(projection);
    let Some(found) = ctx.run(find).await.map_err(|e| store.mongo(e))? else {
        return Ok(Written::Missing);
    };
    if let Some(lease) = ctx.lease(parent) {
        if !lease.is_held_by(found.get_document(MARKER).ok()) {
            ctx.lost(parent);
            return Ok(Written::Outdated);
        }
    }
    if guard == Guard::Rebuild {
        return overflow(&found);
    }
    let registry = store.model().registry().await?;
    let whole = guard == Guard::Marked
        || store
            .spec()
            .subsets
            .iter()
            .all(|spec| matches!(found.get(spec.field), Ok(Some(_))));
    if whole && store.model().built_here(&found, &registry) {
        return overflow(&found);
    }
    ctx.outdated(parent);
    Ok(Written::Outdated)
}

/// Adds `field: value` to the operator `op` of `update`.
pub(crate) fn add(update: &mut Document, op: &str, field: String, value: Bson) {
    match update.get_document_mut(op) {
        Ok(fields) => {
            fields.insert(field, value);
        }
        Err(_) => {
            update.insert(op, doc! { field: value });
        }
    }
}
