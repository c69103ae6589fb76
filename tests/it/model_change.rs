//! A model that changes on live data: for each usual change (a new view, a larger or smaller
//! `keep`, another order, a filter, previews, a count and a sum), a store of the old model and
//! a store of the new one write the same collection at once while the new one's rebuild runs,
//! is cut off and runs again; both write modes.
//!
//! After every round of writes, every parent is read through both stores and compared with the
//! child collection under each store's own model; in transactions, readers also check while the
//! writers run, each read and its comparison in one snapshot. At the end the new model's rebuild
//! leaves every parent built under it (a second rebuild finds nothing, `check_all` is clean),
//! and a rollback (the old model's rebuild) is checked the same way.

use crate::common;

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document, RawDocumentBuf};
use futures::TryStreamExt;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::raw::ChildPatch;
use subset::repair::SweepOptions;
use subset::spec::SubsetSpec;
use subset::{Child, PageRequest, Store, Subset, WriteMode};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: i64,
    stars: i64,
    hidden: bool,
    text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
#[subset(preview_of = Comment)]
struct CommentPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: i64,
    stars: i64,
}

/// One version of the movie model: the collection is always `movies`, the children always
/// `comments` under `movie_id`.
macro_rules! movie {
    ($name:ident { $($field:tt)* }) => {
        #[derive(Debug, Clone, Serialize, Deserialize, Subset)]
        #[subset(collection = "movies")]
        struct $name {
            #[serde(rename = "_id")]
            id: ObjectId,
            $($field)*
        }
    };
}

movie!(Latest3 {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "date desc", count = "n")]
    latest: Vec<Comment>,
    #[serde(default)]
    n: i64,
});
movie!(WithFirst {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "date desc", count = "n")]
    latest: Vec<Comment>,
    #[serde(default)]
    n: i64,
    #[subset(child = "comments", key = "movie_id", keep = 2, sort = "date asc")]
    #[serde(default)]
    first: Vec<CommentPreview>,
});
movie!(Latest6 {
    #[subset(child = "comments", key = "movie_id", keep = 6, sort = "date desc", count = "n")]
    latest: Vec<Comment>,
    #[serde(default)]
    n: i64,
});
movie!(ByStars {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "stars desc, date desc", count = "n")]
    latest: Vec<Comment>,
    #[serde(default)]
    n: i64,
});
movie!(Visible {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "date desc", count = "n", filter = "!hidden")]
    latest: Vec<Comment>,
    #[serde(default)]
    n: i64,
});
movie!(Previews {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "date desc", count = "n")]
    latest: Vec<CommentPreview>,
    #[serde(default)]
    n: i64,
});
movie!(Summed {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "date desc", count = "n", sum = "stars_total = stars")]
    latest: Vec<Comment>,
    #[serde(default)]
    n: i64,
    #[serde(default)]
    stars_total: i64,
});
movie!(Uncounted {
    #[subset(child = "comments", key = "movie_id", keep = 3, sort = "date desc")]
    latest: Vec<Comment>,
});

/// How much a scenario writes.
#[derive(Debug, Clone, Copy)]
struct Size {
    parents: usize,
    /// Rounds of writes; the rebuild is cut off in all but the last.
    rounds: usize,
    /// Writes per writer and round.
    ops: usize,
}

/// The everyday run: a rebuild cut off once and run to the end once, beside both models'
/// writers, on enough parents that the batches of 4 leave some for a second batch.
const EVERYDAY: Size = Size {
    parents: 8,
    rounds: 2,
    ops: 20,
};

/// The long run (`long::`, which `.ci/run` runs): more parents, writes and cut-offs.
const LONG: Size = Size {
    parents: 16,
    rounds: 3,
    ops: 40,
};

fn comment(rng: &mut impl Rng, parent: &Bson) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "movie_id": parent.clone(),
        "date": rng.random_range(0..1_000_000_i64),
        "stars": rng.random_range(1..=5_i64),
        "hidden": rng.random_bool(0.3),
        "text": "a comment",
    }
}

/// What the child collection says field `spec` of `parent` holds: the `_id`s of the view, its
/// count and its sums.
async fn truth(
    db: &mongodb::Database,
    spec: &SubsetSpec,
    parent: &Bson,
    session: Option<&mut mongodb::ClientSession>,
) -> (Vec<Bson>, i64, Vec<i64>) {
    let coll = db.collection::<Document>(spec.child_collection);
    let order: Document = spec
        .order()
        .map(|k| (k.field.to_owned(), Bson::Int32(k.direction.as_i32())))
        .collect();
    let find = coll.find(spec.children_of(parent)).sort(order);
    let children: Vec<Document> = match session {
        Some(s) => {
            let mut cursor = find.session(&mut *s).await.unwrap();
            cursor.stream(s).try_collect().await.unwrap()
        }
        None => find.await.unwrap().try_collect().await.unwrap(),
    };
    let ids = children
        .iter()
        .take(spec.keep as usize)
        .map(|c| c.get("_id").cloned().unwrap())
        .collect();
    let sums = spec
        .sums
        .iter()
        .map(|s| children.iter().map(|c| c.get_i64(s.child).unwrap()).sum())
        .collect();
    (ids, children.len() as i64, sums)
}

/// Checks every view of `parent` as `store` reads it (`get`, raw and typed, and the first
/// page) against the child collection, in `session`'s snapshot if given.
async fn assert_read_right<P: Subset<Id = ObjectId>>(
    store: &Store<P>,
    parent: &Bson,
    mut session: Option<&mut mongodb::ClientSession>,
) {
    let raw: RawDocumentBuf = match session.as_deref_mut() {
        Some(s) => store.raw().get(parent).session(s).await,
        None => store.raw().get(parent).await,
    }
    .unwrap()
    .expect("the parent exists");
    let doc = Document::try_from(raw.as_ref()).unwrap();
    for spec in P::SUBSETS {
        let (ids, n, sums) = truth(store.database(), spec, parent, session.as_deref_mut()).await;
        let embedded: Vec<Bson> = doc
            .get_array(spec.field)
            .unwrap_or_else(|_| panic!("{} of {parent} is served: {doc}", spec.field))
            .iter()
            .map(|c| c.as_document().unwrap().get("_id").cloned().unwrap())
            .collect();
        assert_eq!(
            embedded,
            ids,
            "{} of {parent} as {}",
            spec.field,
            std::any::type_name::<P>()
        );
        if let Some(count) = spec.count {
            assert_eq!(doc.get_i64(count).ok(), Some(n), "{count} of {parent}");
        }
        for (sum, total) in spec.sums.iter().zip(sums) {
            assert_eq!(
                doc.get_i64(sum.parent).ok(),
                Some(total),
                "{} of {parent}",
                sum.parent
            );
        }
        let subset = store.raw().children(spec);
        let request = PageRequest::first(spec.keep);
        let page = match session.as_deref_mut() {
            Some(s) => subset.page(parent, &request).session(s).await,
            None => subset.page(parent, &request).await,
        }
        .unwrap();
        let paged: Vec<Bson> = page
            .items
            .iter()
            .map(|c| {
                Document::try_from(c.as_ref())
                    .unwrap()
                    .get("_id")
                    .cloned()
                    .unwrap()
            })
            .collect();
        assert_eq!(paged, ids, "first page of {} of {parent}", spec.field);
    }
    // The typed read decodes whatever definition the parent was built under.
    let id = parent.as_object_id().unwrap();
    let typed = match session {
        Some(s) => store.get(&id).session(s).await,
        None => store.get(&id).await,
    };
    typed.unwrap().expect("the parent exists");
}

