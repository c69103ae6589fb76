//! Which definition of the model each parent's views were built under, so that a model can
//! change on live data: a new view, another `keep`, order, filter, preview, count or sum.
//!
//! **The marker.** Every parent this library writes carries `_subset: { d, v }`: `d` names the
//! whole definition the parent's views were built under (a digest of every view of the store),
//! `v` holds, per view field, the digest of that view without its `keep` and the `keep`. A
//! reader trusts a view whose digest is its own and whose stored `keep` covers its own (a
//! larger one is trimmed); any other view it computes from the child collection, which is
//! always right and costs a query. Only writers of the same whole definition change a parent
//! in place: each parent update is conditional on `d`, so code with another definition never
//! edits views it does not know (a view added by newer code, say).
//!
//! **The registry.** One document per parent collection in [`DEFINITIONS_COLLECTION`]: the
//! definition writes converge to (`current`), every definition seen, and the one parents
//! without a marker were built under (`legacy`, the first registered: data written before
//! markers existed, or by other programs). A store registers its definition on first use (its
//! first write, or its first read of a parent without a marker); a definition never seen before becomes current (a deploy of new code), one seen before
//! does not (an old process restarting during a rolling deploy). [`crate::raw::Store::rebuild`] makes
//! its definition current explicitly (after a rollback).
//!
//! **A write that finds a parent of another definition** (its conditional update matched
//! nothing) settles it after its own child-collection write: if the store's definition is
//! current it rebuilds every view of the parent from the child collection and marks it; if not
//! (old code during a deploy) it cannot build the current views, so it marks the parent as
//! built under none, and every reader computes it until a writer of the current definition or a
//! rebuild comes by. Old and new code never undo each other's work: the parent only ever moves
//! towards the current definition.

use std::sync::{Arc, Mutex};

use crate::bson::{doc, oid::ObjectId, Bson, Document, RawDocument, RawDocumentBuf};
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use super::exec::{Ctx, Steps};
use super::RawStore;
use crate::error::{Error, Result};
use crate::model::{ParentSpec, SubsetSpec};

/// The parent field that holds the marker.
pub const MARKER: &str = "_subset";

/// The collection of the registry: one document per parent collection, `_id` its name.
pub const DEFINITIONS_COLLECTION: &str = "subset_definitions";

/// How many times an ordered rebuild of one parent starts again when a concurrent writer
/// marked the parent while it read.
const ORDERED_REBUILDS: usize = 4;

/// One store's definition: its digest, and each view's.
#[derive(Debug)]
pub(crate) struct Definition {
    /// Whether the store knows only some fields of a model defined elsewhere
    /// ([`RawStore::for_fields`]): it reads markers but neither registers, checks nor writes
    /// them.
    partial: bool,
    digest: String,
    /// Per subset field, in declaration order: its digest without `keep`.
    views: Vec<String>,
    marker: Document,
}

impl Definition {
    pub(crate) fn of(spec: &ParentSpec, partial: bool) -> Self {
        let views: Vec<String> = spec.subsets.iter().map(view_digest).collect();
        let mut whole: Vec<String> = spec
            .subsets
            .iter()
            .zip(&views)
            .map(|(s, v)| format!("{}={v}/{}", s.field, s.keep))
            .collect();
        whole.sort();
        let digest = short_digest(&whole.join(";"));
        let v: Document = spec
            .subsets
            .iter()
            .zip(&views)
            .map(|(s, v)| {
                let view = doc! { "b": v.as_str(), "k": i64::from(s.keep) };
                (s.field.to_owned(), Bson::Document(view))
            })
            .collect();
        let marker = doc! { "d": digest.as_str(), "v": v };
        Definition {
            partial,
            digest,
            views,
            marker,
        }
    }

    /// The whole definition's digest, as parents built under it hold in `_subset.d`.
    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    /// The marker of a parent built under this definition.
    pub(crate) fn marker(&self) -> &Document {
        &self.marker
    }
}

