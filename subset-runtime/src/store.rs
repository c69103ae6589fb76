//! The typed parent store: insert, get, delete and indexes for one parent type.

use std::marker::PhantomData;

use mongodb::Database;

use crate::action::Action;
use crate::children::Children;
use crate::engine::{Follow, FollowOptions, RawStore, SweepProgress, SweepReport, WriteMode};
use crate::error::Result;
use crate::job::Job;
use crate::model::{Child, Subset, SubsetField};
use crate::options::StoreOptions;
use crate::{decode, encode};

/// The store of parent type `P`: its collection, its child collections, and the write mode.
///
/// Cheap to clone; clones share the detected [`WriteMode`].
pub struct Store<P> {
    raw: RawStore,
    _parent: PhantomData<fn() -> P>,
}

impl<P> Clone for Store<P> {
    fn clone(&self) -> Self {
        Store {
            raw: self.raw.clone(),
            _parent: PhantomData,
        }
    }
}

impl<P> std::fmt::Debug for Store<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("parent", &std::any::type_name::<P>())
            .field("raw", &self.raw)
            .finish()
    }
}

impl<P: Subset> Store<P> {
    /// A store on `db`. The write mode is detected from the server on first use.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # async fn demo<Product: subset::Subset>() -> Result<(), Box<dyn std::error::Error>> {
    /// use subset::Store;
    ///
    /// let client = mongodb::Client::with_uri_str("mongodb://localhost:27017").await?;
    /// let store = Store::<Product>::new(&client.database("shop"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(db: &Database) -> Self {
        Store::with_options(db, StoreOptions::default())
    }

    /// A store on `db` with `options`: a forced write mode, the concerns, folding, the
    /// bookkeeping prefix (see [`StoreOptions`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # fn demo<Product: subset::Subset>(db: &mongodb::Database) -> Result<(), subset::bookkeeping::PrefixError> {
    /// use subset::{Store, StoreOptions};
    ///
    /// let options = StoreOptions::new().bookkeeping_prefix("shop_subset")?;
    /// let store = Store::<Product>::with_options(db, options);
    /// assert_eq!(store.bookkeeping().folds(), "shop_subset_folds");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_options(db: &Database, options: StoreOptions) -> Self {
        Store {
            raw: RawStore::with_options(db, P::SPEC, options),
            _parent: PhantomData,
        }
    }

    /// The names this store writes besides your documents: the marker field of each parent and
    /// its collections (see [`crate::bookkeeping`]).
    pub fn bookkeeping(&self) -> &crate::bookkeeping::Names {
        self.raw.bookkeeping()
    }

    /// How often this store's pushes met other processes' transactions on a parent, which
    /// [`StoreOptions::folding`] would fold instead of retrying.
    pub fn contention(&self) -> crate::hot::Contention {
        self.raw.contention()
    }

    /// The database this store works in.
    pub fn database(&self) -> &Database {
        self.raw.database()
    }

    /// The BSON-level engine under this store.
    pub fn raw(&self) -> &RawStore {
        &self.raw
    }

    /// The write mode: forced, or detected once with a `hello` command (a replica set member or
    /// a `mongos` means [`WriteMode::Transactional`]).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] when the server cannot be reached.
    pub async fn mode(&self) -> Result<WriteMode> {
        self.raw.mode().await
    }

    /// The handle of one subset field, named by the constant `#[derive(Subset)]` generates for it
    /// (a [`SubsetField`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{Child, Store, Subset, SubsetField};
    /// # trait Fields<R>: Sized { const LATEST: SubsetField<Self, R>; }
    /// # fn demo<Product: Subset + Fields<Review>, Review: Child>(store: Store<Product>) {
    /// let reviews = store.children(Product::LATEST);
    /// # }
    /// ```
    pub fn children<C: Child>(&self, field: SubsetField<P, C>) -> Children<'_, P, C> {
        Children::new(self.raw.children(field.spec()))
    }

    /// Inserts a new parent and all its children.
    ///
    /// Every child given in a subset field goes into that field's child collection (with the
    /// parent key set); the parent is stored with the first `keep` of them in the subset's order
    /// (as the server sorts them), its count fields set to the number given and its running
    /// sums to the sum of their values (whatever the parent held there). Runs in the
    /// caller's session with `.session(&mut s)` (see [`Action`]).
    ///
    /// Several views of one child collection and key share their children: each child given in
    /// any of them is stored once (the first copy by `_id`), and every view is computed from
    /// all of them. A preview field (see [`crate::spec::SubsetSpec::embed`]) must be empty: insert the
    /// parent, then push the whole children.
    ///
    /// # Errors
    ///
    /// [`crate::Error::ParentExists`] when the parent's `_id` is stored (nothing is written),
    /// [`crate::Error::Mongo`] for a duplicate child `_id` (nothing is written, or on a
    /// standalone server what was written is removed again),
    /// [`crate::Error::ChildWithoutId`] for a child without `_id`, [`crate::Error::MalformedChild`]
    /// for a child without a number in a summed field, [`crate::Error::ParentKeyMismatch`] for a
    /// child whose own parent key names another parent, [`crate::Error::PreviewsOnInsert`] for a
    /// preview field that is not empty, [`crate::Error::Serialize`] when the parent does not
    /// serialize.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # async fn demo<Product: subset::Subset>(
    /// #     store: subset::Store<Product>, product: Product,
    /// # ) -> subset::Result<()> {
    /// store.insert(&product).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn insert<'a>(&'a self, parent: &'a P) -> Action<'a, ()> {
        Action::or_refused(encode::document(parent, "a parent").map(|doc| self.raw.insert(doc)))
    }

    /// Reads one parent, with its embedded subsets, in one query; in the caller's session with
    /// `.session(&mut s)`, e.g. to read a transaction's own writes.
    ///
    /// A subset built under another definition of the model (another `keep`, order, filter,
    /// preview, count or sum; a subset field added since), before [`Store::rebuild`] or a write
    /// of this model reached the parent, is computed from the child collection: one query more
    /// per child collection of such subsets, or, while most reads compute them, one
    /// `aggregate` in all. A subset built with a larger `keep` is cut to this one, in the one
    /// query. Either way the parent reads as if it had been built under this model (see the
    /// guide's *Changing a model on live data*).
    ///
    /// # Errors
    ///
    /// [`crate::Error::MalformedParent`] / [`crate::Error::MalformedChild`] when the stored
    /// document does not have the shape of `P` (naming the `_id` and the field),
    /// [`crate::Error::Mongo`] from the server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{bson::oid::ObjectId, Store, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>>(
    /// #     store: Store<Product>, product_id: ObjectId,
    /// # ) -> subset::Result<()> {
    /// let product: Option<Product> = store.get(&product_id).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn get<'a>(&'a self, id: &'a P::Id) -> Action<'a, Option<P>> {
        let get = encode::id(id, "a parent _id").map(|id| self.raw.get(&id));
        Action::or_refused(get).map(|raw| raw.map(|raw| decode::parent::<P>(&raw)).transpose())
    }

    /// Deletes a parent and every child of it in each child collection. Returns whether the
    /// parent existed; its children are deleted either way, so orphans left by a crash go too.
    /// Runs in the caller's session with `.session(&mut s)`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] from the server.
    pub fn delete<'a>(&'a self, id: &'a P::Id) -> Action<'a, bool> {
        Action::or_refused(encode::id(id, "a parent _id").map(|id| self.raw.delete(&id)))
    }

    /// Creates, on each child collection, the index `{key: 1, <sort keys>, _id}` that makes
    /// every page an index scan. Idempotent: an existing identical index is left alone.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] naming the child collection, e.g. when an index of the same name but
    /// other options exists.
    pub async fn ensure_indexes(&self) -> Result<()> {
        self.raw.ensure_indexes().await
    }

    /// Reconciles every parent's subsets and counts with the child collections, in batches,
    /// calling `progress` after each batch. Idempotent and safe while writers run. Run it after a
    /// standalone server crashed, after writes outside this library, or on a schedule as a
    /// safety net.
    ///
    /// A parent that fails (a malformed one, say) is recorded in [`SweepReport::failures`], named,
    /// and the sweep goes on to the others.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] when the parent collection itself cannot be scanned.
    pub fn reconcile_all(&self) -> Job<'_, SweepReport, SweepProgress> {
        Job::new(move |options, progress| {
            Box::pin(async move { self.raw.reconcile_all(&options, progress).await })
        })
    }

    /// A follower that keeps this store's subsets true while other programs write its child
    /// collections (imports, scripts, other services): it follows each child collection's
    /// change stream and resyncs the parents each change concerns, saving its place as it goes
    /// so that a restart misses nothing. Await it (with [`Follow::until`] for a graceful stop)
    /// or [`Follow::spawn`] it; see [`crate::raw::Store::follow`] for what it needs and does.
    ///
    /// Use it when writes outside this library are routine; for the occasional one, or on a
    /// standalone server, [`Store::reconcile_all`] on a schedule does.
    ///
    /// # Errors
    ///
    /// When awaited: [`crate::Error::FollowUnsupported`] on a standalone server or where
    /// `changeStreamPreAndPostImages` cannot be turned on; [`crate::Error::Mongo`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # async fn demo<Product: subset::Subset>(
    /// #     store: subset::Store<Product>,
    /// # ) -> subset::Result<()> {
    /// use subset::follow::FollowOptions;
    ///
    /// let follower = store.follow(FollowOptions::new("reviews-sync")).spawn();
    /// // … until shutdown …
    /// let stats = follower.stop().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn follow(&self, options: FollowOptions) -> Follow {
        self.raw.follow(options)
    }

    /// The same scan as [`Store::reconcile_all`], read-only: how much drift there is, for
    /// monitoring.
    ///
    /// # Errors
    ///
    /// As [`Store::reconcile_all`].
    pub fn check_all(&self) -> Job<'_, SweepReport, SweepProgress> {
        Job::new(move |options, progress| {
            Box::pin(async move { self.raw.check_all(&options, progress).await })
        })
    }

    /// Rebuilds, under this model, every parent whose subsets were built under another
    /// definition of it (another `keep`, order, filter, preview, count or sum, or a subset field
    /// added since), and makes this definition the one every writer converges to: the step
    /// after deploying a changed model, or after rolling one back. Resumable and safe while
    /// writers of both the old and the new code run; see
    /// [`raw::Store::rebuild`](crate::raw::Store::rebuild) and the guide's *Changing a model on
    /// live data*.
    ///
    /// Until a parent is rebuilt (by this, or by a write of this model to it), `get` and first
    /// pages serve its outdated subsets from the child collection: right, at a cost the
    /// guide's *Changing a model on live data* gives.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] when the registry cannot be written or the parent collection
    /// scanned; a parent that fails is named in [`SweepReport::failures`].
    pub fn rebuild(&self) -> Job<'_, SweepReport, SweepProgress> {
        Job::new(move |options, progress| {
            Box::pin(async move { self.raw.rebuild(&options, progress).await })
        })
    }

    /// Installs the server-side cap: a `$jsonSchema` validator on the parent collection with
    /// `bsonType: "array"` and `maxItems: keep` on each subset field, merged with any validator
    /// the collection has. A `$push` without `$slice` from code outside this library then fails
    /// with the server's validation error instead of growing the array.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`], e.g. without the `collMod` privilege.
    pub async fn ensure_schema(&self) -> Result<()> {
        self.raw.ensure_schema().await
    }
}