/// One writer of one model: pushes, removes and patches on random parents.
async fn write<P: Subset>(store: &Store<P>, parents: &[Bson], ops: usize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let spec = &P::SUBSETS[0];
    let subset = store.raw().children(spec);
    let comments = store.database().collection::<Document>("comments");
    for _ in 0..ops {
        let parent = &parents[rng.random_range(0..parents.len())];
        let roll = rng.random_range(0..10);
        let existing = if roll >= 7 {
            comments
                .find_one(doc! { "movie_id": parent.clone() })
                .await
                .unwrap()
        } else {
            None
        };
        match (roll, existing) {
            (7 | 8, Some(child)) => {
                let id = child.get("_id").unwrap();
                let patch = ChildPatch::new()
                    .set("stars", rng.random_range(1..=5_i64))
                    .set("hidden", rng.random_bool(0.3));
                match subset.patch(parent, id, &patch).await {
                    // Removed meanwhile by the other writer.
                    Ok(()) | Err(subset::Error::ChildNotFound { .. }) => {}
                    Err(e) => panic!("patch: {e}"),
                }
            }
            (9, Some(child)) => {
                let id = child.get("_id").unwrap();
                match subset.remove(parent, id).await {
                    Ok(()) | Err(subset::Error::ChildNotFound { .. }) => {}
                    Err(e) => panic!("remove: {e}"),
                }
            }
            _ => subset
                .push(parent, vec![comment(&mut rng, parent)])
                .await
                .unwrap(),
        }
    }
}

/// Reads every parent through both stores, in transactions' snapshots, until `stop`.
async fn read_while<A: Subset<Id = ObjectId>, B: Subset<Id = ObjectId>>(
    old: &Store<A>,
    new: &Store<B>,
    parents: &[Bson],
    stop: tokio::sync::watch::Receiver<bool>,
) -> usize {
    let client = old.database().client().clone();
    let mut reads = 0;
    while !*stop.borrow() {
        for parent in parents {
            let mut session = client.start_session().await.unwrap();
            session
                .start_transaction()
                .read_concern(mongodb::options::ReadConcern::snapshot())
                .await
                .unwrap();
            assert_read_right(old, parent, Some(&mut session)).await;
            assert_read_right(new, parent, Some(&mut session)).await;
            session.abort_transaction().await.unwrap();
            // Outside a session, where reads of outdated parents read the children with the
            // parent once they are frequent: each read decodes, whatever it meets.
            let id = parent.as_object_id().unwrap();
            new.get(&id).await.unwrap().expect("the parent exists");
            for spec in B::SUBSETS {
                let request = PageRequest::first(spec.keep);
                new.raw()
                    .children(spec)
                    .page(parent, &request)
                    .await
                    .unwrap();
            }
            reads += 3;
        }
    }
    reads
}

async fn live_change<Old: Subset<Id = ObjectId>, New: Subset<Id = ObjectId>>(
    mode: WriteMode,
    size: Size,
) {
    let db = common::replica_db().await;
    let old = Store::<Old>::with_options(&db, subset::StoreOptions::new().mode(mode));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut parents = Vec::with_capacity(size.parents);
    for _ in 0..size.parents {
        let id = Bson::ObjectId(ObjectId::new());
        let mut parent = doc! { "_id": id.clone() };
        for spec in Old::SUBSETS {
            parent.insert(spec.field, Vec::<Bson>::new());
        }
        old.raw().insert(parent).await.unwrap();
        let children: Vec<Document> = (0..rng.random_range(0..8))
            .map(|_| comment(&mut rng, &id))
            .collect();
        if !children.is_empty() {
            old.raw()
                .children(&Old::SUBSETS[0])
                .push(&id, children)
                .await
                .unwrap();
        }
        parents.push(id);
    }
    // The new code starts: its first write registers its model as the one writes converge
    // to. Until then it reads every parent as built under another model.
    let new = Store::<New>::with_options(&db, subset::StoreOptions::new().mode(mode));
    for parent in &parents {
        assert_read_right(&new, parent, None).await;
    }
    let options = SweepOptions::default().batch_size(4).concurrency(2);
    let check = new.check_all().options(options.clone()).await.unwrap();
    assert_eq!(check.progress.outdated, size.parents as u64);
    for round in 0..size.rounds {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let readers = async {
            match mode {
                WriteMode::Transactional => read_while(&old, &new, &parents, stopped).await,
                WriteMode::Ordered => 0,
            }
        };
        let rebuild = async {
            // Cut off part way in the first rounds, as a killed process would be.
            let run = new.rebuild().options(options.clone());
            if round + 1 < size.rounds {
                let cut = Duration::from_millis(20 + 40 * round as u64);
                let _ = tokio::time::timeout(cut, run).await;
            } else {
                let report = run.await.unwrap();
                assert!(report.failures.is_empty(), "{:?}", report.failures);
            }
        };
        let writers = async {
            tokio::join!(
                write(&old, &parents, size.ops, 100 + round as u64),
                write(&new, &parents, size.ops, 200 + round as u64),
                rebuild,
            );
            // The readers are gone already when there are none.
            let _ = stop.send(true);
        };
        let ((), reads) = tokio::join!(writers, readers);
        if mode == WriteMode::Transactional {
            assert!(reads > 0, "the readers read while the writers wrote");
        } else {
            reconcile_counts(&new, &parents).await;
        }
        for parent in &parents {
            assert_read_right(&old, parent, None).await;
            assert_read_right(&new, parent, None).await;
        }
    }
    // The old code is gone: one rebuild finishes what its writes left.
    let report = new.rebuild().options(options.clone()).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    if mode == WriteMode::Ordered {
        reconcile_counts(&new, &parents).await;
    }
    let again = new.rebuild().options(options.clone()).await.unwrap();
    assert_eq!(again.progress.checked, 0, "nothing is left to rebuild");
    let check = new.check_all().options(options.clone()).await.unwrap();
    assert_eq!(
        (check.progress.drifted, check.progress.outdated),
        (0, 0),
        "{:?}",
        check.drifts
    );
    for parent in &parents {
        assert_read_right(&new, parent, None).await;
        assert_read_right(&old, parent, None).await;
    }
    // A rollback: the old model's rebuild makes it current again.
    old.rebuild().options(options.clone()).await.unwrap();
    let check = old.check_all().options(options.clone()).await.unwrap();
    assert_eq!((check.progress.drifted, check.progress.outdated), (0, 0));
    let check = new.check_all().options(options.clone()).await.unwrap();
    let expected = if same_model::<Old, New>() {
        0
    } else {
        size.parents as u64
    };
    assert_eq!(
        check.progress.outdated, expected,
        "the new model sees the rollback"
    );
    for parent in &parents {
        assert_read_right(&old, parent, None).await;
        assert_read_right(&new, parent, None).await;
    }
}

/// Without transactions, a rebuild that recounts a parent while a push or removal of its model
/// is between its child write and its parent update can leave the count or a sum one off, as a
/// reconcile racing ordered writes can (the guide's consistency page): the documented remedy, a
/// reconcile once the writers are quiet, of the parents built under `store`'s model (the
/// others it would rebuild, which `rebuild` is for). Every other difference is left for the
/// checks to find.
async fn reconcile_counts<P: Subset>(store: &Store<P>, parents: &[Bson]) {
    for parent in parents {
        for spec in P::SUBSETS {
            let subset = store.raw().children(spec);
            let drift = subset.check(parent).await.unwrap();
            let counts_only = drift.missing.is_empty()
                && drift.stale.is_empty()
                && drift.changed.is_empty()
                && !drift.misordered;
            if !drift.outdated && !drift.is_in_sync() {
                assert!(
                    counts_only,
                    "{parent}: more than a count or sum drifted: {drift:?}"
                );
                subset.reconcile(parent).await.unwrap();
            }
        }
    }
}

fn same_model<A: Subset, B: Subset>() -> bool {
    A::SUBSETS == B::SUBSETS
}

