//! The registry: one document per parent collection in the store's
//! [`Names::definitions`](crate::bookkeeping::Names::definitions), naming the
//! definition writes converge to and the one unmarked parents were built under.

use std::sync::{Arc, Mutex};

use super::Model;
use crate::bson::{doc, Document};
use mongodb::Database;

use super::{stored, MARKER};
use crate::bookkeeping::names::Names;
use crate::engine::RawStore;
use crate::error::{Error, Result};
use crate::model::ParentSpec;

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
pub(crate) struct RegistryCache {
    /// As a write of this store found it, its definition registered.
    written: Mutex<Option<Arc<Registry>>>,
    /// As a read found it (registering nothing): what reads use until a write has looked.
    read: Mutex<Option<Arc<Registry>>>,
}

/// Why the registry is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// A write's first look: registers this store's definition.
    Register,
    /// A write found a parent of another definition: reads it again (creating it if missing).
    Refresh,
    /// A read: writes nothing, and a registry that does not exist yet is taken as this store
    /// would register it.
    Read,
}

impl Model<'_> {
    /// The registry's word on this collection, registering this store's definition on first
    /// use (every write asks for it first; a read only for a parent without a marker).
    pub(crate) async fn registry(&self) -> Result<Arc<Registry>> {
        let cached = lock(&self.shared.registry.written).clone();
        match cached {
            Some(known) => Ok(known),
            None => load_registry(self, Load::Register).await,
        }
    }

    /// The registry's word for a read, which never writes (see [`Load::Read`]): as a write of
    /// this store last found it, else as a read did.
    pub(crate) async fn registry_to_read(&self) -> Result<Arc<Registry>> {
        let cached = lock(&self.shared.registry.written)
            .clone()
            .or_else(|| lock(&self.shared.registry.read).clone());
        match cached {
            Some(known) => Ok(known),
            None => load_registry(self, Load::Read).await,
        }
    }

    /// Reads the registry again (a write found a parent of a definition it did not expect).
    pub(crate) async fn refresh_registry(&self) -> Result<Arc<Registry>> {
        load_registry(self, Load::Refresh).await
    }

    /// Makes this store's definition the one writes converge to (see [`RawStore::rebuild`]).
    pub(crate) async fn make_current(&self) -> Result<()> {
        if self.shared.definition.partial {
            return Err(Error::PartialModel {
                collection: self.collection_name().to_owned(),
            });
        }
        let own = self.shared.definition.digest();
        let update = doc! {
            "$set": { "current": own, format!("definitions.{own}"): stored::document(&self.shared.spec) },
            "$addToSet": { "seen": own },
            "$setOnInsert": { "legacy": own },
        };
        let registry = self.bookkeeping().definitions();
        self.database()
            .collection::<Document>(registry)
            .update_one(doc! { "_id": self.collection_name() }, update)
            .upsert(true)
            .await
            .map_err(|e| Error::mongo(registry, e))?;
        self.refresh_registry().await.map(|_| ())
    }

    /// Drops from the registry the stored bodies of the definitions no parent is built under
    /// any more, once a rebuild has moved the parents to this one: every one but the current
    /// definition, and the legacy one while parents without a marker remain. Their digests stay
    /// in `seen` (they are small, and keep the order of deploys); a store of a dropped
    /// definition that writes again stores it whole again. Returns the digests dropped.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the registry or the parent collection cannot be read or written.
    pub(crate) async fn drop_unused_definitions(&self) -> Result<Vec<String>> {
        let name = self.bookkeeping().definitions();
        let registry = self.database().collection::<Document>(name);
        let error = |e| Error::mongo(name, e);
        let id = self.collection_name();
        let Some(found) = registry.find_one(doc! { "_id": id }).await.map_err(error)? else {
            return Ok(Vec::new());
        };
        let current = found.get_str("current").unwrap_or_default().to_owned();
        let legacy = found.get_str("legacy").unwrap_or_default();
        let stored: Vec<String> = found
            .get_document("definitions")
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default();
        let mut unused = Vec::new();
        for digest in stored.into_iter().filter(|d| *d != current) {
            let mut built = vec![doc! { format!("{MARKER}.d"): digest.as_str() }];
            if digest == legacy {
                built.push(doc! { MARKER: { "$exists": false } });
            }
            let in_use = self
                .parents::<Document>()
                .find_one(doc! { "$or": built })
                .projection(doc! { "_id": 1 })
                .await
                .map_err(|e| self.mongo(e))?
                .is_some();
            if !in_use {
                unused.push(digest);
            }
        }
        if unused.is_empty() {
            return Ok(unused);
        }
        let dropped: Document = unused
            .iter()
            .map(|d| {
                (
                    format!("definitions.{d}"),
                    crate::bson::Bson::String(String::new()),
                )
            })
            .collect();
        // Only while the definition it was computed for is still current: another rebuild may
        // have made an older one current again meanwhile.
        registry
            .update_one(
                doc! { "_id": id, "current": current.as_str() },
                doc! { "$unset": dropped },
            )
            .await
            .map_err(error)?;
        tracing::info!(collection = id, dropped = ?unused, "dropped definitions no parent is built under");
        Ok(unused)
    }
}

