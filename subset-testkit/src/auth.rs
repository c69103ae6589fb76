//! The users of a server started with authentication
//! ([`MongoServer::shared_with_auth`](crate::MongoServer::shared_with_auth)): an administrator,
//! and a [`User`] of each kind on each database a test asks for.

use mongodb::bson::{doc, Document};
use mongodb::error::ErrorKind;
use mongodb::options::{ClientOptions, Credential};

use crate::error::TestkitError;

/// The administrator, with the built-in `root` role, in the `admin` database.
pub(crate) const ADMIN: &str = "subset_admin";

/// Every user's password. The server listens on loopback and lives for one test run.
pub(crate) const PASSWORD: &str = "subset-testkit";

/// The server's code for a user that exists already (`createUser` again).
const USER_EXISTS: i32 = 51003;

/// The server's code for a role that exists already (`createRole` again).
const ROLE_EXISTS: i32 = 51002;

/// The custom role of [`User::ReadWriteNoChangeStream`], defined in each database it is on.
const NO_CHANGE_STREAM_ROLE: &str = "readWriteNoChangeStream";

/// The actions of the built-in `readWrite` role on a database's collections, but
/// `changeStream`.
const READ_WRITE_BUT_CHANGE_STREAM: [&str; 16] = [
    "collStats",
    "convertToCapped",
    "createCollection",
    "createIndex",
    "dbHash",
    "dbStats",
    "dropCollection",
    "dropIndex",
    "find",
    "insert",
    "killCursors",
    "listCollections",
    "listIndexes",
    "planCacheRead",
    "remove",
    "update",
];

/// A user of one database on a server with authentication, named for what it may do there:
/// see [`MongoServer::database_as`](crate::MongoServer::database_as).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum User {
    /// The built-in `read` role on the database: queries, counts, aggregations, change
    /// streams, listing collections and indexes; no write of any kind.
    Read,
    /// The built-in `readWrite` role on the database: `read`'s actions and inserts, updates,
    /// removes, creating and dropping collections and indexes.
    ReadWrite,
    /// A custom role, `readWriteNoChangeStream`: the actions `readWrite` has on the
    /// database's collections but `changeStream`, so that watching a collection is refused.
    ReadWriteNoChangeStream,
}

impl User {
    /// The user's name, in the database it is a user of.
    pub fn name(self) -> &'static str {
        match self {
            User::Read => "read",
            User::ReadWrite => "readWrite",
            User::ReadWriteNoChangeStream => "readWriteNoChangeStream",
        }
    }

    /// The role the user holds on its database.
    pub fn role(self) -> &'static str {
        match self {
            User::Read => "read",
            User::ReadWrite => "readWrite",
            User::ReadWriteNoChangeStream => NO_CHANGE_STREAM_ROLE,
        }
    }
}

/// Creates the administrator on the new server at `port` through the localhost exception (a
/// server with authentication and no user yet lets a client on localhost create the first one).
pub(crate) async fn create_admin(port: u16) -> Result<(), TestkitError> {
    let uri = format!("mongodb://127.0.0.1:{port}/?directConnection=true");
    let client = mongodb::Client::with_uri_str(&uri)
        .await
        .map_err(|e| TestkitError::mongo("connecting to the new mongod", e))?;
    client
        .database("admin")
        .run_command(doc! {
            "createUser": ADMIN,
            "pwd": PASSWORD,
            "roles": [{ "role": "root", "db": "admin" }],
        })
        .await
        .map_err(|e| TestkitError::mongo("`createUser` of the administrator", e))?;
    tracing::debug!(port, "administrator created");
    Ok(())
}

/// `options` (the administrator's) with the credential of `user` of `database` instead,
/// creating the user (and its role) first through `admin` if it does not exist yet.
pub(crate) async fn options_as(
    admin: &mongodb::Client,
    mut options: ClientOptions,
    database: &str,
    user: User,
) -> Result<ClientOptions, TestkitError> {
    let db = admin.database(database);
    if user == User::ReadWriteNoChangeStream {
        let actions: Vec<&str> = READ_WRITE_BUT_CHANGE_STREAM.to_vec();
        let role = doc! {
            "createRole": NO_CHANGE_STREAM_ROLE,
            "privileges": [{ "resource": { "db": database, "collection": "" }, "actions": actions }],
            "roles": [],
        };
        run_unless(&db, role, ROLE_EXISTS, "`createRole`").await?;
    }
    let create = doc! {
        "createUser": user.name(),
        "pwd": PASSWORD,
        "roles": [{ "role": user.role(), "db": database }],
    };
    run_unless(&db, create, USER_EXISTS, "`createUser`").await?;
    options.credential = Some(
        Credential::builder()
            .username(user.name().to_owned())
            .password(PASSWORD.to_owned())
            .source(database.to_owned())
            .build(),
    );
    Ok(options)
}

/// Runs `command` on `db`; a refusal with the code `exists` (it was done before) is success.
async fn run_unless(
    db: &mongodb::Database,
    command: Document,
    exists: i32,
    action: &'static str,
) -> Result<(), TestkitError> {
    match db.run_command(command).await {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind.as_ref(), ErrorKind::Command(c) if c.code == exists) => Ok(()),
        Err(e) => Err(TestkitError::mongo(action, e)),
    }
}