macro_rules! change {
    ($size:expr, $(#[$long:meta])? $name:ident, $old:ty => $new:ty) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$long])?
            async fn in_transactions() {
                live_change::<$old, $new>(WriteMode::Transactional, $size).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$long])?
            async fn ordered() {
                live_change::<$old, $new>(WriteMode::Ordered, $size).await;
            }
        }
    };
}

/// Every usual change, each in both write modes.
macro_rules! changes {
    ($size:expr $(, #[$long:meta])?) => {
        change!($size, $(#[$long])? a_new_view, Latest3 => WithFirst);
        change!($size, $(#[$long])? a_larger_keep, Latest3 => Latest6);
        change!($size, $(#[$long])? a_smaller_keep, Latest6 => Latest3);
        change!($size, $(#[$long])? another_order, Latest3 => ByStars);
        change!($size, $(#[$long])? a_filter, Latest3 => Visible);
        change!($size, $(#[$long])? previews, Latest3 => Previews);
        change!($size, $(#[$long])? a_sum, Latest3 => Summed);
        change!($size, $(#[$long])? a_count_removed, Latest3 => Uncounted);
    };
}

changes!(EVERYDAY);

/// The same scenarios at [`LONG`], which `.ci/run` runs
/// (`cargo test --test it ::long:: -- --ignored`).
mod long {
    use super::*;

    changes!(LONG, #[ignore = "long: more parents, writes and cut-offs; .ci/run runs it"]);
}

/// The registry a store's first use writes, and the marker a parent carries.
#[tokio::test]
async fn parents_carry_the_definition_they_were_built_under() {
    let db = common::replica_db().await;
    let old = Store::<Latest3>::new(&db);
    let id = ObjectId::new();
    let parent = doc! { "_id": id, "latest": [] };
    old.raw().insert(parent).await.unwrap();
    let stored = db
        .collection::<Document>("movies")
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .unwrap();
    let marker = stored
        .get_document(subset::bookkeeping::Names::default().marker())
        .unwrap();
    let digest = marker.get_str("d").unwrap().to_owned();
    assert_eq!(
        marker
            .get_document("v")
            .unwrap()
            .get_document("latest")
            .unwrap()
            .get_i64("k")
            .ok(),
        Some(3)
    );
    let registry = db.collection::<Document>(subset::bookkeeping::Names::default().definitions());
    let entry = registry
        .find_one(doc! { "_id": "movies" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entry.get_str("current").ok(), Some(digest.as_str()));
    // A new model registers itself as current on its first write; the old one, writing
    // again, does not take it back.
    let new = Store::<Latest6>::new(&db);
    new.get(&id).await.unwrap();
    new.raw()
        .insert(doc! { "_id": ObjectId::new(), "latest": [] })
        .await
        .unwrap();
    let entry = registry
        .find_one(doc! { "_id": "movies" })
        .await
        .unwrap()
        .unwrap();
    let current = entry.get_str("current").unwrap().to_owned();
    assert_ne!(current, digest);
    Store::<Latest3>::new(&db)
        .raw()
        .insert(doc! { "_id": ObjectId::new(), "latest": [] })
        .await
        .unwrap();
    let entry = registry
        .find_one(doc! { "_id": "movies" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entry.get_str("current").ok(), Some(current.as_str()));
}

/// The registry keeps each definition whole, types included: a store built from it at run time
/// is the application's store (same digest, the same sort key types), and every definition
/// deployed is listed in order.
#[tokio::test]
async fn the_registry_holds_each_definition_whole_with_its_types() {
    let db = common::replica_db().await;
    assert!(
        subset::bookkeeping::Registered::read(&db, &Default::default(), "movies")
            .await
            .unwrap()
            .is_none()
    );
    let id = ObjectId::new();
    Store::<Latest3>::new(&db)
        .raw()
        .insert(doc! { "_id": id, "latest": [] })
        .await
        .unwrap();
    Store::<WithFirst>::new(&db)
        .raw()
        .insert(doc! { "_id": ObjectId::new(), "latest": [], "first": [] })
        .await
        .unwrap();
    let registered = subset::bookkeeping::Registered::read(&db, &Default::default(), "movies")
        .await
        .unwrap()
        .unwrap();
    let digests: Vec<&str> = registered
        .definitions
        .iter()
        .map(|d| d.digest.as_str())
        .collect();
    assert_eq!(digests.len(), 2);
    assert_eq!(digests[1], registered.current);
    assert_eq!(registered.legacy, digests[0]);
    let model = registered.current_model().unwrap();
    assert_eq!(model.collection, "movies");
    assert_eq!(model.subsets.len(), WithFirst::SUBSETS.len());
    for (stored, derived) in model.subsets.iter().zip(WithFirst::SUBSETS) {
        assert_eq!(stored.sort, derived.sort, "{}", stored.field);
        assert_eq!(stored.id_values, derived.id_values);
        assert_eq!(
            (stored.keep, stored.count, stored.filter),
            (derived.keep, derived.count, derived.filter)
        );
        assert_eq!(stored.embed.is_some(), derived.embed.is_some());
    }
    // A run-time store of the registered model is the application's: a parent it writes is
    // built under the current definition, which the typed store reads as its own.
    let raw = subset::raw::Store::new(&db, model);
    let other = ObjectId::new();
    raw.insert(doc! { "_id": other, "latest": [], "first": [] })
        .await
        .unwrap();
    let marker = db
        .collection::<Document>("movies")
        .find_one(doc! { "_id": other })
        .await
        .unwrap()
        .unwrap()
        .get_document(subset::bookkeeping::Names::default().marker())
        .unwrap()
        .get_str("d")
        .unwrap()
        .to_owned();
    assert_eq!(marker, registered.current);
    let again = subset::bookkeeping::Registered::read(&db, &Default::default(), "movies")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.current, registered.current);
    assert_eq!(again.definitions.len(), 2);
    assert!(again.model(digests[0]).is_some());
}

/// A store of some fields (the command-line tool's) works on parents whose marker agrees with
/// its fields, reports the others as outdated, never writes a view it would build wrong, and
/// cannot rebuild.
#[tokio::test]
async fn a_store_of_some_fields_leaves_the_definition_alone() {
    use subset::raw;
    use subset::spec::ParentSpec;

    let db = common::replica_db().await;
    let app = Store::<Latest6>::new(&db);
    let id = Bson::ObjectId(ObjectId::new());
    app.raw()
        .insert(doc! { "_id": id.clone(), "latest": [] })
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let children: Vec<Document> = (0..8).map(|_| comment(&mut rng, &id)).collect();
    app.raw()
        .children(&Latest6::SUBSETS[0])
        .push(&id, children)
        .await
        .unwrap();
    let options = SweepOptions::default();

    // Given the application's own definition of the field: nothing outdated, and a reconcile
    // leaves the marker as it is.
    let same = raw::Store::for_fields(
        &db,
        ParentSpec::leak("movies", vec![Latest6::SUBSETS[0]]),
        Default::default(),
    );
    let check = same.check_all(&options, |_| {}).await.unwrap();
    assert_eq!((check.progress.drifted, check.progress.outdated), (0, 0));
    same.reconcile_all(&options, |_| {}).await.unwrap();
    assert_eq!(
        app.check_all()
            .options(options.clone())
            .await
            .unwrap()
            .progress
            .outdated,
        0
    );

    // Given another `keep`: the parent is outdated for it, and its writes leave the view to the
    // application (marked as built under none), which reads it right meanwhile.
    let other = raw::Store::for_fields(
        &db,
        ParentSpec::leak("movies", vec![Latest3::SUBSETS[0]]),
        Default::default(),
    );
    let check = other.check_all(&options, |_| {}).await.unwrap();
    assert_eq!(check.progress.outdated, 1);
    other
        .children(&Latest3::SUBSETS[0])
        .push(&id, vec![comment(&mut rng, &id)])
        .await
        .unwrap();
    assert_read_right(&app, &id, None).await;
    assert_eq!(
        app.check_all()
            .options(options.clone())
            .await
            .unwrap()
            .progress
            .outdated,
        1
    );
    app.rebuild().options(options.clone()).await.unwrap();
    assert_read_right(&app, &id, None).await;
    let refused = other.rebuild(&options, |_| {}).await.unwrap_err();
    assert!(
        matches!(refused, subset::Error::PartialModel { .. }),
        "{refused}"
    );
}

/// What a read of an outdated parent costs, counted in commands: `get` one command more per
/// child collection of its outdated views, a first page the child collection; after the
/// rebuild, one query each again.
#[tokio::test]
async fn reads_of_outdated_parents_cost_a_query_more_until_the_rebuild() {
    let (db, log) = common::recorded_replica_db().await;
    let old = Store::<Latest3>::new(&db);
    let id = ObjectId::new();
    old.raw()
        .insert(doc! { "_id": id, "latest": [] })
        .await
        .unwrap();
    let parent = Bson::ObjectId(id);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let children: Vec<Document> = (0..6).map(|_| comment(&mut rng, &parent)).collect();
    old.raw()
        .children(&Latest3::SUBSETS[0])
        .push(&parent, children)
        .await
        .unwrap();
    let new = Store::<WithFirst>::new(&db);
    // A marked parent needs no registry to be read: count from here.
    let commands = |log: &common::CommandLog| -> Vec<(String, String)> {
        std::mem::take(&mut *log.lock().unwrap())
            .into_iter()
            .map(|(name, target, _)| (name, target))
            .collect()
    };
    commands(&log);
    new.get(&id).await.unwrap().unwrap();
    let get = commands(&log);
    // The parent, then the new view's children (its top alone, without a count: a `find`);
    // `latest` (unchanged) is read as stored.
    assert_eq!(
        get,
        [
            ("find".to_owned(), "movies".to_owned()),
            ("find".to_owned(), "comments".to_owned())
        ]
    );
    new.rebuild().await.unwrap();
    commands(&log);
    new.get(&id).await.unwrap().unwrap();
    assert_eq!(commands(&log).len(), 1, "one query after the rebuild");
    assert_read_right(&new, &parent, None).await;

    // A larger `keep`: the 3 stored of the 6 children are not enough for a first page of 6.
    let longer = Store::<Latest6>::new(&db);
    let latest = longer.raw().children(&Latest6::SUBSETS[0]);
    commands(&log);
    latest.page(&parent, &PageRequest::first(6)).await.unwrap();
    let page = commands(&log);
    assert_eq!(
        page.len(),
        2,
        "the parent, then the child collection: {page:?}"
    );
    longer.rebuild().await.unwrap();
    commands(&log);
    latest.page(&parent, &PageRequest::first(6)).await.unwrap();
    assert_eq!(commands(&log), [("find".to_owned(), "movies".to_owned())]);
    assert_read_right(&longer, &parent, None).await;
}

/// Parents written before markers existed (or by another program, or `subset migrate`) count
/// as built under the first model that uses the collection; a view that model has and they lack
/// is computed on reads, built by the first write, and by the rebuild.
#[tokio::test]
async fn unmarked_parents_gain_the_view_they_lack() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let comments = db.collection::<Document>("comments");
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut parents = Vec::new();
        for _ in 0..6 {
            let id = Bson::ObjectId(ObjectId::new());
            let children: Vec<Document> = (0..5).map(|_| comment(&mut rng, &id)).collect();
            comments.insert_many(&children).await.unwrap();
            let latest: Vec<Document> = comments
                .find(doc! { "movie_id": id.clone() })
                .sort(doc! { "date": -1, "_id": -1 })
                .limit(3)
                .projection(doc! { "movie_id": 0 })
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            let parent = doc! { "_id": id.clone(), "latest": latest, "n": 5_i64 };
            db.collection::<Document>("movies")
                .insert_one(parent)
                .await
                .unwrap();
            parents.push(id);
        }
        let store = Store::<WithFirst>::with_options(&db, subset::StoreOptions::new().mode(mode));
        for parent in &parents {
            assert_read_right(&store, parent, None).await;
        }
        let options = SweepOptions::default();
        let check = store.check_all().options(options.clone()).await.unwrap();
        assert_eq!(check.progress.outdated, 6, "{mode:?}");
        // A push builds the view it lacks.
        let first = &parents[0];
        store
            .raw()
            .children(&WithFirst::SUBSETS[0])
            .push(first, vec![comment(&mut rng, first)])
            .await
            .unwrap();
        assert_read_right(&store, first, None).await;
        let report = store.rebuild().options(options.clone()).await.unwrap();
        assert_eq!(report.progress.fixed, 5, "{mode:?}: the other parents");
        let check = store.check_all().options(options.clone()).await.unwrap();
        assert_eq!((check.progress.drifted, check.progress.outdated), (0, 0));
        for parent in &parents {
            assert_read_right(&store, parent, None).await;
        }
    }
}

/// A model before a rename: the default key of `Movie` is `movie_id`.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "renamed_movies")]
struct Movie {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "renamed_comments", keep = 3, sort = "date desc")]
    latest: Vec<Comment>,
}

/// The same struct renamed, the key left to its default: it now looks for `film_id`.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "renamed_movies")]
struct Film {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "renamed_comments", keep = 4, sort = "date desc")]
    latest: Vec<Comment>,
}

/// The renamed struct with the key set to what the children carry.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "renamed_movies")]
struct FilmKeyed {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "renamed_comments",
        key = "movie_id",
        keep = 4,
        sort = "date desc"
    )]
    latest: Vec<Comment>,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebuild_that_would_empty_views_after_a_rename_refuses_and_names_both_keys() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let movies = Store::<Movie>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let movie = Movie {
            id: ObjectId::new(),
            latest: Vec::new(),
        };
        movies.insert(&movie).await.unwrap();
        let comments: Vec<Comment> = (0..5)
            .map(|i| Comment {
                id: ObjectId::new(),
                date: i,
                stars: 3,
                hidden: false,
                text: format!("comment {i}"),
            })
            .collect();
        movies
            .children(Movie::LATEST)
            .push_many(&movie.id, &comments)
            .await
            .unwrap();

        // Renamed: the rebuild refuses before writing anything, naming both keys.
        let films = Store::<Film>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let refused = films.rebuild().await;
        match &refused {
            Err(subset::Error::RebuildWouldEmpty {
                key,
                carried,
                field,
                ..
            }) => {
                assert_eq!((key.as_str(), field.as_str()), ("film_id", "latest"));
                assert_eq!(carried, "movie_id", "{mode:?}");
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("key = \"movie_id\""), "{message}");
        let stored = movies.get(&movie.id).await.unwrap().unwrap();
        assert_eq!(stored.latest.len(), 3, "{mode:?}: nothing written");
        let registry =
            db.collection::<Document>(subset::bookkeeping::Names::default().definitions());
        let registered = registry
            .find_one(doc! { "_id": "renamed_movies" })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            registered.get_array("seen").unwrap().len(),
            1,
            "{mode:?}: the renamed model was not registered"
        );

        // With the key set to what the children carry, it rebuilds.
        let keyed = Store::<FilmKeyed>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let report = keyed.rebuild().await.unwrap();
        assert_eq!(report.progress.fixed, 1, "{mode:?}: {report:?}");
        let film = keyed.get(&movie.id).await.unwrap().unwrap();
        let dates: Vec<i64> = film.latest.iter().map(|c| c.date).collect();
        assert_eq!(dates, [4, 3, 2, 1], "{mode:?}");

        // Forced, the renamed model empties the view (its children are under another key).
        let options = SweepOptions::default().allow_emptying(true);
        let report = films.rebuild().options(options).await.unwrap();
        assert_eq!(report.progress.fixed, 1, "{mode:?}: {report:?}");
        let emptied = films.get(&movie.id).await.unwrap().unwrap();
        assert!(emptied.latest.is_empty(), "{mode:?}");
    }
}

/// `n` parents written by `old`, each with 4 comments.
async fn old_parents(old: &Store<Latest3>, rng: &mut impl Rng, n: usize) -> Vec<Bson> {
    let mut parents = Vec::with_capacity(n);
    for _ in 0..n {
        parents.push(old_parent(old, rng, 4).await);
    }
    parents
}

/// A parent written by `old` with `comments` comments.
async fn old_parent(old: &Store<Latest3>, rng: &mut impl Rng, comments: usize) -> Bson {
    let id = Bson::ObjectId(ObjectId::new());
    old.raw()
        .insert(doc! { "_id": id.clone(), "latest": [], "n": 0_i64 })
        .await
        .unwrap();
    let children: Vec<Document> = (0..comments).map(|_| comment(rng, &id)).collect();
    old.raw()
        .children(&Latest3::SUBSETS[0])
        .push(&id, children)
        .await
        .unwrap();
    id
}

/// The registry after a rebuild: the definitions no parent is built under any more lose their
/// stored body (their digests stay listed), the current one and one a parent still holds stay
/// whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebuild_drops_the_definitions_no_parent_is_built_under() {
    use subset::bookkeeping::Registered;

    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let old = Store::<Latest3>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let parents = old_parents(&old, &mut rng, 4).await;
        // A parent of the old model whose children now carry another key (renamed outside
        // the library): the rebuild refuses to empty its view, so it stays built under the old
        // definition.
        let stranded = old_parent(&old, &mut rng, 1).await;
        db.collection::<Document>("comments")
            .update_many(
                doc! { "movie_id": stranded.clone() },
                doc! { "$rename": { "movie_id": "film_ref" } },
            )
            .await
            .unwrap();
        let new = Store::<WithFirst>::with_options(&db, subset::StoreOptions::new().mode(mode));
        new.raw()
            .insert(doc! { "_id": ObjectId::new(), "latest": [], "first": [], "n": 0_i64 })
            .await
            .unwrap();
        let before = Registered::read(&db, &Default::default(), "movies")
            .await
            .unwrap()
            .unwrap();
        let (old_digest, new_digest) = (
            before.definitions[0].digest.clone(),
            before.definitions[1].digest.clone(),
        );
        assert_eq!(before.current, new_digest, "{mode:?}");
        assert!(
            before.model(&old_digest).is_some(),
            "{mode:?}: both whole before"
        );
        assert!(before.model(&new_digest).is_some(), "{mode:?}");

        let report = new.rebuild().await.unwrap();
        assert_eq!(report.progress.failed, 1, "{mode:?}: the stranded parent");
        let kept = Registered::read(&db, &Default::default(), "movies")
            .await
            .unwrap()
            .unwrap();
        assert!(
            kept.model(&old_digest).is_some(),
            "{mode:?}: a parent is still built under the old definition"
        );

        let all = SweepOptions::default().allow_emptying(true);
        let report = new.rebuild().options(all).await.unwrap();
        assert_eq!(report.progress.fixed, 1, "{mode:?}");
        let after = Registered::read(&db, &Default::default(), "movies")
            .await
            .unwrap()
            .unwrap();
        let digests: Vec<&str> = after
            .definitions
            .iter()
            .map(|d| d.digest.as_str())
            .collect();
        assert_eq!(
            digests,
            [old_digest.as_str(), new_digest.as_str()],
            "{mode:?}: digests stay"
        );
        assert!(
            after.model(&old_digest).is_none(),
            "{mode:?}: old body dropped"
        );
        assert_eq!(after.current, new_digest);
        assert_eq!(
            after.current_model().unwrap().subsets.len(),
            WithFirst::SUBSETS.len()
        );
        for parent in &parents {
            assert_read_right(&new, parent, None).await;
        }
        // The old code writing again stores its definition whole again.
        old.raw()
            .insert(doc! { "_id": ObjectId::new(), "latest": [], "n": 0_i64 })
            .await
            .unwrap();
        let stale = Store::<Latest3>::with_options(&db, subset::StoreOptions::new().mode(mode));
        stale
            .raw()
            .insert(doc! { "_id": ObjectId::new(), "latest": [], "n": 0_i64 })
            .await
            .unwrap();
        let again = Registered::read(&db, &Default::default(), "movies")
            .await
            .unwrap()
            .unwrap();
        assert!(again.model(&old_digest).is_some(), "{mode:?}");
        assert_eq!(
            again.current, new_digest,
            "{mode:?}: a seen definition stays old"
        );
    }
}

/// How a parent stands after the old model's code wrote it: `(d, view length)` of its marker
/// and its stored `latest`.
async fn stored_state(db: &mongodb::Database, parent: &Bson) -> (String, usize) {
    let stored = db
        .collection::<Document>("movies")
        .find_one(doc! { "_id": parent.clone() })
        .await
        .unwrap()
        .unwrap();
    let d = stored
        .get_document("_subset")
        .ok()
        .and_then(|m| m.get_str("d").ok())
        .unwrap_or("(none)")
        .to_owned();
    (d, stored.get_array("latest").map_or(0, Vec::len))
}

/// Parents of the old model (`Latest3`) rebuilt under the new one (`Latest6`), each with
/// `children[i]` comments; returns the stores and the parents.
async fn built_under_new(
    db: &mongodb::Database,
    mode: WriteMode,
    children: &[usize],
) -> (Store<Latest3>, Store<Latest6>, Vec<Bson>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let old = Store::<Latest3>::with_options(db, subset::StoreOptions::new().mode(mode));
    let mut parents = Vec::new();
    for &n in children {
        let id = Bson::ObjectId(ObjectId::new());
        old.raw()
            .insert(doc! { "_id": id.clone(), "latest": [], "n": 0_i64 })
            .await
            .unwrap();
        let comments: Vec<Document> = (0..n).map(|_| comment(&mut rng, &id)).collect();
        if !comments.is_empty() {
            old.raw()
                .children(&Latest3::SUBSETS[0])
                .push(&id, comments)
                .await
                .unwrap();
        }
        parents.push(id);
    }
    let new = Store::<Latest6>::with_options(db, subset::StoreOptions::new().mode(mode));
    let report = new.rebuild().await.unwrap();
    assert_eq!(report.progress.fixed, children.len() as u64, "{mode:?}");
    (old, new, parents)
}

/// The old model's code removes every child of `parent`, one by one: the parent is of the new
/// model, so each removal marks it as built under none and leaves its view as it was.
async fn old_code_removes_all(old: &Store<Latest3>, parent: &Bson) {
    let comments = old.database().collection::<Document>("comments");
    let ids: Vec<Bson> = comments
        .find(doc! { "movie_id": parent.clone() })
        .await
        .unwrap()
        .map_ok(|c| c.get("_id").cloned().unwrap())
        .try_collect()
        .await
        .unwrap();
    for id in ids {
        old.raw()
            .children(&Latest3::SUBSETS[0])
            .remove(parent, &id)
            .await
            .unwrap();
    }
}

/// A rebuild's batch that holds a malformed parent (its view is not an array) rebuilds every
/// other parent of the batch, and names the malformed one among its failures.
#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_parent_fails_alone_in_its_batch() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let old = Store::<Latest3>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let mut parents = old_parents(&old, &mut rng, 6).await;
        let malformed = parents.remove(2);
        db.collection::<Document>("movies")
            .update_one(
                doc! { "_id": malformed.clone() },
                doc! { "$set": { "latest": "not a view" } },
            )
            .await
            .unwrap();
        let new = Store::<Latest6>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let report = new.rebuild().await.unwrap();
        let p = &report.progress;
        assert_eq!((p.checked, p.fixed, p.failed), (6, 5, 1), "{mode:?}");
        let failures: Vec<&Bson> = report.failures.iter().map(|f| &f.parent).collect();
        assert_eq!(failures, [&malformed], "{mode:?}");
        let error = &report.failures[0].error;
        assert!(
            matches!(error, subset::Error::MalformedParent { field, .. } if field == "latest"),
            "{mode:?}: {error:?}"
        );
        // Every other parent holds its 4 comments, where the old model kept 3, under one
        // definition that is not the malformed parent's.
        let (built, _) = stored_state(&db, &parents[0]).await;
        for parent in &parents {
            assert_eq!(
                stored_state(&db, parent).await,
                (built.clone(), 4),
                "{mode:?}"
            );
        }
        assert_ne!(stored_state(&db, &malformed).await.0, built, "{mode:?}");
        let again = new.rebuild().await.unwrap();
        assert_eq!(
            (again.progress.checked, again.progress.failed),
            (1, 1),
            "{mode:?}: only the malformed parent is left"
        );
    }
}

/// A rolling deploy where the old code removed the last child of parents of the new model:
/// their views still hold that child, and no child is stored under any key. One rebuild
/// rebuilds them empty (none is refused, the first rebuild included, where every outdated
/// parent is such a one), leaves every parent built under the new model, and the checks are
/// clean; the rollback's rebuild does the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebuild_empties_views_whose_last_child_the_old_code_removed() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let (old, new, parents) = built_under_new(&db, mode, &[1, 2, 3, 4]).await;
        let emptied = &parents[..3];
        for parent in emptied {
            old_code_removes_all(&old, parent).await;
            let (d, held) = stored_state(&db, parent).await;
            assert_eq!(d, "", "{mode:?}: marked as built under none");
            assert!(held > 0, "{mode:?}: the view was left as it was");
            assert_read_right(&new, parent, None).await;
        }

        let options = SweepOptions::default().batch_size(2);
        let report = new.rebuild().options(options.clone()).await.unwrap();
        assert!(
            report.failures.is_empty(),
            "{mode:?}: {:?}",
            report.failures
        );
        assert_eq!(report.progress.fixed, emptied.len() as u64, "{mode:?}");
        for parent in emptied {
            let id = parent.as_object_id().unwrap();
            let movie = new.get(&id).await.unwrap().unwrap();
            assert!(movie.latest.is_empty(), "{mode:?}");
            assert_eq!(movie.n, 0, "{mode:?}");
        }
        let again = new.rebuild().options(options.clone()).await.unwrap();
        assert_eq!(
            again.progress.checked, 0,
            "{mode:?}: nothing is left to rebuild"
        );
        let check = new.check_all().options(options.clone()).await.unwrap();
        let p = &check.progress;
        assert_eq!(
            (p.drifted, p.outdated, p.failed),
            (0, 0, 0),
            "{mode:?}: {check:?}"
        );
        for parent in &parents {
            assert_read_right(&new, parent, None).await;
        }

        // A rollback: the old code empties another parent the same way, and its rebuild
        // rebuilds every parent under the old model, refusing none.
        old_code_removes_all(&old, &parents[3]).await;
        let report = old.rebuild().options(options.clone()).await.unwrap();
        assert!(
            report.failures.is_empty(),
            "{mode:?}: {:?}",
            report.failures
        );
        assert_eq!(report.progress.fixed, parents.len() as u64, "{mode:?}");
        let check = old.check_all().options(options).await.unwrap();
        let p = &check.progress;
        assert_eq!(
            (p.drifted, p.outdated, p.failed),
            (0, 0, 0),
            "{mode:?}: {check:?}"
        );
        for parent in &parents {
            assert_read_right(&old, parent, None).await;
        }
    }
}

/// Parents of the new model after a rolling deploy: `gone`, whose last child the old code
/// removed; `renamed`, which the old code wrote (so marked as built under none) and whose
/// children then had their key renamed to `film_ref`; `plain`, built under the new model.
async fn gone_and_renamed(db: &mongodb::Database, mode: WriteMode) -> (Store<Latest6>, [Bson; 3]) {
    let (old, new, parents) = built_under_new(db, mode, &[1, 3, 2]).await;
    let [gone, renamed, plain] = <[Bson; 3]>::try_from(parents).unwrap();
    old_code_removes_all(&old, &gone).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    old.raw()
        .children(&Latest3::SUBSETS[0])
        .push(&renamed, vec![comment(&mut rng, &renamed)])
        .await
        .unwrap();
    db.collection::<Document>("comments")
        .update_many(
            doc! { "movie_id": renamed.clone() },
            doc! { "$rename": { "movie_id": "film_ref" } },
        )
        .await
        .unwrap();
    assert_eq!(stored_state(db, &renamed).await.0, "", "{mode:?}");
    (new, [gone, renamed, plain])
}

/// The parents a sweep failed, each with the key its refusal says the children carry.
fn refused(report: &subset::repair::SweepReport) -> Vec<(Bson, String)> {
    report
        .failures
        .iter()
        .map(|f| match &f.error {
            subset::Error::RebuildWouldEmpty { carried, id, .. } => {
                assert_eq!(**id, f.parent);
                (f.parent.clone(), carried.clone())
            }
            other => panic!("{}: {other:?}", f.parent),
        })
        .collect()
}

/// `rebuild`, `reconcile_all`, `check_all` and a single parent's `check` and `reconcile`
/// reach one verdict on the same parents: the one whose children carry another key is
/// refused, the one whose children are gone is rebuilt empty, the others are left alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebuild_and_a_reconcile_refuse_the_same_parents() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let to_rebuild = common::replica_db().await;
        let (new, [gone, renamed, _]) = gone_and_renamed(&to_rebuild, mode).await;
        let refusal = vec![(renamed.clone(), "film_ref".to_owned())];

        let check = new.check_all().await.unwrap();
        assert_eq!(refused(&check), refusal, "{mode:?}: check_all");
        assert_eq!(check.progress.outdated, 1, "{mode:?}: the emptied parent");
        let latest = new.raw().children(&Latest6::SUBSETS[0]);
        assert!(latest.check(&gone).await.unwrap().outdated, "{mode:?}");
        let one = latest.check(&renamed).await;
        assert!(
            matches!(one, Err(subset::Error::RebuildWouldEmpty { .. })),
            "{mode:?}: {one:?}"
        );

        let rebuilt = new.rebuild().await.unwrap();
        assert_eq!(refused(&rebuilt), refusal, "{mode:?}: rebuild");
        assert_eq!(rebuilt.progress.fixed, 1, "{mode:?}");

        // The same parents, on another database, reconciled instead.
        let to_reconcile = common::replica_db().await;
        let (new, [gone, renamed, _]) = gone_and_renamed(&to_reconcile, mode).await;
        let refusal = vec![(renamed.clone(), "film_ref".to_owned())];
        let reconciled = new.reconcile_all().await.unwrap();
        assert_eq!(refused(&reconciled), refusal, "{mode:?}: reconcile_all");
        assert_eq!(reconciled.progress.fixed, 1, "{mode:?}");
        let (d, held) = stored_state(&to_reconcile, &renamed).await;
        assert_eq!((d.as_str(), held), ("", 3), "{mode:?}: nothing written");
        let id = gone.as_object_id().unwrap();
        assert!(new.get(&id).await.unwrap().unwrap().latest.is_empty());
        let latest = new.raw().children(&Latest6::SUBSETS[0]);
        let one = latest.reconcile(&renamed).await;
        assert!(
            matches!(one, Err(subset::Error::RebuildWouldEmpty { .. })),
            "{mode:?}: {one:?}"
        );

        // Allowed to empty, both rebuild it.
        let all = SweepOptions::default().allow_emptying(true);
        let reconciled = new.reconcile_all().options(all.clone()).await.unwrap();
        assert!(reconciled.failures.is_empty(), "{mode:?}");
        assert_eq!(stored_state(&to_reconcile, &renamed).await.1, 0, "{mode:?}");
        let new =
            Store::<Latest6>::with_options(&to_rebuild, subset::StoreOptions::new().mode(mode));
        let rebuilt = new.rebuild().options(all).await.unwrap();
        assert_eq!(rebuilt.progress.fixed, 1, "{mode:?}");
        let check = new.check_all().await.unwrap();
        let p = &check.progress;
        assert_eq!((p.drifted, p.outdated, p.failed), (0, 0, 0), "{mode:?}");
    }
}

/// An entry of a ledger: an amount of money, summed exactly as a `Decimal128`.
#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Entry {
    #[serde(rename = "_id")]
    id: ObjectId,
    amount: bson::Decimal128,
    date: i64,
}

/// A ledger of one model: its latest entries and its balance, a `Decimal128` sum.
macro_rules! ledger {
    ($name:ident, $keep:literal) => {
        #[derive(Debug, Clone, Serialize, Deserialize, Subset)]
        #[subset(collection = "model_ledgers")]
        struct $name {
            #[serde(rename = "_id")]
            id: ObjectId,
            #[subset(child = "model_entries", keep = $keep, sort = "date desc", sum = "balance = amount")]
            latest: Vec<Entry>,
            balance: bson::Decimal128,
        }
    };
}

ledger!(Ledger2, 2);
ledger!(Ledger4, 4);

/// A ledger without entries read through a model its view was not built under: the balance is
/// computed from the child collection, where the sum of nothing is an integer 0, and read as a
/// `Decimal128` zero, the type the ledger stores.
#[tokio::test(flavor = "multi_thread")]
async fn a_decimal_sum_of_no_children_reads_as_a_decimal_under_another_model() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let zero: bson::Decimal128 = "0".parse().unwrap();
        let old = Store::<Ledger2>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let empty = Ledger2 {
            id: ObjectId::new(),
            latest: Vec::new(),
            balance: zero,
        };
        old.insert(&empty).await.unwrap();
        let new = Store::<Ledger4>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let read = new.get(&empty.id).await.unwrap().unwrap();
        assert_eq!(read.balance.to_string(), "0", "{mode:?}");
        assert!(read.latest.is_empty(), "{mode:?}");
        // Rebuilt, the stored balance stays a decimal.
        new.rebuild().await.unwrap();
        let stored = db
            .collection::<Document>("model_ledgers")
            .find_one(doc! { "_id": empty.id })
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(stored.get("balance"), Some(Bson::Decimal128(_))),
            "{mode:?}: {stored:?}"
        );
    }
}

