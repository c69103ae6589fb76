//! The parent key as a child field (`movie_id` on a `Comment`): filled in when a child is written
//! without it, refused when it names another parent, and kept in the embedded copies, so that a
//! page item says which parent it belongs to wherever it was read. Both write modes.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::stores;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Child, Error, PageRequest, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    movie_id: ObjectId,
    name: String,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "key_movies")]
struct Movie {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "key_comments",
        keep = 3,
        sort = "date desc",
        count = "num_comments"
    )]
    comments: Vec<Comment>,
    #[serde(default)]
    num_comments: i64,
}

/// A child that may be written without its key: left out when `None`, filled in by the write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Note {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    film_id: Option<ObjectId>,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "key_films")]
struct Film {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "key_notes", keep = 2, sort = "date desc", count = "num_notes")]
    notes: Vec<Note>,
    #[serde(default)]
    num_notes: i64,
}

fn comment(movie: &ObjectId, millis: i64) -> Comment {
    Comment {
        id: ObjectId::new(),
        movie_id: *movie,
        name: format!("viewer {millis}"),
        date: DateTime::from_millis(millis),
    }
}

fn note(film: Option<ObjectId>, millis: i64) -> Note {
    Note {
        id: ObjectId::new(),
        film_id: film,
        date: DateTime::from_millis(millis),
    }
}

/// The raw parent document.
async fn raw_parent<P: Subset>(store: &Store<P>, id: &ObjectId) -> Option<Document> {
    store
        .database()
        .collection::<Document>(P::COLLECTION)
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
}

/// The keys the embedded copies of `field` hold, read raw.
async fn embedded_keys<P: Subset>(
    store: &Store<P>,
    id: &ObjectId,
    field: &str,
    key: &str,
) -> Vec<Option<Bson>> {
    let parent = raw_parent(store, id).await.expect("the parent exists");
    parent
        .get_array(field)
        .unwrap()
        .iter()
        .map(|e| e.as_document().unwrap().get(key).cloned())
        .collect()
}

