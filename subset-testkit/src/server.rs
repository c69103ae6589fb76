//! [`MongoServer`]: a server for tests, one this process started or the one at `MONGODB_URI`,
//! and the [`Topology`] it has.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mongodb::bson::doc;
use tokio::sync::OnceCell;
use tracing::Instrument;

use crate::auth::{self, User};
use crate::error::TestkitError;
use crate::lookup::MongodLookup;
use crate::mongod::Node;

/// The name of the replica set of a started [`Topology::ReplicaSet`] server.
const REPLICA_SET_NAME: &str = "subset_rs";

/// The kind of deployment a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Topology {
    /// A single-node replica set: supports transactions and change streams. With `MONGODB_URI`,
    /// any replica set or sharded cluster.
    #[default]
    ReplicaSet,
    /// A standalone server: no transactions. With `MONGODB_URI`, a replica set also satisfies it.
    Standalone,
}

/// A MongoDB server for tests: one this process started, or the one at `MONGODB_URI`.
///
/// It holds no driver objects; [`client`](Self::client) and [`database`](Self::database) create
/// new ones on the caller's runtime.
#[derive(Debug)]
pub struct MongoServer {
    uri: String,
    topology: Topology,
    /// Whether clients must authenticate ([`shared_with_auth`](Self::shared_with_auth)); `uri`
    /// then holds the administrator's credentials.
    auth: bool,
    /// `None` when the server is external (`MONGODB_URI`).
    node: Option<Node>,
}

type SharedSlot = OnceCell<Result<MongoServer, Arc<TestkitError>>>;

static SHARED_REPLICA_SET: SharedSlot = OnceCell::const_new();
static SHARED_STANDALONE: SharedSlot = OnceCell::const_new();
static SHARED_AUTH_REPLICA_SET: SharedSlot = OnceCell::const_new();
static SHARED_AUTH_STANDALONE: SharedSlot = OnceCell::const_new();

impl MongoServer {
    /// Starts a private server of the given topology (or connects to `MONGODB_URI`), ready for
    /// writes. It is stopped and its data removed when dropped.
    ///
    /// # Errors
    ///
    /// No `mongod` can be found or downloaded, it fails to start or to become a writable primary
    /// within 60 seconds, or `MONGODB_URI` is unreachable or not of the needed topology. The
    /// error says what to do.
    pub async fn start(topology: Topology) -> Result<MongoServer, TestkitError> {
        let span = tracing::info_span!("testkit.start", ?topology);
        async {
            if let Some(uri) = external_uri() {
                return Self::external(uri, topology).await;
            }
            Self::start_private(topology, &MongodLookup::from_env(), false).await
        }
        .instrument(span)
        .await
    }

    /// Starts a private server of the given topology with the `mongod` that `lookup` finds (or
    /// downloads), whatever `MONGODB_URI` says: e.g. to try a given server version. It is
    /// stopped and its data removed when dropped.
    ///
    /// # Errors
    ///
    /// As for [`start`](Self::start), and as for [`MongodLookup::locate`].
    pub async fn start_with(
        topology: Topology,
        lookup: &MongodLookup,
    ) -> Result<MongoServer, TestkitError> {
        let span = tracing::info_span!("testkit.start", ?topology);
        Self::start_private(topology, lookup, false)
            .instrument(span)
            .await
    }

    async fn start_private(
        topology: Topology,
        lookup: &MongodLookup,
        auth: bool,
    ) -> Result<MongoServer, TestkitError> {
        let binary = lookup.locate().await?;
        let repl_set = match topology {
            Topology::ReplicaSet => Some(REPLICA_SET_NAME.to_owned()),
            Topology::Standalone => None,
        };
        let node = Node::start(binary, repl_set, auth).await?;
        let port = node.port();
        let (credentials, auth_source) = if auth {
            auth::create_admin(port).await?;
            (
                format!("{}:{}@", auth::ADMIN, auth::PASSWORD),
                "authSource=admin",
            )
        } else {
            (String::new(), "")
        };
        let options = match (topology, auth) {
            (Topology::ReplicaSet, false) => format!("?replicaSet={REPLICA_SET_NAME}"),
            (Topology::ReplicaSet, true) => format!("?replicaSet={REPLICA_SET_NAME}&{auth_source}"),
            (Topology::Standalone, false) => String::new(),
            (Topology::Standalone, true) => format!("?{auth_source}"),
        };
        Ok(MongoServer {
            uri: format!("mongodb://{credentials}127.0.0.1:{port}/{options}"),
            topology,
            auth,
            node: Some(node),
        })
    }