/// The commands `log` recorded since it was last taken: name and target.
fn taken(log: &common::CommandLog) -> Vec<(String, String)> {
    std::mem::take(&mut *log.lock().unwrap())
        .into_iter()
        .map(|(name, target, _)| (name, target))
        .collect()
}

fn sent(name: &str, target: &str) -> (String, String) {
    (name.to_owned(), target.to_owned())
}

/// The `_id`s of a served view, or of a page's items.
fn ids_of<'d>(children: impl IntoIterator<Item = &'d Bson>) -> Vec<Bson> {
    children
        .into_iter()
        .map(|c| c.as_document().unwrap().get("_id").cloned().unwrap())
        .collect()
}

/// While reads keep computing a view (a model changed and not yet rebuilt), `get` and the
/// first page read the parent and the view's children in one `aggregate`, and read what the
/// two commands read; once the parents are rebuilt, reads go back to one `find`.
#[tokio::test]
async fn frequent_reads_of_outdated_parents_read_the_children_with_the_parent() {
    let (db, log) = common::recorded_replica_db().await;
    let old = Store::<Latest3>::new(&db);
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let mut parents = Vec::new();
    // The first four outdated: three comments or more, where the old model kept three.
    for comments in [6, 6, 7, 5, 2, 0] {
        parents.push(old_parent(&old, &mut rng, comments).await);
    }
    let new = Store::<Latest6>::new(&db);
    let latest = new.raw().children(&Latest6::SUBSETS[0]);
    taken(&log);
    for parent in &parents[..4] {
        new.raw().get(parent).await.unwrap().unwrap();
        assert_eq!(
            taken(&log),
            [sent("find", "movies"), sent("aggregate", "comments")],
            "the first reads read apart"
        );
    }
    for parent in &parents {
        let read = new.raw().get(parent).await.unwrap().unwrap();
        assert_eq!(taken(&log), [sent("aggregate", "movies")], "one command");
        let read = Document::try_from(read.as_ref()).unwrap();
        let (ids, n, _) = truth(&db, &Latest6::SUBSETS[0], parent, None).await;
        assert_eq!(ids_of(read.get_array("latest").unwrap()), ids, "{parent}");
        assert_eq!(read.get_i64("n").unwrap(), n, "{parent}");
        taken(&log);
        let page = latest.page(parent, &PageRequest::first(4)).await.unwrap();
        assert_eq!(taken(&log), [sent("aggregate", "movies")], "one command");
        let items: Vec<Bson> = page
            .items
            .iter()
            .map(|i| Bson::Document(Document::try_from(i.as_ref()).unwrap()))
            .collect();
        assert_eq!(ids_of(&items), ids[..ids.len().min(4)], "{parent}");
        assert_eq!(page.has_next(), ids.len() > 4, "{parent}");
        taken(&log);
    }
    // The typed read and the reads of every view agree with the child collection.
    for parent in &parents {
        assert_read_right(&new, parent, None).await;
    }
    // In the caller's session (whose transaction a refused command would abort), apart.
    let mut session = db.client().start_session().await.unwrap();
    taken(&log);
    new.raw()
        .get(&parents[0])
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(
        taken(&log),
        [sent("find", "movies"), sent("aggregate", "comments")]
    );
    new.rebuild().await.unwrap();
    taken(&log);
    // Still reading ahead, right, until enough reads compute nothing; then a `find`.
    let mut reads = 0;
    loop {
        let parent = &parents[reads % parents.len()];
        let read = new.raw().get(parent).await.unwrap().unwrap();
        let read = Document::try_from(read.as_ref()).unwrap();
        let (ids, _, _) = truth(&db, &Latest6::SUBSETS[0], parent, None).await;
        assert_eq!(ids_of(read.get_array("latest").unwrap()), ids, "{parent}");
        reads += 1;
        let commands = taken(&log);
        let commands: Vec<_> = commands.iter().filter(|(_, t)| t == "movies").collect();
        if commands == [&sent("find", "movies")] {
            break;
        }
        assert_eq!(commands, [&sent("aggregate", "movies")]);
        assert!(
            reads < 64,
            "still reading ahead after {reads} reads of rebuilt parents"
        );
    }
}