/// Everything a view's embedded array, count and sums depend on, except `keep`, as text that
/// changes when any of it does.
fn view_digest(spec: &SubsetSpec) -> String {
    let order: Vec<String> = spec
        .order()
        .map(|k| format!("{}:{}", k.field, k.direction.as_i32()))
        .collect();
    let embed = match spec.embed {
        None => "*".to_owned(),
        Some(fields) => {
            let mut names: Vec<&str> = fields.iter().map(|f| f.bson).collect();
            names.sort_unstable();
            names.join(",")
        }
    };
    let filter = spec
        .filter
        .map_or(String::new(), |f| format!("{}={}", f.field, f.equals));
    let mut sums: Vec<String> = spec
        .sums
        .iter()
        .map(|s| format!("{}={}", s.parent, s.child))
        .collect();
    sums.sort();
    let text = format!(
        "{}|{}|{}|{}|{}|{}|{}",
        spec.child_collection,
        spec.key,
        order.join(","),
        filter,
        embed,
        spec.count.unwrap_or(""),
        sums.join(",")
    );
    short_digest(&text)
}

/// 16 hex digits of the SHA-256 of `text`: stable across builds and platforms, which a
/// `Hash` is not promised to be.
fn short_digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The definition `parent` is marked with: `Ok(None)` for none (no marker, or one holding
/// only a write's touch, see [`touch`]), `Err` for a marker that is not a document.
fn marked_with(parent: &RawDocument) -> std::result::Result<Option<&str>, ()> {
    match parent.get(MARKER) {
        Ok(None) => Ok(None),
        Ok(Some(marker)) => match marker.as_document() {
            Some(m) => Ok(m.get_str("d").ok()),
            None => Err(()),
        },
        Err(_) => Err(()),
    }
}

/// The `$set` a parent update in a transaction adds, `_subset.w` to a new value, so that it
/// always modifies the parent: an update that changes nothing else (a push sliced off at once,
/// copies of a child no view holds) would not write, and a rebuild under another model in a
/// concurrent transaction, which read the children before this one changed them, would not
/// conflict with it.
pub(crate) fn touch() -> (String, Bson) {
    (format!("{MARKER}.w"), Bson::ObjectId(ObjectId::new()))
}

/// What the registry says of a parent collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registry {
    /// The definition writes converge to.
    pub(crate) current: String,
    /// The definition parents without a marker were built under.
    pub(crate) legacy: String,
}

/// A store's cached view of the registry: read on first use, and again when a write finds a
/// parent of another definition (the only time `current` matters).
#[derive(Debug, Default)]
pub(crate) struct RegistryCache(Mutex<Option<Arc<Registry>>>);

/// How a view of a stored parent may be read under this store's definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ViewState {
    /// Built under this view's definition with at least its `keep`: the first `keep` stored
    /// are the view.
    Fresh,
    /// Built under another definition, or not at all: compute it from the child collection.
    Stale,
}

/// Where a parent stands after a write to it missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The update applied.
    Written,
    /// The parent exists under this definition (the update's other conditions missed).
    Current,
    /// The parent exists under another definition: the write must settle it.
    Stale,
    /// No such parent.
    Missing,
}

impl RawStore {
    /// The registry's word on this collection, registering this store's definition on first
    /// use (every write asks for it first; a read only for a parent without a marker).
    pub(crate) async fn registry(&self) -> Result<Arc<Registry>> {
        let cached = self.lock_registry().clone();
        match cached {
            Some(known) => Ok(known),
            None => self.load_registry(true).await,
        }
    }

    /// Reads the registry again (a write found a parent of a definition it did not expect).
    pub(crate) async fn refresh_registry(&self) -> Result<Arc<Registry>> {
        self.load_registry(false).await
    }