    /// The server of this topology shared by the whole process, started by the first caller.
    ///
    /// # Errors
    ///
    /// As for [`start`](Self::start). A failure is remembered: later callers get
    /// [`TestkitError::Shared`] with the same cause rather than a second attempt.
    pub async fn shared(topology: Topology) -> Result<&'static MongoServer, TestkitError> {
        let slot = match topology {
            Topology::ReplicaSet => &SHARED_REPLICA_SET,
            Topology::Standalone => &SHARED_STANDALONE,
        };
        slot.get_or_init(|| async { Self::start(topology).await.map_err(Arc::new) })
            .await
            .as_ref()
            .map_err(|cause| TestkitError::Shared(Arc::clone(cause)))
    }

    /// The server of this topology with authentication on, shared by the whole process and
    /// started by the first caller; another server than [`shared`](Self::shared)'s.
    ///
    /// Clients must authenticate: [`uri`](Self::uri), [`client`](Self::client) and
    /// [`database`](Self::database) are the administrator's (the built-in `root` role), to
    /// prepare data; [`database_as`](Self::database_as) connects to a database as a [`User`]
    /// holding one role on it. A replica set's members authenticate to each other with a key
    /// file in the data directory.
    ///
    /// ```no_run
    /// use subset_testkit::{MongoServer, Topology, User};
    ///
    /// # async fn demo() -> Result<(), subset_testkit::TestkitError> {
    /// let server = MongoServer::shared_with_auth(Topology::ReplicaSet).await?;
    /// let admin = server.database().await?;
    /// // … write test data through `admin` …
    /// let read_only = server.database_as(admin.name(), User::Read).await?;
    /// # let _ = read_only;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`TestkitError::External`] when `MONGODB_URI` is set: the users and roles need a server
    /// of this process's own. Otherwise as for [`start`](Self::start), and
    /// [`TestkitError::Mongo`] when the administrator cannot be created. A failure is
    /// remembered as for [`shared`](Self::shared).
    pub async fn shared_with_auth(
        topology: Topology,
    ) -> Result<&'static MongoServer, TestkitError> {
        if external_uri().is_some() {
            return Err(TestkitError::External {
                action: "turn on authentication on",
            });
        }
        let slot = match topology {
            Topology::ReplicaSet => &SHARED_AUTH_REPLICA_SET,
            Topology::Standalone => &SHARED_AUTH_STANDALONE,
        };
        slot.get_or_init(|| async {
            let span = tracing::info_span!("testkit.start", ?topology, auth = true);
            Self::start_private(topology, &MongodLookup::from_env(), true)
                .instrument(span)
                .await
                .map_err(Arc::new)
        })
        .await
        .as_ref()
        .map_err(|cause| TestkitError::Shared(Arc::clone(cause)))
    }

    async fn external(uri: String, wanted: Topology) -> Result<MongoServer, TestkitError> {
        let client = mongodb::Client::with_uri_str(&uri)
            .await
            .map_err(|e| TestkitError::mongo("parsing MONGODB_URI", e))?;
        let hello = client
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| TestkitError::mongo("`hello` to the server at MONGODB_URI", e))?;
        let transactional = hello.contains_key("setName")
            || hello.get_str("msg").is_ok_and(|msg| msg == "isdbgrid");
        let topology = if transactional {
            Topology::ReplicaSet
        } else {
            Topology::Standalone
        };
        if wanted == Topology::ReplicaSet && topology == Topology::Standalone {
            return Err(TestkitError::NotAReplicaSet);
        }
        tracing::info!(?topology, "using the server at MONGODB_URI");
        Ok(MongoServer {
            uri,
            topology,
            auth: false,
            node: None,
        })
    }

    /// The connection string, naming the replica set when there is one.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The topology of the server; with `MONGODB_URI`, what the server actually is.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// Whether the server is the one at `MONGODB_URI` rather than one this process started.
    pub fn is_external(&self) -> bool {
        self.node.is_none()
    }

    /// The port on `127.0.0.1` of a started server; `None` for `MONGODB_URI`.
    pub fn port(&self) -> Option<u16> {
        self.node.as_ref().map(Node::port)
    }

    /// The process id of a started server's `mongod` while it runs; `None` for `MONGODB_URI`
    /// and after [`stop`](Self::stop) or [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.node.as_ref().and_then(Node::pid)
    }

    /// The data directory of a started server (removed with the server); `None` for `MONGODB_URI`.
    pub fn data_dir(&self) -> Option<&Path> {
        self.node.as_ref().map(Node::data_dir)
    }

    /// The log file of a started server, inside [`data_dir`](Self::data_dir).
    pub fn log_path(&self) -> Option<PathBuf> {
        self.node.as_ref().map(Node::log_path)
    }

    /// A new client of this server, bound to the caller's runtime.
    ///
    /// # Errors
    ///
    /// The driver rejects the URI (only possible for `MONGODB_URI`).
    pub async fn client(&self) -> Result<mongodb::Client, TestkitError> {
        connect(&self.uri).await
    }

    /// A new client and a database name no other caller in this process gets,
    /// `subset_test_<pid>_<n>`. The database is not dropped afterwards: on a started server it
    /// goes with the data directory; on `MONGODB_URI` it stays.
    ///
    /// # Errors
    ///
    /// As for [`client`](Self::client).
    pub async fn database(&self) -> Result<mongodb::Database, TestkitError> {
        Ok(self.client().await?.database(&unique_database_name()))
    }

    /// The database `database` on a new client authenticated as `user`, a user of that
    /// database alone holding [its role](User::role) there, created on first use. Prepare the
    /// data with [`database`](Self::database) (the administrator) and hand its name here.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NoAuth`] when the server was not started with authentication
    /// ([`shared_with_auth`](Self::shared_with_auth)); [`TestkitError::Mongo`] when the user or
    /// its role cannot be created.
    pub async fn database_as(
        &self,
        database: &str,
        user: User,
    ) -> Result<mongodb::Database, TestkitError> {
        let options = self.client_options_as(database, user).await?;
        let client = mongodb::Client::with_options(options)
            .map_err(|e| TestkitError::mongo("creating a client", e))?;
        Ok(client.database(database))
    }

    /// The options of a client authenticated as `user` of `database`, as
    /// [`database_as`](Self::database_as) connects with: e.g. to watch the commands the
    /// client starts (`command_event_handler`) before creating it.
    ///
    /// # Errors
    ///
    /// As for [`database_as`](Self::database_as).
    pub async fn client_options_as(
        &self,
        database: &str,
        user: User,
    ) -> Result<mongodb::options::ClientOptions, TestkitError> {
        if !self.auth {
            return Err(TestkitError::NoAuth);
        }
        let options = mongodb::options::ClientOptions::parse(&self.uri)
            .await
            .map_err(|e| TestkitError::mongo("parsing the server's URI", e))?;
        auth::options_as(&self.client().await?, options, database, user).await
    }

    /// Kills the server at once (SIGKILL), as a crash would, keeping its data directory and port
    /// for [`restart`](Self::restart).
    ///
    /// # Errors
    ///
    /// [`TestkitError::External`] for the server at `MONGODB_URI`.
    pub fn kill(&mut self) -> Result<(), TestkitError> {
        self.node_mut("kill")?.kill();
        Ok(())
    }

    /// Stops the server cleanly (SIGTERM, then SIGKILL after 10 seconds), keeping its data
    /// directory and port for [`restart`](Self::restart): e.g. to change what the process
    /// will run under before it starts again.
    ///
    /// # Errors
    ///
    /// [`TestkitError::External`] for the server at `MONGODB_URI`.
    pub fn stop(&mut self) -> Result<(), TestkitError> {
        self.node_mut("stop")?.stop();
        Ok(())
    }

    /// Stops the server if it runs (SIGTERM) and starts it again on the same port and data,
    /// waiting until it is ready as [`start`](Self::start) does.
    ///
    /// # Errors
    ///
    /// [`TestkitError::External`] for `MONGODB_URI`; otherwise as for [`start`](Self::start).
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.node_mut("restart")?.restart().await
    }

    fn node_mut(&mut self, action: &'static str) -> Result<&mut Node, TestkitError> {
        self.node.as_mut().ok_or(TestkitError::External { action })
    }
}

/// `MONGODB_URI` if set and not empty.
fn external_uri() -> Option<String> {
    std::env::var("MONGODB_URI")
        .ok()
        .filter(|uri| !uri.trim().is_empty())
}

/// A new client of `uri`, bound to the caller's runtime.
pub(crate) async fn connect(uri: &str) -> Result<mongodb::Client, TestkitError> {
    mongodb::Client::with_uri_str(uri)
        .await
        .map_err(|e| TestkitError::mongo("creating a client", e))
}

/// `subset_test_<pid>_<n>`: a database name no other caller in this process gets.
pub(crate) fn unique_database_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "subset_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