/// A view added to a model is read ahead alone: the views built already are read as stored.
#[tokio::test]
async fn a_view_added_is_read_ahead_alone() {
    let (db, log) = common::recorded_replica_db().await;
    let old = Store::<Latest3>::new(&db);
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let parents = old_parents(&old, &mut rng, 6).await;
    let new = Store::<WithFirst>::new(&db);
    for parent in &parents[..4] {
        new.raw().get(parent).await.unwrap().unwrap();
    }
    log.lock().unwrap().clear();
    for parent in &parents[4..] {
        new.raw().get(parent).await.unwrap().unwrap();
        let commands = std::mem::take(&mut *log.lock().unwrap());
        let [(name, target, command)] = commands.as_slice() else {
            panic!("one command: {commands:?}");
        };
        assert_eq!((name.as_str(), target.as_str()), ("aggregate", "movies"));
        let lookups: Vec<&Document> = command
            .get_array("pipeline")
            .unwrap()
            .iter()
            .filter_map(|stage| stage.as_document()?.get_document("$lookup").ok())
            .collect();
        assert_eq!(lookups.len(), 1, "only the added view: {command}");
        let limit = lookups[0]
            .get_array("pipeline")
            .unwrap()
            .iter()
            .find_map(|stage| stage.as_document()?.get("$limit").cloned());
        assert_eq!(
            limit,
            Some(Bson::Int64(2)),
            "the added view's keep: {command}"
        );
        assert_read_right(&new, parent, None).await;
        log.lock().unwrap().clear();
    }
}