    fn lock_registry(&self) -> std::sync::MutexGuard<'_, Option<Arc<Registry>>> {
        // A panic while holding the lock cannot leave the cache half-written.
        self.registry.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn load_registry(&self, register: bool) -> Result<Arc<Registry>> {
        let register = register && !self.definition.partial;
        let coll = self
            .database()
            .collection::<Document>(DEFINITIONS_COLLECTION);
        let error = |e| Error::mongo(DEFINITIONS_COLLECTION, e);
        let own = self.definition.digest().to_owned();
        let id = self.collection_name();
        let mut registry = None;
        // A first registration that races another store's insert, or that is applied short of
        // its write concern, reads the registry back.
        for _ in 0..3 {
            let found = coll.find_one(doc! { "_id": id }).await.map_err(error)?;
            let Some(found) = found else {
                // Parents already marked (a registry lost, or dropped): which model the
                // unmarked ones were built under is unknown, and they count as outdated.
                let marked = self
                    .parents::<Document>()
                    .find_one(doc! { MARKER: { "$exists": true } })
                    .projection(doc! { "_id": 1 })
                    .await
                    .map_err(|e| self.mongo(e))?;
                let legacy = if marked.is_some() { "" } else { own.as_str() };
                let first = doc! {
                    "_id": id, "current": own.as_str(), "legacy": legacy, "seen": [own.as_str()],
                };
                match coll.insert_one(first).await {
                    Ok(_) => {
                        registry = Some(Registry {
                            current: own.clone(),
                            legacy: legacy.to_owned(),
                        });
                        break;
                    }
                    // Another store's first registration, or ours applied short of its
                    // write concern: read it back.
                    Err(e)
                        if super::driver_error::is_duplicate_id(&e)
                            || super::driver_error::is_write_concern(&e) =>
                    {
                        continue
                    }
                    Err(e) => return Err(error(e)),
                }
            };
            let text = |key: &str| found.get_str(key).unwrap_or_default().to_owned();
            let seen = found
                .get_array("seen")
                .is_ok_and(|s| s.iter().any(|d| d.as_str() == Some(own.as_str())));
            let mut current = text("current");
            if register && !seen {
                // A definition never seen before is new code: writes converge to it.
                let update = doc! {
                    "$set": { "current": own.as_str() }, "$addToSet": { "seen": own.as_str() },
                };
                match coll.update_one(doc! { "_id": id }, update).await {
                    Ok(_) => {}
                    // Applied short of its write concern; the update is idempotent, and a
                    // rollback of it leaves the definition current where it was.
                    Err(e) if super::driver_error::is_write_concern(&e) => {
                        tracing::warn!(collection = id, error = %e, "registering the definition: write concern not met");
                    }
                    Err(e) => return Err(error(e)),
                }
                tracing::info!(collection = id, definition = %own, "registered a new definition of the model");
                current = own.clone();
            }
            registry = Some(Registry {
                current,
                legacy: text("legacy"),
            });
            break;
        }
        let Some(registry) = registry else {
            return Err(Error::Registry {
                collection: id.to_owned(),
                reason: "it could not be read back after three attempts to register".to_owned(),
            });
        };
        let registry = Arc::new(registry);
        *self.lock_registry() = Some(registry.clone());
        Ok(registry)
    }

    /// [`RawStore::marked`] of a store of some fields: the parent's marker has no entry for
    /// them (no marker, or one of a model without them), or entries that are exactly their
    /// definitions and `keep`s; never one marked as built under none. Without `$or`, which other conditions of a
    /// filter use.
    fn fields_marked(&self) -> Document {
        // Not a parent marked as built under none (a rebuild under way, or one to come).
        let mut exact = doc! { format!("{MARKER}.d"): { "$ne": "" } };
        for (spec, b) in self.spec().subsets.iter().zip(&self.definition.views) {
            let view = format!("{MARKER}.v.{}", spec.field);
            exact.insert(
                format!("{view}.b"),
                doc! { "$in": [b.as_str(), Bson::Null] },
            );
            let keep = i64::from(spec.keep);
            exact.insert(format!("{view}.k"), doc! { "$in": [keep, Bson::Null] });
        }
        exact
    }

    /// [`RawStore::built_here`] of a store of some fields (see [`RawStore::fields_marked`]).
    fn fields_built_here(&self, parent: &RawDocument) -> bool {
        let marker = match parent.get(MARKER) {
            Ok(Some(m)) => m.as_document(),
            _ => None,
        };
        if marker.is_some_and(|m| m.get_str("d").ok() == Some("")) {
            return false;
        }
        let views = marker.and_then(|m| m.get_document("v").ok());
        self.spec()
            .subsets
            .iter()
            .zip(&self.definition.views)
            .all(
                |(spec, b)| match views.map(|v| v.get_document(spec.field)) {
                    Some(Ok(view)) => {
                        view.get_str("b").ok() == Some(b.as_str())
                            && view
                                .get("k")
                                .ok()
                                .flatten()
                                .and_then(crate::decode::count_value)
                                == Some(i64::from(spec.keep))
                    }
                    _ => true,
                },
            )
    }

    /// Whether this store knows only some fields of its model ([`RawStore::for_fields`]).
    pub(crate) fn is_partial(&self) -> bool {
        self.definition.partial
    }

    /// Makes this store's definition the one writes converge to (see [`RawStore::rebuild`]).
    pub(crate) async fn make_current(&self) -> Result<()> {
        if self.definition.partial {
            return Err(Error::PartialModel {
                collection: self.collection_name().to_owned(),
            });
        }
        let own = self.definition.digest();
        let update = doc! {
            "$set": { "current": own }, "$addToSet": { "seen": own },
            "$setOnInsert": { "legacy": own },
        };
        self.database()
            .collection::<Document>(DEFINITIONS_COLLECTION)
            .update_one(doc! { "_id": self.collection_name() }, update)
            .upsert(true)
            .await
            .map_err(|e| Error::mongo(DEFINITIONS_COLLECTION, e))?;
        self.refresh_registry().await.map(|_| ())
    }