/// What the registry holds for one parent collection: every definition of its model a store
/// has registered, the one writes converge to, and the one parents without a marker were built
/// under. [`Registered::read`] writes nothing.
///
/// With it a program that has no Rust types of the model (the command line, a script) acts as
/// the application does: `raw::Store::new(db, registered.current_model()?)` is a store of the
/// application's definition, sort key types included.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Registered {
    /// The parent collection.
    pub collection: String,
    /// The digest of the definition writes converge to (the one parents carry in `_subset.d`).
    pub current: String,
    /// The digest of the definition parents without a marker were built under; empty when
    /// unknown (the registry was created after parents were marked).
    pub legacy: String,
    /// Every definition registered, oldest first.
    pub definitions: Vec<RegisteredDefinition>,
}

/// One definition of a parent collection's model in the registry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RegisteredDefinition {
    /// Its digest, as parents built under it hold in `_subset.d`.
    pub digest: String,
    /// The definition, or `None` when it was registered by a version of the library that kept
    /// digests only (it is stored whole at that model's next write), or was dropped as no
    /// longer in use.
    pub model: Option<ParentSpec>,
}

impl Registered {
    /// The registry's word on `collection`, `None` when no store of it has written yet. The
    /// registry is the collection `names` gives (`Names::default()`, or a store's
    /// [`bookkeeping`](crate::raw::Store::bookkeeping) when it has a prefix of its own).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the registry cannot be read; [`Error::Registry`] when a stored
    /// definition does not read back (naming the view and entry at fault).
    pub async fn read(
        db: &Database,
        names: &Names,
        collection: &str,
    ) -> Result<Option<Registered>> {
        let registry = names.definitions();
        let found = db
            .collection::<Document>(registry)
            .find_one(doc! { "_id": collection })
            .await
            .map_err(|e| Error::mongo(registry, e))?;
        found
            .map(|found| registered(collection, &found))
            .transpose()
    }

    /// Every parent collection of `db` in the registry `names` gives, by name.
    ///
    /// # Errors
    ///
    /// As [`Registered::read`].
    pub async fn read_all(db: &Database, names: &Names) -> Result<Vec<Registered>> {
        use futures::TryStreamExt;
        let registry = names.definitions();
        let found: Vec<Document> = db
            .collection::<Document>(registry)
            .find(doc! {})
            .sort(doc! { "_id": 1 })
            .await
            .map_err(|e| Error::mongo(registry, e))?
            .try_collect()
            .await
            .map_err(|e| Error::mongo(registry, e))?;
        found
            .iter()
            .map(|d| registered(d.get_str("_id").unwrap_or_default(), d))
            .collect()
    }

    /// The definition of digest `digest`, when the registry holds it whole.
    pub fn model(&self, digest: &str) -> Option<ParentSpec> {
        self.definitions
            .iter()
            .find(|d| d.digest == digest)
            .and_then(|d| d.model)
    }

    /// The definition writes converge to.
    ///
    /// # Errors
    ///
    /// [`Error::Registry`] when the registry holds only its digest: no store of it has written
    /// since the registry began to keep definitions whole.
    pub fn current_model(&self) -> Result<ParentSpec> {
        self.model(&self.current).ok_or_else(|| Error::Registry {
            collection: self.collection.clone(),
            reason: format!(
                "the current definition {} is registered by its digest only; the application's \
                 next write registers it whole",
                self.current
            ),
        })
    }
}