/// A read ahead that cannot be sent reads apart, and reads right: one whose answer would be
/// over the 16 MiB of a document (after which the count starts again), and one the server
/// cannot run (after which the store does not ask again); a failure of the moment fails the
/// read and stops nothing.
#[tokio::test]
async fn a_read_ahead_that_cannot_be_sent_reads_apart() {
    let _turn = crate::FAIL_POINT.lock().await;
    let _big = crate::BIG_DOCUMENTS.lock().await;
    let server = subset_testkit::MongoServer::shared(subset_testkit::Topology::ReplicaSet)
        .await
        .unwrap();
    let name = common::replica_db().await.name().to_owned();
    let mut options = mongodb::options::ClientOptions::parse(server.uri())
        .await
        .unwrap();
    options.app_name = Some("read-ahead-refused".to_owned());
    let log = common::record_commands(&mut options);
    let db = mongodb::Client::with_options(options)
        .unwrap()
        .database(&name);
    let old = Store::<Latest3>::new(&db);
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let parents = old_parents(&old, &mut rng, 4).await;
    // A parent whose children, added to it, are over the limit: 4 MiB of its own and three
    // of its six comments of 1.5 MiB embedded (8.5 MiB), with all six (9 MiB) read ahead.
    let big = Bson::ObjectId(ObjectId::new());
    let pad = "x".repeat(4 * 1024 * 1024);
    old.raw()
        .insert(doc! { "_id": big.clone(), "latest": [], "n": 0_i64, "pad": pad })
        .await
        .unwrap();
    let long: Vec<Document> = (0..6)
        .map(|_| {
            let mut c = comment(&mut rng, &big);
            c.insert("text", "y".repeat(1536 * 1024));
            c
        })
        .collect();
    old.raw()
        .children(&Latest3::SUBSETS[0])
        .push(&big, long)
        .await
        .unwrap();
    let new = Store::<Latest6>::new(&db);
    for parent in &parents {
        new.raw().get(parent).await.unwrap().unwrap();
    }
    taken(&log);
    let read = new.raw().get(&big).await.unwrap().unwrap();
    assert_eq!(
        taken(&log),
        [
            sent("aggregate", "movies"),
            sent("find", "movies"),
            sent("aggregate", "comments")
        ],
        "too large together: read apart"
    );
    let read = Document::try_from(read.as_ref()).unwrap();
    let (ids, n, _) = truth(&db, &Latest6::SUBSETS[0], &big, None).await;
    assert_eq!(ids_of(read.get_array("latest").unwrap()), ids);
    assert_eq!(read.get_i64("n").unwrap(), n);
    // The server built that answer before refusing it, so the count starts again (that read,
    // which computed the view, counts once): a parent that large, read again and again, is
    // read ahead once in four reads, not on every read.
    taken(&log);
    for round in 0..2 {
        for i in 0..3 {
            new.raw().get(&big).await.unwrap().unwrap();
            assert_eq!(
                taken(&log),
                [sent("find", "movies"), sent("aggregate", "comments")],
                "round {round}, read {i}: apart"
            );
        }
        new.raw().get(&big).await.unwrap().unwrap();
        assert_eq!(
            taken(&log),
            [
                sent("aggregate", "movies"),
                sent("find", "movies"),
                sent("aggregate", "comments")
            ],
            "round {round}: read ahead again after three"
        );
    }
    // Four outdated parents of the usual size open it again.
    for parent in &parents {
        new.raw().get(parent).await.unwrap().unwrap();
    }
    taken(&log);

    // A failure of the moment (a time limit) fails the read, as it would a `find`, and the
    // store reads ahead again at once.
    let fail_next = |code: i32| {
        doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": {
                "failCommands": ["aggregate"],
                "appName": "read-ahead-refused",
                "errorCode": code,
            },
        }
    };
    let admin = db.client().database("admin");
    admin.run_command(fail_next(50)).await.unwrap();
    taken(&log);
    let failed = new.raw().get(&parents[0]).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(taken(&log), [sent("aggregate", "movies")]);
    new.raw().get(&parents[0]).await.unwrap().unwrap();
    assert_eq!(
        taken(&log),
        [sent("aggregate", "movies")],
        "read ahead again"
    );

    // Refused as a pipeline the server cannot run (an unknown stage): this read reads apart,
    // and so does every later one.
    admin.run_command(fail_next(40324)).await.unwrap();
    taken(&log);
    for (i, parent) in parents.iter().enumerate() {
        let read = new.raw().get(parent).await.unwrap().unwrap();
        let mut expected = vec![sent("find", "movies"), sent("aggregate", "comments")];
        if i == 0 {
            expected.insert(0, sent("aggregate", "movies"));
        }
        assert_eq!(taken(&log), expected, "read {i}");
        let read = Document::try_from(read.as_ref()).unwrap();
        let (ids, n, _) = truth(&db, &Latest6::SUBSETS[0], parent, None).await;
        assert_eq!(ids_of(read.get_array("latest").unwrap()), ids);
        assert_eq!(read.get_i64("n").unwrap(), n);
        taken(&log);
    }
    admin
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .unwrap();
}

