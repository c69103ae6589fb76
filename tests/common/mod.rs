//! Models and helpers shared by the behaviour tests.
#![allow(dead_code)]

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Parent, Store, Subset, SubsetField, WriteMode};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
pub struct Review {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub author: String,
    pub rating: i32,
    pub date: DateTime,
}

impl Review {
    pub fn at(millis: i64) -> Review {
        Review {
            id: ObjectId::new(),
            author: format!("author {millis}"),
            rating: (millis % 5) as i32 + 1,
            date: DateTime::from_millis(millis),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "products")]
pub struct Product {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

impl Product {
    pub fn named(name: &str) -> Product {
        Product {
            id: ObjectId::new(),
            name: name.to_owned(),
            recent_reviews: Vec::new(),
            total_reviews: 0,
        }
    }
}

/// A fresh database on the shared single-node replica set.
pub async fn replica_db() -> mongodb::Database {
    MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod")
        .database()
        .await
        .expect("connect to the test mongod")
}

/// A fresh database on the shared standalone server.
pub async fn standalone_db() -> mongodb::Database {
    MongoServer::shared(Topology::Standalone)
        .await
        .expect("start the test mongod")
        .database()
        .await
        .expect("connect to the test mongod")
}

/// Both write paths on the replica set: transactions (detected) and ordered writes (forced).
pub async fn stores<P: Parent>() -> Vec<Store<P>> {
    vec![
        Store::new(&replica_db().await),
        Store::new(&replica_db().await).with_mode(WriteMode::Ordered),
    ]
}

/// The ids of the embedded subset, in stored order, read raw from the parent document.
pub async fn embedded_ids<P: Parent>(store: &Store<P>, field: &str, id: &Bson) -> Vec<Bson> {
    let parent = store
        .database()
        .collection::<Document>(P::COLLECTION)
        .find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .expect("parent exists");
    parent
        .get_array(field)
        .unwrap()
        .iter()
        .map(|c| c.as_document().unwrap().get("_id").unwrap().clone())
        .collect()
}

/// The ids of every child of `parent` in the child collection, in the subset's order, as the
/// server sorts them.
pub async fn collection_ids<P: Parent, C: Child>(
    handle: &Subset<'_, P, C>,
    store: &Store<P>,
    id: &Bson,
) -> Vec<Bson> {
    let spec = handle.spec();
    let sort: Document = spec
        .order()
        .map(|k| (k.field.to_owned(), Bson::Int32(k.direction.as_i32())))
        .collect();
    store
        .database()
        .collection::<Document>(spec.child_collection)
        .find(doc! { spec.key: id.clone() })
        .sort(sort)
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.get("_id").unwrap().clone())
        .collect()
}

/// The invariant of the pattern: the embedded subset is exactly the first `keep` of the child
/// collection in order, and the count (if kept) equals the collection's count.
pub async fn assert_subset_true<P: Parent, C: Child>(
    store: &Store<P>,
    field: SubsetField<P, C>,
    id: &Bson,
) {
    let handle = store.subset(field);
    let spec = handle.spec();
    let all = collection_ids(&handle, store, id).await;
    let embedded = embedded_ids(store, spec.field, id).await;
    let keep = spec.keep as usize;
    assert_eq!(
        embedded,
        all[..all.len().min(keep)],
        "embedded subset of {id}"
    );
    if let Some(count) = spec.count {
        let parent = store
            .database()
            .collection::<Document>(P::COLLECTION)
            .find_one(doc! { "_id": id.clone() })
            .await
            .unwrap()
            .unwrap();
        let n = match parent.get(count) {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            other => panic!("count field {count} is {other:?}"),
        };
        assert_eq!(n, all.len() as i64, "count of {id}");
    }
}
