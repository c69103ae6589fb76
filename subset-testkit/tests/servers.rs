//! The test servers: topologies, per-test databases, cleanup, kill and restart.

use std::net::TcpStream;
use std::time::Instant;

use mongodb::bson::{doc, Document};
use subset_testkit::{skip, MongoServer, TestkitError, Topology, User};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn hello(server: &MongoServer) -> Result<Document, Box<dyn std::error::Error>> {
    let client = server.client().await?;
    Ok(client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await?)
}

fn refuses_connections(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

/// The server's code of a refusal, if the error is one.
fn server_code(error: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

/// The server's code for a command the user has no privilege for.
const UNAUTHORIZED: i32 = 13;

#[tokio::test]
async fn the_shared_replica_set_names_its_set_and_commits_transactions() -> TestResult {
    let started = Instant::now();
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    eprintln!(
        "waited {:.2?} for the shared replica set",
        started.elapsed()
    );
    assert_eq!(server.topology(), Topology::ReplicaSet);

    let hello = hello(server).await?;
    let set_name = hello.get_str("setName")?;
    assert!(hello.get_bool("isWritablePrimary")?);
    if !server.is_external() {
        assert!(
            server.uri().contains(&format!("replicaSet={set_name}")),
            "{}",
            server.uri()
        );
    }

    let db = server.database().await?;
    let items = db.collection::<Document>("items");
    items.insert_one(doc! { "_id": 0 }).await?;
    let client = db.client();
    let mut session = client.start_session().await?;
    session.start_transaction().await?;
    items
        .insert_one(doc! { "_id": 1 })
        .session(&mut session)
        .await?;
    items
        .insert_one(doc! { "_id": 2 })
        .session(&mut session)
        .await?;
    session.commit_transaction().await?;
    assert_eq!(items.count_documents(doc! {}).await?, 3);
    Ok(())
}

#[tokio::test]
async fn a_standalone_has_no_set_name() -> TestResult {
    let started = Instant::now();
    let server = MongoServer::shared(Topology::Standalone).await?;
    eprintln!("waited {:.2?} for the shared standalone", started.elapsed());
    if server.is_external() && server.topology() == Topology::ReplicaSet {
        skip("MONGODB_URI is a replica set: there is no standalone to check");
        return Ok(());
    }
    assert_eq!(server.topology(), Topology::Standalone);
    assert!(!server.uri().contains("replicaSet"), "{}", server.uri());
    let hello = hello(server).await?;
    assert!(!hello.contains_key("setName"), "{hello}");
    assert!(hello.get_bool("isWritablePrimary")?);
    Ok(())
}

#[tokio::test]
async fn each_caller_gets_its_own_database() -> TestResult {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let (first, second) = (server.database().await?, server.database().await?);
    assert_ne!(first.name(), second.name());
    assert!(first
        .name()
        .starts_with(&format!("subset_test_{}_", std::process::id())));

    first
        .collection::<Document>("c")
        .insert_one(doc! { "x": 1 })
        .await?;
    assert_eq!(
        first
            .collection::<Document>("c")
            .count_documents(doc! {})
            .await?,
        1
    );
    assert_eq!(
        second
            .collection::<Document>("c")
            .count_documents(doc! {})
            .await?,
        0
    );
    Ok(())
}

#[tokio::test]
async fn dropping_a_private_server_stops_it_and_removes_its_data() -> TestResult {
    if std::env::var_os("MONGODB_URI").is_some_and(|uri| !uri.is_empty()) {
        skip("MONGODB_URI is set: this test stops and kills a mongod of its own");
        return Ok(());
    }
    let started = Instant::now();
    let server = MongoServer::start(Topology::Standalone).await?;
    eprintln!("private standalone ready after {:.2?}", started.elapsed());
    let port = server.port().ok_or("a started server has a port")?;
    let data = server
        .data_dir()
        .ok_or("a started server has a data directory")?
        .to_owned();
    assert!(server
        .log_path()
        .is_some_and(|log| log.starts_with(&data) && log.is_file()));
    server
        .database()
        .await?
        .collection::<Document>("c")
        .insert_one(doc! {})
        .await?;
    assert!(!refuses_connections(port));

    drop(server);
    assert!(refuses_connections(port), "port {port} still answers");
    assert!(!data.exists(), "{} still exists", data.display());
    Ok(())
}

#[tokio::test]
async fn a_killed_replica_set_restarts_with_its_data() -> TestResult {
    if std::env::var_os("MONGODB_URI").is_some_and(|uri| !uri.is_empty()) {
        skip("MONGODB_URI is set: this test stops and kills a mongod of its own");
        return Ok(());
    }
    let mut server = MongoServer::start(Topology::ReplicaSet).await?;
    let port = server.port().ok_or("a started server has a port")?;
    {
        let db = server.database().await?;
        let majority = mongodb::options::WriteConcern::majority();
        db.collection::<Document>("c")
            .insert_one(doc! { "_id": "kept" })
            .write_concern(majority)
            .await?;
        server.kill()?;
        assert!(refuses_connections(port));

        let restarted = Instant::now();
        server.restart().await?;
        eprintln!(
            "killed replica set restarted after {:.2?}",
            restarted.elapsed()
        );
        let again = server.client().await?.database(db.name());
        let kept = again
            .collection::<Document>("c")
            .find_one(doc! { "_id": "kept" })
            .await?;
        assert!(kept.is_some(), "a majority write survives a crash");
    }
    Ok(())
}

#[tokio::test]
async fn a_stopped_server_restarts_as_a_new_process_with_its_data() -> TestResult {
    if std::env::var_os("MONGODB_URI").is_some_and(|uri| !uri.is_empty()) {
        skip("MONGODB_URI is set: this test stops a mongod of its own");
        return Ok(());
    }
    let mut server = MongoServer::start(Topology::Standalone).await?;
    let port = server.port().ok_or("a started server has a port")?;
    let first = server.pid().ok_or("a running server has a pid")?;
    let db = server.database().await?;
    db.collection::<Document>("c")
        .insert_one(doc! { "_id": "kept" })
        .await?;
    server.stop()?;
    assert!(refuses_connections(port));
    assert_eq!(server.pid(), None);

    server.restart().await?;
    let second = server.pid().ok_or("a restarted server has a pid")?;
    assert_ne!(first, second);
    let again = server.client().await?.database(db.name());
    let kept = again
        .collection::<Document>("c")
        .find_one(doc! { "_id": "kept" })
        .await?;
    assert!(kept.is_some(), "a clean stop keeps the data");
    Ok(())
}

#[tokio::test]
async fn the_authenticated_replica_set_has_users_of_one_role_each() -> TestResult {
    let server = match MongoServer::shared_with_auth(Topology::ReplicaSet).await {
        Err(TestkitError::External { .. }) => {
            skip("MONGODB_URI is set: users and roles need a server of this process's own");
            return Ok(());
        }
        started => started?,
    };
    assert_ne!(
        server.uri(),
        MongoServer::shared(Topology::ReplicaSet).await?.uri(),
        "a server of its own"
    );
    let admin = server.database().await?;
    let items = admin.collection::<Document>("items");
    items.insert_one(doc! { "_id": 1 }).await?;

    // Without credentials, nothing can be read.
    let port = server.port().ok_or("a started server has a port")?;
    let anonymous =
        mongodb::Client::with_uri_str(format!("mongodb://127.0.0.1:{port}/?replicaSet=subset_rs"))
            .await?
            .database(admin.name());
    let refused = anonymous
        .collection::<Document>("items")
        .find_one(doc! {})
        .await
        .unwrap_err();
    assert_eq!(server_code(&refused), Some(UNAUTHORIZED), "{refused}");

    let read = server.database_as(admin.name(), User::Read).await?;
    let read_items = read.collection::<Document>("items");
    assert_eq!(read_items.count_documents(doc! {}).await?, 1);
    read_items.watch().await?;
    let refused = read_items.insert_one(doc! { "_id": 2 }).await.unwrap_err();
    assert_eq!(server_code(&refused), Some(UNAUTHORIZED), "{refused}");

    // Asked again, the user exists already.
    let write = server.database_as(admin.name(), User::ReadWrite).await?;
    let write = server.database_as(write.name(), User::ReadWrite).await?;
    let write_items = write.collection::<Document>("items");
    write_items.insert_one(doc! { "_id": 2 }).await?;
    write_items.watch().await?;

    let no_stream = server
        .database_as(admin.name(), User::ReadWriteNoChangeStream)
        .await?;
    let no_stream_items = no_stream.collection::<Document>("items");
    no_stream_items.insert_one(doc! { "_id": 3 }).await?;
    no_stream_items.delete_one(doc! { "_id": 3 }).await?;
    let refused = no_stream_items.watch().await.unwrap_err();
    assert_eq!(server_code(&refused), Some(UNAUTHORIZED), "{refused}");

    // A user of one database is refused another.
    let other = read.client().database(server.database().await?.name());
    let refused = other
        .collection::<Document>("items")
        .find_one(doc! {})
        .await
        .unwrap_err();
    assert_eq!(server_code(&refused), Some(UNAUTHORIZED), "{refused}");

    // The unauthenticated servers have no users.
    let plain = MongoServer::shared(Topology::ReplicaSet).await?;
    let error = plain.database_as("any", User::Read).await.unwrap_err();
    assert!(matches!(error, TestkitError::NoAuth), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn the_authenticated_standalone_refuses_a_reader_s_writes() -> TestResult {
    let server = match MongoServer::shared_with_auth(Topology::Standalone).await {
        Err(TestkitError::External { .. }) => {
            skip("MONGODB_URI is set: users and roles need a server of this process's own");
            return Ok(());
        }
        started => started?,
    };
    let admin = server.database().await?;
    admin
        .collection::<Document>("items")
        .insert_one(doc! { "_id": 1 })
        .await?;
    let read = server.database_as(admin.name(), User::Read).await?;
    let items = read.collection::<Document>("items");
    assert_eq!(items.count_documents(doc! {}).await?, 1);
    let refused = items.delete_one(doc! { "_id": 1 }).await.unwrap_err();
    assert_eq!(server_code(&refused), Some(UNAUTHORIZED), "{refused}");
    Ok(())
}