/// A parent with one view read ahead and another outdated too (its writer died between its
/// writes, so every view must be computed): the view read ahead is taken from the one
/// `aggregate`, and only the other is read second.
#[tokio::test]
async fn a_view_not_read_ahead_is_read_second_alone() {
    let (db, log) = common::recorded_replica_db().await;
    let old = Store::<Latest3>::new(&db);
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let parents = old_parents(&old, &mut rng, 5).await;
    let new = Store::<WithFirst>::new(&db);
    // `first`, added, is read ahead; `latest`, built, is not.
    for parent in &parents[..4] {
        new.raw().get(parent).await.unwrap().unwrap();
    }
    let abandoned = &parents[4];
    let expired = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() - 60_000);
    db.collection::<Document>("movies")
        .update_one(
            doc! { "_id": abandoned.clone() },
            doc! { "$set": { "_subset.l": { "o": ObjectId::new(), "u": expired } } },
        )
        .await
        .unwrap();
    log.lock().unwrap().clear();
    let read = new.raw().get(abandoned).await.unwrap().unwrap();
    let commands = std::mem::take(&mut *log.lock().unwrap());
    let [(first, parents_of, _), (second, children, computed)] = commands.as_slice() else {
        panic!("two commands: {commands:?}");
    };
    assert_eq!(
        (first.as_str(), parents_of.as_str()),
        ("aggregate", "movies")
    );
    assert_eq!(
        (second.as_str(), children.as_str()),
        ("aggregate", "comments")
    );
    // `latest`'s top and count, not `first`'s top again.
    let facet = computed.get_array("pipeline").unwrap()[1]
        .as_document()
        .unwrap()
        .get_document("$facet")
        .unwrap();
    assert_eq!(facet.len(), 2, "{computed}");
    let read = Document::try_from(read.as_ref()).unwrap();
    for spec in WithFirst::SUBSETS {
        let (ids, n, _) = truth(&db, spec, abandoned, None).await;
        assert_eq!(
            ids_of(read.get_array(spec.field).unwrap()),
            ids,
            "{}",
            spec.field
        );
        if let Some(count) = spec.count {
            assert_eq!(read.get_i64(count).unwrap(), n);
        }
    }
}