/// The raw child documents of `collection`.
async fn stored(db: &mongodb::Database, collection: &str) -> Vec<Document> {
    db.collection::<Document>(collection)
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

fn is_mismatch(
    e: &Error,
    parent: &ObjectId,
    child: &ObjectId,
    field: &str,
    found: &ObjectId,
) -> bool {
    matches!(
        e,
        Error::ParentKeyMismatch { parent: p, child: c, field: f, found: x, collection }
            if **p == Bson::ObjectId(*parent)
                && **c == Bson::ObjectId(*child)
                && f == field
                && **x == Bson::ObjectId(*found)
                && collection == "key_notes"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_fills_a_missing_key_keeps_an_equal_one_and_refuses_another() {
    for store in stores::<Film>().await {
        let mode = store.mode().await.unwrap();
        let film = Film {
            id: ObjectId::new(),
            notes: Vec::new(),
            num_notes: 0,
        };
        store.insert(&film).await.unwrap();
        let notes = store.children(Film::NOTES);

        // Without the key: the stored child and its embedded copy get the film's `_id`.
        let first = note(None, 10);
        notes.push(&film.id, &first).await.unwrap();
        let got = store.get(&film.id).await.unwrap().unwrap();
        assert_eq!(got.notes[0].film_id, Some(film.id), "{mode:?}");
        let all = stored(store.database(), "key_notes").await;
        assert_eq!(all.len(), 1, "{mode:?}");
        assert_eq!(
            all[0].get("film_id"),
            Some(&Bson::ObjectId(film.id)),
            "{mode:?}"
        );

        // With the key equal to the parent's `_id`: accepted.
        let second = note(Some(film.id), 20);
        notes
            .push_many(&film.id, std::slice::from_ref(&second))
            .await
            .unwrap();

        // Another parent's `_id`: refused before anything is written, alone or in a batch.
        let other = ObjectId::new();
        let stray = note(Some(other), 30);
        let e = notes.push(&film.id, &stray).await.unwrap_err();
        assert!(
            is_mismatch(&e, &film.id, &stray.id, "film_id", &other),
            "{mode:?}: {e:?}"
        );
        let e = notes
            .push_many(&film.id, &[note(None, 40), stray.clone()])
            .await
            .unwrap_err();
        assert!(
            is_mismatch(&e, &film.id, &stray.id, "film_id", &other),
            "{mode:?}: {e:?}"
        );
        assert_eq!(
            stored(store.database(), "key_notes").await.len(),
            2,
            "{mode:?}"
        );
        let got = store.get(&film.id).await.unwrap().unwrap();
        assert_eq!(got.num_notes, 2, "{mode:?}");
        assert_eq!(
            got.notes,
            [
                Note {
                    film_id: Some(film.id),
                    ..second.clone()
                },
                Note {
                    film_id: Some(film.id),
                    ..first.clone()
                },
            ],
            "{mode:?}"
        );

        // An update naming another parent is refused too, and leaves the child as it was.
        let moved = Note {
            film_id: Some(other),
            ..first.clone()
        };
        let e = notes.update(&film.id, &moved).await.unwrap_err();
        assert!(
            is_mismatch(&e, &film.id, &first.id, "film_id", &other),
            "{mode:?}: {e:?}"
        );
        let keys = embedded_keys(&store, &film.id, "notes", "film_id").await;
        assert_eq!(keys, vec![Some(Bson::ObjectId(film.id)); 2], "{mode:?}");
        assert!(notes.check(&film.id).await.unwrap().is_clean(), "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn page_items_carry_the_key_from_the_embedded_array_and_the_collection() {
    for store in stores::<Movie>().await {
        let mode = store.mode().await.unwrap();
        let movie = Movie {
            id: ObjectId::new(),
            comments: Vec::new(),
            num_comments: 0,
        };
        store.insert(&movie).await.unwrap();
        let comments = store.children(Movie::COMMENTS);
        let mut all: Vec<Comment> = (1..=7).map(|i| comment(&movie.id, i * 10)).collect();
        comments.push_many(&movie.id, &all).await.unwrap();
        all.sort_by_key(|c| std::cmp::Reverse((c.date, c.id)));

        // The embedded copies keep the key: the product page's items are the collection's.
        let got = store.get(&movie.id).await.unwrap().unwrap();
        assert_eq!(got.comments, all[..3], "{mode:?}");
        let keys = embedded_keys(&store, &movie.id, "comments", "movie_id").await;
        assert_eq!(keys, vec![Some(Bson::ObjectId(movie.id)); 3], "{mode:?}");

        // A page that starts in the embedded array and goes on in the collection.
        let page = comments
            .page(&movie.id, &PageRequest::first(5))
            .await
            .unwrap();
        assert_eq!(page.items, all[..5], "{mode:?}");
        assert!(page.items.iter().all(|c| c.movie_id == movie.id));
        let rest = comments
            .page(&movie.id, &PageRequest::after(page.next.unwrap(), 5))
            .await
            .unwrap();
        assert_eq!(rest.items, all[5..], "{mode:?}");

        // Removing an embedded comment backfills one from the collection, key and all.
        comments.remove(&movie.id, &all[0].id).await.unwrap();
        let got = store.get(&movie.id).await.unwrap().unwrap();
        assert_eq!(got.comments, all[1..4], "{mode:?}");
        assert!(
            comments.check(&movie.id).await.unwrap().is_clean(),
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn insert_keeps_the_key_and_refuses_a_child_of_another_parent() {
    for store in stores::<Movie>().await {
        let mode = store.mode().await.unwrap();
        let id = ObjectId::new();
        let mut given: Vec<Comment> = (1..=4).map(|i| comment(&id, i * 10)).collect();
        let movie = Movie {
            id,
            comments: given.clone(),
            num_comments: 0,
        };
        store.insert(&movie).await.unwrap();
        given.sort_by_key(|c| std::cmp::Reverse((c.date, c.id)));
        let got = store.get(&id).await.unwrap().unwrap();
        assert_eq!(got.comments, given[..3], "{mode:?}");
        assert_eq!(got.num_comments, 4, "{mode:?}");
        let keys = embedded_keys(&store, &id, "comments", "movie_id").await;
        assert_eq!(keys, vec![Some(Bson::ObjectId(id)); 3], "{mode:?}");

        // A comment of another movie in the parent: nothing is written.
        let other = ObjectId::new();
        let stray = comment(&other, 50);
        let refused_id = ObjectId::new();
        let refused = Movie {
            id: refused_id,
            comments: vec![comment(&refused_id, 1), stray.clone()],
            num_comments: 0,
        };
        let e = store.insert(&refused).await.unwrap_err();
        assert!(
            matches!(&e, Error::ParentKeyMismatch { field, parent, child, found, .. }
                if field == "movie_id"
                    && **parent == Bson::ObjectId(refused_id)
                    && **child == Bson::ObjectId(stray.id)
                    && **found == Bson::ObjectId(other)),
            "{mode:?}: {e:?}"
        );
        assert!(raw_parent(&store, &refused.id).await.is_none(), "{mode:?}");
        assert_eq!(
            stored(store.database(), "key_comments").await.len(),
            4,
            "{mode:?}"
        );
    }
}

/// A child whose key is an `Int32` written for a parent whose `_id` is the `Int64` of the same
/// number names that parent, as the server's queries say: the push keeps it, and a check finds
/// the parent exact. Another number is still refused.
#[tokio::test(flavor = "multi_thread")]
async fn an_int32_key_names_the_int64_id_of_the_same_number() {
    use subset::raw;
    use subset::spec::{ParentSpec, SpecBuilder};
    use subset::WriteMode;

    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = common::replica_db().await;
        let spec = SpecBuilder::new("episodes", "key_episodes", "show_id")
            .keep(2)
            .sort("n desc")
            .count("num_episodes")
            .build()
            .unwrap();
        let store = raw::Store::with_options(
            &db,
            ParentSpec::leak("key_shows", vec![*spec]),
            subset::StoreOptions::new().mode(mode),
        );
        let show = Bson::Int64(7);
        store
            .insert(doc! { "_id": show.clone(), "episodes": [], "num_episodes": 0_i64 })
            .await
            .unwrap();
        let episodes = store.children(spec);
        let children: Vec<Document> = (1..=3)
            .map(|n| doc! { "_id": ObjectId::new(), "show_id": 7_i32, "n": n })
            .collect();
        episodes.push(&show, children).await.unwrap();
        assert_eq!(episodes.count(&show).await.unwrap(), 3, "{mode:?}");
        let drift = episodes.check(&show).await.unwrap();
        assert!(drift.is_clean(), "{mode:?}: {drift:?}");

        let other = doc! { "_id": ObjectId::new(), "show_id": 8_i32, "n": 4 };
        let err = episodes.push(&show, vec![other]).await.unwrap_err();
        assert!(
            matches!(&err, Error::ParentKeyMismatch { found, .. } if **found == Bson::Int32(8)),
            "{mode:?}: {err:?}"
        );
    }
}
