//! The concerns the library sends, seen with command monitoring: its transactions read a
//! snapshot and commit with `w: majority` (or the store's own concern) whatever the client and
//! database carry, a caller's transaction keeps the caller's, and a store's read concern goes on
//! every read outside a transaction.

use crate::common;

use std::sync::{Arc, Mutex};

use bson::Document;
use common::{Product, Review};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::{Acknowledgment, ClientOptions, DatabaseOptions, ReadConcern, WriteConcern};
use subset::bson;
use subset::testkit::{MongoServer, Topology};
use subset::{PageRequest, Store};

type Log = Arc<Mutex<Vec<(String, Document)>>>;

/// A database handle carrying `w: 1` on a client that records every command it sends.
async fn monitored() -> (mongodb::Database, Log) {
    let server = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod");
    let name = server.database().await.unwrap().name().to_owned();
    let log: Log = Arc::default();
    let sink = log.clone();
    let mut options = ClientOptions::parse(server.uri()).await.unwrap();
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            let command = subset::bson_compat::to_document(&started.command).unwrap();
            sink.lock().unwrap().push((started.command_name, command));
        }
    }));
    let client = mongodb::Client::with_options(options).unwrap();
    let w1 = WriteConcern::builder().w(Acknowledgment::Nodes(1)).build();
    let db =
        client.database_with_options(&name, DatabaseOptions::builder().write_concern(w1).build());
    (db, log)
}

/// The recorded commands named `name`, taken out of the log.
fn taken(log: &Log, name: &str) -> Vec<Document> {
    let mut log = log.lock().unwrap();
    let found = log
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, c)| c.clone())
        .collect();
    log.clear();
    found
}

/// The recorded command that started a transaction (its first command).
fn started_transaction(log: &Log) -> Option<Document> {
    let log = log.lock().unwrap();
    log.iter()
        .find(|(_, c)| matches!(c.get_bool("startTransaction"), Ok(true)))
        .map(|(_, c)| c.clone())
}

fn level(command: &Document) -> Option<&str> {
    command
        .get_document("readConcern")
        .ok()?
        .get_str("level")
        .ok()
}

fn w(command: &Document) -> Option<String> {
    command
        .get_document("writeConcern")
        .ok()?
        .get("w")
        .map(|w| w.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_librarys_transactions_set_their_own_concerns() {
    let (db, log) = monitored().await;
    let store = Store::<Product>::new(&db);
    let product = Product::named("concerns");
    store.insert(&product).await.unwrap();
    log.lock().unwrap().clear();
    store
        .children(Product::RECENT_REVIEWS)
        .push(&product.id, &Review::at(1))
        .await
        .unwrap();
    // The transaction's first command starts it with a snapshot read concern.
    let first = started_transaction(&log).expect("a transaction");
    assert_eq!(level(&first), Some("snapshot"), "{first}");
    let commit = taken(&log, "commitTransaction");
    assert_eq!(commit.len(), 1);
    assert_eq!(
        w(&commit[0]).as_deref(),
        Some("\"majority\""),
        "the database's w: 1 is not used: {}",
        commit[0]
    );

    // A store given its own concern commits with it.
    let options = subset::StoreOptions::new()
        .write_concern(WriteConcern::builder().w(Acknowledgment::Nodes(1)).build());
    let store = Store::<Product>::with_options(&db, options);
    store
        .children(Product::RECENT_REVIEWS)
        .push(&product.id, &Review::at(2))
        .await
        .unwrap();
    let commit = taken(&log, "commitTransaction");
    assert_eq!(w(&commit[0]).as_deref(), Some("1"), "{}", commit[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callers_transaction_keeps_the_callers_concerns() {
    let (db, log) = monitored().await;
    let store = Store::<Product>::new(&db);
    let product = Product::named("caller");
    store.insert(&product).await.unwrap();
    let mut session = db.client().start_session().await.unwrap();
    session
        .start_transaction()
        .read_concern(ReadConcern::local())
        .await
        .unwrap();
    log.lock().unwrap().clear();
    store
        .children(Product::RECENT_REVIEWS)
        .push(&product.id, &Review::at(1))
        .session(&mut session)
        .await
        .unwrap();
    session.commit_transaction().await.unwrap();
    let first = started_transaction(&log).expect("the caller's transaction");
    assert_eq!(level(&first), Some("local"), "{first}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stores_read_concern_goes_on_every_read_outside_a_transaction() {
    let (db, log) = monitored().await;
    let product = Product::named("reads");
    Store::<Product>::new(&db).insert(&product).await.unwrap();
    for (store, expected) in [
        (Store::<Product>::new(&db), None),
        (
            Store::<Product>::with_options(
                &db,
                subset::StoreOptions::new().read_concern(ReadConcern::majority()),
            ),
            Some("majority"),
        ),
    ] {
        let reviews = store.children(Product::RECENT_REVIEWS);
        log.lock().unwrap().clear();
        store.get(&product.id).await.unwrap();
        reviews
            .page(&product.id, &PageRequest::last(3))
            .await
            .unwrap();
        reviews.count(&product.id).await.unwrap();
        let commands = log.lock().unwrap().clone();
        let reads: Vec<&(String, Document)> = commands
            .iter()
            .filter(|(n, _)| matches!(n.as_str(), "find" | "aggregate"))
            .collect();
        assert!(reads.len() >= 3, "{reads:?}");
        for (name, command) in reads {
            assert_eq!(level(command), expected, "{name}: {command}");
        }
        // Writes in the store's transactions read their snapshot, not the store's read concern.
        log.lock().unwrap().clear();
        reviews
            .push(&product.id, &Review::at(1))
            .await
            .expect("a push from a store with a read concern");
        let first = started_transaction(&log).expect("a transaction");
        assert_eq!(level(&first), Some("snapshot"), "{first}");
    }
}