fn registered(collection: &str, found: &Document) -> Result<Registered> {
    let text = |key: &str| found.get_str(key).unwrap_or_default().to_owned();
    let stored = found.get_document("definitions").ok();
    let mut digests: Vec<String> = found
        .get_array("seen")
        .map(|seen| {
            seen.iter()
                .filter_map(|d| d.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for digest in stored.iter().flat_map(|d| d.keys()) {
        if !digests.contains(digest) {
            digests.push(digest.clone());
        }
    }
    let definitions = digests
        .into_iter()
        .map(|digest| {
            let model =
                match stored.and_then(|d| d.get_document(&digest).ok()) {
                    None => None,
                    Some(model) => Some(stored::parse(collection, model).map_err(|reason| {
                        Error::Registry {
                            collection: collection.to_owned(),
                            reason: format!("its definition {digest} does not read back: {reason}"),
                        }
                    })?),
                };
            Ok(RegisteredDefinition { digest, model })
        })
        .collect::<Result<_>>()?;
    Ok(Registered {
        collection: collection.to_owned(),
        current: text("current"),
        legacy: text("legacy"),
        definitions,
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the cache half-written.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

async fn load_registry(store: &RawStore, load: Load) -> Result<Arc<Registry>> {
    let register = load == Load::Register && !store.shared.definition.partial;
    let registry = store.bookkeeping().definitions();
    let coll = store.database().collection::<Document>(registry);
    let error = |e| Error::mongo(registry, e);
    let own = store.shared.definition.digest().to_owned();
    let id = store.collection_name();
    let mut registry = None;
    // A first registration that races another store's insert, or that is applied short of
    // its write concern, reads the registry back.
    for _ in 0..3 {
        let found = coll.find_one(doc! { "_id": id }).await.map_err(error)?;
        let Some(found) = found else {
            // Parents already marked (a registry lost, or dropped): which model the
            // unmarked ones were built under is unknown, and they count as outdated.
            let marked = store
                .parents::<Document>()
                .find_one(doc! { MARKER: { "$exists": true } })
                .projection(doc! { "_id": 1 })
                .await
                .map_err(|e| store.mongo(e))?;
            let legacy = if marked.is_some() { "" } else { own.as_str() };
            if load == Load::Read {
                // Taken as this store would register it, and not kept: the first write
                // registers it for real.
                return Ok(Arc::new(Registry {
                    current: own.clone(),
                    legacy: legacy.to_owned(),
                }));
            }
            let first = doc! {
                "_id": id, "current": own.as_str(), "legacy": legacy, "seen": [own.as_str()],
                "definitions": { own.as_str(): stored::document(&store.shared.spec) },
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
                    if crate::error::driver::is_duplicate_id(&e)
                        || crate::error::driver::is_write_concern(&e) =>
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
        let stored = found
            .get_document("definitions")
            .is_ok_and(|d| d.contains_key(own.as_str()));
        if register && seen && !stored {
            // Registered by a version that kept digests only: the definition is added whole,
            // and stays where it is in the order of deploys.
            let update = doc! {
                "$set": { format!("definitions.{own}"): stored::document(&store.shared.spec) },
            };
            if let Err(e) = coll.update_one(doc! { "_id": id }, update).await {
                if !crate::error::driver::is_write_concern(&e) {
                    return Err(error(e));
                }
            }
        }
        if register && !seen {
            // A definition never seen before is new code: writes converge to it.
            let update = doc! {
                "$set": {
                    "current": own.as_str(),
                    format!("definitions.{own}"): stored::document(&store.shared.spec),
                },
                "$addToSet": { "seen": own.as_str() },
            };
            match coll.update_one(doc! { "_id": id }, update).await {
                Ok(_) => {}
                // Applied short of its write concern; the update is idempotent, and a
                // rollback of it leaves the definition current where it was.
                Err(e) if crate::error::driver::is_write_concern(&e) => {
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
    let cache = match load {
        Load::Read => &store.shared.registry.read,
        Load::Register | Load::Refresh => &store.shared.registry.written,
    };
    *lock(cache) = Some(registry.clone());
    Ok(registry)
}