    /// The condition every in-place parent update adds to its filter: that the parent was
    /// built under this store's definition.
    pub(crate) fn marked(&self, registry: &Registry) -> Document {
        let own = self.definition.digest();
        if self.definition.partial {
            return self.fields_marked();
        }
        let path = format!("{MARKER}.d");
        if registry.legacy == own {
            doc! { path: { "$in": [own, Bson::Null] } }
        } else {
            doc! { path: own }
        }
    }

    /// The filter an in-place parent update adds: [`RawStore::marked`], and every subset field
    /// present, so that a write never creates a field in place (a parent written without it,
    /// or whose field was removed, is settled instead, which builds it whole).
    pub(crate) async fn in_place(&self) -> Result<Document> {
        let mut filter = self.marked(&*self.registry().await?);
        for spec in self.spec().subsets {
            filter.insert(spec.field, doc! { "$exists": true });
        }
        Ok(filter)
    }

    /// Whether `parent` (a stored parent, or a projection holding its marker) was built under
    /// this store's definition.
    pub(crate) fn built_here(&self, parent: &RawDocument, registry: &Registry) -> bool {
        let own = self.definition.digest();
        if self.definition.partial {
            return self.fields_built_here(parent);
        }
        match marked_with(parent) {
            Ok(None) => registry.legacy == own,
            Ok(Some(d)) => d == own,
            Err(()) => false,
        }
    }

    /// How the view `spec` of the stored `parent` may be read. The registry is read only for
    /// a parent without a marker.
    pub(crate) async fn view_state(
        &self,
        parent: &RawDocument,
        spec: &SubsetSpec,
    ) -> Result<ViewState> {
        let unmarked = matches!(marked_with(parent), Ok(None));
        let marker = match parent.get(MARKER) {
            // Unmarked: written before markers, or around this library. A store of some
            // fields takes such a parent as built under them, as every tool did before.
            _ if unmarked && self.definition.partial => return Ok(ViewState::Fresh),
            // Built under the first model, if this is it and the field is there: a field
            // missing from an unmarked parent is a view added since (or never built), which
            // the child collection answers.
            _ if unmarked => {
                let registry = self.registry().await?;
                let legacy = registry.legacy == self.definition.digest();
                let present = matches!(parent.get(spec.field), Ok(Some(_)));
                return Ok(if legacy && present {
                    ViewState::Fresh
                } else {
                    ViewState::Stale
                });
            }
            Ok(Some(m)) => m.as_document(),
            Ok(None) | Err(_) => None,
        };
        // A descriptor the store does not list (made at run time) has its digest made here.
        let own = match self.spec().subsets.iter().position(|s| s == spec) {
            Some(i) => self.definition.views.get(i).cloned(),
            None => None,
        }
        .unwrap_or_else(|| view_digest(spec));
        let view = marker
            .and_then(|m| m.get_document("v").ok())
            .and_then(|v| v.get_document(spec.field).ok());
        let Some(view) = view else {
            return Ok(ViewState::Stale);
        };
        if view.get_str("b").ok() != Some(own.as_str()) {
            return Ok(ViewState::Stale);
        }
        let stored_keep = match view.get("k") {
            Ok(Some(k)) => crate::decode::count_value(k).unwrap_or(0),
            _ => 0,
        };
        if stored_keep >= i64::from(spec.keep) {
            return Ok(ViewState::Fresh);
        }
        // Built with a smaller `keep`: enough when the array holds fewer than that, which is
        // then every child there is.
        let held = parent
            .get_array(spec.field)
            .map_or(i64::MAX, |a| a.into_iter().count() as i64);
        Ok(if held < stored_keep {
            ViewState::Fresh
        } else {
            ViewState::Stale
        })
    }

    /// The stored `parent` as a reader of this definition sees it: each view built under
    /// another definition replaced by what the child collection says
    /// ([`crate::raw::Children`]'s `computed`, a query or two per view), each built with a
    /// larger `keep` cut to this one. A parent whose views are all this definition's is
    /// returned as it is, without a copy.
    pub(crate) async fn served(
        &self,
        ctx: &mut Ctx<'_>,
        parent: RawDocumentBuf,
    ) -> Result<RawDocumentBuf> {
        let mut stale = Vec::new();
        let mut long = Vec::new();
        for spec in self.spec().subsets {
            match self.view_state(&parent, spec).await? {
                ViewState::Stale => stale.push(spec),
                ViewState::Fresh => {
                    let held = parent
                        .get_array(spec.field)
                        .map_or(0, |a| a.into_iter().count());
                    if held > spec.keep as usize {
                        long.push(spec);
                    }
                }
            }
        }
        if stale.is_empty() && long.is_empty() {
            return Ok(parent);
        }
        let id = crate::decode::id_of(&parent);
        let malformed = |problem: String| Error::MalformedParent {
            collection: self.collection_name().to_owned(),
            id: Box::new(id.clone()),
            field: MARKER.to_owned(),
            problem,
        };
        let mut doc = Document::try_from(parent.as_ref())
            .map_err(|e| malformed(format!("is unreadable: {e}")))?;
        for spec in long {
            if let Ok(array) = doc.get_array_mut(spec.field) {
                array.truncate(spec.keep as usize);
            }
        }
        for spec in stale {
            let fields = self.children(spec).computed(ctx, &id).await?;
            doc.extend(fields);
        }
        RawDocumentBuf::try_from(&doc).map_err(|e| malformed(format!("cannot be re-encoded: {e}")))
    }

    /// After a write that changed children of `parent` but nothing in it (a patch of fields no
    /// view of this model shows, a push or removal no view or count of it sees): the parent
    /// may be built under another model, whose views show the change, so where it stands is
    /// checked, and a parent of another model is settled. In a transaction the check is a
    /// touch of the marker, conditional on the parent being built under this model: a
    /// rebuild under another model running at the same moment, which read the children before
    /// this write, then conflicts with it and starts over (a read would not conflict, and the
    /// rebuild would mark a view that misses this write). Without one, it is a read.
    ///
    /// Where the parent stood: [`Standing::Stale`] ones are settled already.
    pub(crate) async fn unwritten(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Standing> {
        if ctx.atomic() {
            let mut filter = doc! { "_id": parent.clone() };
            filter.extend(self.in_place().await?);
            // A parent without a marker gets one holding only the touch, which still counts
            // as no marker.
            let (field, value) = touch();
            let touch = doc! { "$set": { field: value } };
            let parents = self.parents::<Document>();
            let touched = ctx
                .run(parents.update_one(filter, touch))
                .await
                .map_err(|e| self.mongo(e))?;
            if touched.matched_count == 1 {
                return Ok(Standing::Current);
            }
        }
        let standing = self.standing(ctx, parent).await?;
        if standing == Standing::Stale {
            self.settle(ctx, parent).await?;
        }
        Ok(standing)
    }

    /// Where `parent` stands, read after a write to it missed.
    pub(crate) async fn standing(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Standing> {
        let parents = self.parents::<RawDocumentBuf>();
        // The marker, and whether each field is there (`$slice: 0` reads none of an array).
        let mut projection = doc! { MARKER: 1 };
        for spec in self.spec().subsets {
            projection.insert(spec.field, doc! { "$slice": 0 });
        }
        let find = parents
            .find_one(doc! { "_id": parent.clone() })
            .projection(projection);
        let Some(found) = ctx.run(find).await.map_err(|e| self.mongo(e))? else {
            return Ok(Standing::Missing);
        };
        let registry = self.registry().await?;
        let whole = self
            .spec()
            .subsets
            .iter()
            .all(|spec| matches!(found.get(spec.field), Ok(Some(_))));
        if whole && self.built_here(&found, &registry) {
            return Ok(Standing::Current);
        }
        Ok(Standing::Stale)
    }

    /// Settles a parent a write found built under another definition, after the write's own
    /// child-collection change: rebuilt under this definition when it is the current one, else
    /// marked as built under none (see the module documentation). `true` when rebuilt.
    ///
    /// Boxed: a rebuild resyncs views, and a resync settles.
    pub(crate) fn settle<'a>(
        &'a self,
        ctx: &'a mut Ctx<'_>,
        parent: &'a Bson,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let registry = self.refresh_registry().await?;
            // A store of some fields never rebuilds: it cannot build the views it does not
            // know.
            if registry.current == self.definition.digest() && !self.definition.partial {
                self.rebuild_parent(ctx, parent).await.map(|()| true)
            } else {
                tracing::debug!(parent = %parent, "a parent of another definition: marked for rebuild");
                self.unmark(ctx, parent).await.map(|_| false)
            }
        })
    }

    /// Marks `parent` as built under no definition; returns the nonce it wrote, or `None`
    /// when there is no such parent.
    async fn unmark(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Option<ObjectId>> {
        let nonce = ObjectId::new();
        let update = doc! { "$set": { MARKER: { "d": "", "n": nonce } } };
        let parents = self.parents::<Document>();
        let updated = ctx
            .run(parents.update_one(doc! { "_id": parent.clone() }, update))
            .await
            .map_err(|e| self.mongo(e))?;
        Ok((updated.matched_count == 1).then_some(nonce))
    }

    /// Rebuilds every view of `parent` from the child collections and marks it as built under
    /// this definition. In a transaction, in one snapshot. In order, the parent is first
    /// marked as built under none with a nonce, and marked as built here only if the nonce is
    /// still there after every view is rebuilt: a writer of another definition that changed a
    /// child meanwhile has marked it again, and the rebuild starts over, so it never marks a
    /// view that missed that child.
    pub(crate) async fn rebuild_parent(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<()> {
        let parents = self.parents::<Document>();
        let set = doc! { "$set": { MARKER: self.definition.marker().clone() } };
        if ctx.atomic() {
            for spec in self.spec().subsets {
                self.children(spec).rebuild_view(ctx, parent).await?;
            }
            ctx.run(parents.update_one(doc! { "_id": parent.clone() }, set))
                .await
                .map_err(|e| self.mongo(e))?;
            return Ok(());
        }
        for attempt in 0..ORDERED_REBUILDS {
            if attempt > 0 {
                super::exec::backoff(attempt as u32).await;
            }
            let Some(nonce) = self.unmark(ctx, parent).await? else {
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
            let still = doc! { "_id": parent.clone(), format!("{MARKER}.n"): nonce };
            let marked = ctx
                .run(parents.update_one(still, set.clone()))
                .await
                .map_err(|e| self.mongo(e))?;
            if marked.matched_count == 1 {
                return Ok(());
            }
        }
        // Contended every time: left marked as built under none, which every reader computes
        // and the next write or rebuild finishes.
        tracing::debug!(parent = %parent, "rebuild contended; left for the next write");
        Ok(())
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

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        self.store.rebuild_parent(ctx, self.parent).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC;

    fn parent(subsets: Vec<SubsetSpec>) -> ParentSpec {
        ParentSpec::leak("products", subsets)
    }

    #[test]
    fn every_change_to_a_view_changes_its_digest_and_keep_only_the_whole() {
        let base = Definition::of(&parent(vec![TEST_SPEC]), false);
        let keep = Definition::of(
            &parent(vec![SubsetSpec {
                keep: 10,
                ..TEST_SPEC
            }]),
            false,
        );
        assert_eq!(base.views, keep.views);
        assert_ne!(base.digest, keep.digest);
        let changes = [
            SubsetSpec {
                sort: &TEST_SPEC.sort[..1],
                ..TEST_SPEC
            },
            SubsetSpec {
                count: Some("n"),
                ..TEST_SPEC
            },
            SubsetSpec {
                filter: Some(crate::model::FilterSpec {
                    field: "hidden",
                    equals: false,
                }),
                ..TEST_SPEC
            },
            SubsetSpec {
                embed: Some(&[]),
                ..TEST_SPEC
            },
            SubsetSpec {
                child_collection: "other",
                ..TEST_SPEC
            },
        ];
        for changed in changes {
            let other = Definition::of(&parent(vec![changed]), false);
            assert_ne!(base.views, other.views, "{changed:?}");
            assert_ne!(base.digest, other.digest);
        }
    }

    #[test]
    fn a_new_view_leaves_the_others_digests_alone() {
        let one = Definition::of(&parent(vec![TEST_SPEC]), false);
        let added = SubsetSpec {
            field: "first",
            keep: 3,
            ..TEST_SPEC
        };
        let two = Definition::of(&parent(vec![TEST_SPEC, added]), false);
        assert_eq!(one.views[0], two.views[0]);
        assert_ne!(one.digest, two.digest);
        // The order of declaration does not matter.
        let swapped = Definition::of(&parent(vec![added, TEST_SPEC]), false);
        assert_eq!(two.digest, swapped.digest);
        assert_eq!(
            one.digest,
            Definition::of(&parent(vec![TEST_SPEC]), false).digest
        );
    }
}
