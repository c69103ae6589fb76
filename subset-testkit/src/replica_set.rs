//! A replica set of several `mongod` processes on loopback ports, for failover tests: find the
//! primary, step it down, kill a member and restart it, pause and resume it, and stop the others
//! from replicating its writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::{doc, Bson, Document};
use tracing::Instrument;

use crate::error::TestkitError;
use crate::mongod::Node;

/// How long a new set may take to elect its first primary. With the election timeout below a
/// three-member set needs about 5 s; the default timeout (10 s) would make it about 13 s.
const ELECTION_TIMEOUT_MILLIS: i32 = 2_000;

/// How long [`ReplicaSet::start`] waits for the first primary.
const FIRST_PRIMARY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one `hello` to one member may take before the member counts as unreachable.
const PROBE_TIMEOUT_MS: u32 = 1_000;

/// How long a command to one member about its fail points may take (a paused member never
/// answers).
const FAIL_POINT_TIMEOUT_MS: u32 = 5_000;

/// How long [`ReplicaSet::stop_replication`] waits for a member's oplog fetcher to reach the
/// fail point: it checks the fail point after each batch, and an idle fetcher's batch ends every
/// half election timeout.
const FAIL_POINT_HIT_TIMEOUT_MS: i64 = 10_000;

/// The server fail point that stops a member's oplog fetcher: set on the member that copies,
/// not on the one copied from.
const STOP_REPLICATION: &str = "stopReplProducer";

/// The most members a replica set may have that vote.
const MAX_VOTING_MEMBERS: usize = 7;

/// A replica set of `mongod` processes this process started, each on its own free `127.0.0.1`
/// port with its own temporary data directory, stopped and removed when dropped.
///
/// Members are numbered from 0 in the order of the set's configuration. Unlike
/// [`MongoServer`](crate::MongoServer) it ignores `MONGODB_URI`: killing and restarting members
/// needs processes of our own.
///
/// The faults a test can apply stay on this machine (processes and loopback):
///
/// | fault | how | what the set does |
/// |---|---|---|
/// | [`step_down`](Self::step_down) | `replSetStepDown` | a caught-up secondary is elected; no write is lost |
/// | [`kill`](Self::kill), [`restart`](Self::restart) | SIGKILL, then the same port and data | a killed primary is replaced; restarted, it rolls back what only it had |
/// | [`pause`](Self::pause), [`resume`](Self::resume) | SIGSTOP, SIGCONT | paused past the [election timeout](Self::election_timeout), a primary is replaced; resumed, it believes it leads until it hears of the new term, then steps down and rolls back what only it had |
/// | [`stop_replication`](Self::stop_replication), [`start_replication`](Self::start_replication) | the `stopReplProducer` fail point on the other members | the others stop copying its writes: `w: 1` writes are on it alone, and a following election rolls them back; `w: "majority"` writes wait |
///
/// Every member runs with `enableTestCommands=1` (fail points, as on the single-node servers),
/// and the set with `settings.electionTimeoutMillis` of 2 s rather than the default 10 s, so that
/// a failover in a test takes seconds.
///
/// ```no_run
/// use std::time::Duration;
/// use subset_testkit::ReplicaSet;
///
/// # async fn demo() -> Result<(), subset_testkit::TestkitError> {
/// let mut set = ReplicaSet::start(3).await?;
/// let db = set.database().await?;
/// let primary = set.wait_for_primary(Duration::from_secs(30)).await?;
/// set.step_down(primary, 10).await?;
/// let primary = set.wait_for_primary(Duration::from_secs(30)).await?;
/// set.kill(primary);
/// set.restart(primary).await?;
///
/// // Writes acknowledged by the primary alone (`w: 1`), then a failover: they are rolled back.
/// let primary = set.wait_for_primary(Duration::from_secs(30)).await?;
/// set.stop_replication(primary).await?;
/// // … writes with `w: 1` …
/// set.pause(primary);
/// tokio::time::sleep(set.election_timeout() * 3).await;
/// set.start_replication(primary).await?;
/// set.resume(primary);
/// # let _ = db;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ReplicaSet {
    name: String,
    uri: String,
    members: Vec<Node>,
    /// Which members are stopped with SIGSTOP.
    paused: Vec<bool>,
}

impl ReplicaSet {
    /// Starts `members` mongod processes (1 to 7), initiates them as one replica set with an
    /// election timeout of 2 s (elections in a test should not take the default 10 s), and
    /// waits until a primary is elected.
    ///
    /// # Errors
    ///
    /// As for [`MongoServer::start`](crate::MongoServer::start): no `mongod`, a member fails to
    /// start, or no primary within 60 seconds; [`TestkitError::Members`] for a count out of
    /// range.
    pub async fn start(members: usize) -> Result<ReplicaSet, TestkitError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if !(1..=MAX_VOTING_MEMBERS).contains(&members) {
            return Err(TestkitError::Members { members });
        }
        let name = format!(
            "subset_rs{members}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let span = tracing::info_span!("testkit.replica_set", %name, members);
        async {
            let started = Instant::now();
            let binary = crate::MongodLookup::from_env().locate().await?;
            let nodes = futures::future::join_all(
                (0..members).map(|_| Node::start_member(binary.clone(), name.clone())),
            )
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
            let hosts: Vec<String> = nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port()))
                .collect();
            let uri = format!("mongodb://{}/?replicaSet={name}", hosts.join(","));
            let set = ReplicaSet {
                name: name.clone(),
                uri,
                paused: vec![false; nodes.len()],
                members: nodes,
            };
            let config = doc! {
                "_id": name.as_str(),
                "members": hosts
                    .iter()
                    .enumerate()
                    .map(|(i, host)| Bson::Document(doc! { "_id": i as i32, "host": host }))
                    .collect::<Vec<_>>(),
                "settings": { "electionTimeoutMillis": ELECTION_TIMEOUT_MILLIS },
            };
            set.admin(0, None)
                .await?
                .run_command(doc! { "replSetInitiate": config })
                .await
                .map_err(|e| TestkitError::mongo("`replSetInitiate`", e))?;
            let primary = set.wait_for_primary(FIRST_PRIMARY_TIMEOUT).await?;
            tracing::info!(
                primary,
                seconds = started.elapsed().as_secs_f64(),
                "replica set ready"
            );
            Ok(set)
        }
        .instrument(span)
        .await
    }

    /// The connection string: every member as a seed, and the set's name.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many members the set has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set has no members (never, for a started set).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The set's `settings.electionTimeoutMillis`: a primary that the others have not heard from
    /// for this long (a paused or killed one) is replaced by an election.
    pub fn election_timeout(&self) -> Duration {
        Duration::from_millis(ELECTION_TIMEOUT_MILLIS.unsigned_abs().into())
    }

    /// The port on `127.0.0.1` of member `member`.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub fn port(&self, member: usize) -> u16 {
        self.members[member].port()
    }

    /// The log file of member `member`.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub fn log_path(&self, member: usize) -> std::path::PathBuf {
        self.members[member].log_path()
    }

    /// A new client of the whole set, bound to the caller's runtime.
    ///
    /// # Errors
    ///
    /// The driver rejects the URI (it does not).
    pub async fn client(&self) -> Result<mongodb::Client, TestkitError> {
        crate::server::connect(&self.uri).await
    }

    /// A new client of the whole set and a database name no other caller in this process gets.
    ///
    /// # Errors
    ///
    /// As for [`client`](Self::client).
    pub async fn database(&self) -> Result<mongodb::Database, TestkitError> {
        Ok(self
            .client()
            .await?
            .database(&crate::server::unique_database_name()))
    }

    /// The `admin` database of one member through a direct connection (no server discovery).
    async fn admin(
        &self,
        member: usize,
        timeout_ms: Option<u32>,
    ) -> Result<mongodb::Database, TestkitError> {
        let mut uri = format!(
            "mongodb://127.0.0.1:{}/?directConnection=true",
            self.port(member)
        );
        if let Some(ms) = timeout_ms {
            uri.push_str(&format!(
                "&serverSelectionTimeoutMS={ms}&connectTimeoutMS={ms}"
            ));
        }
        let client = mongodb::Client::with_uri_str(&uri)
            .await
            .map_err(|e| TestkitError::mongo("connecting to a member", e))?;
        Ok(client.database("admin"))
    }

    /// Member `member`'s answer to `hello`, or `None` if it does not answer within a second (it
    /// is down, or busy shutting down).
    pub async fn hello(&self, member: usize) -> Option<Document> {
        // A member that is down refuses the connection at once; the driver would wait out its
        // server selection timeout instead.
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port(member)));
        std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
        let admin = self.admin(member, Some(PROBE_TIMEOUT_MS)).await.ok()?;
        let timeout = Duration::from_millis(u64::from(PROBE_TIMEOUT_MS));
        tokio::time::timeout(timeout, admin.run_command(doc! { "hello": 1 }))
            .await
            .ok()?
            .ok()
    }

    /// The member that is a writable primary now, asking every member. During an election two
    /// members may both still say so for a moment; the one elected last (highest `electionId`,
    /// which grows with the term) wins.
    pub async fn primary(&self) -> Option<usize> {
        let replies =
            futures::future::join_all((0..self.len()).map(|member| self.hello(member))).await;
        replies
            .into_iter()
            .enumerate()
            .filter_map(|(member, reply)| {
                let reply = reply?;
                if !reply.get_bool("isWritablePrimary").unwrap_or(false) {
                    return None;
                }
                let election = reply.get_object_id("electionId").ok().map(|id| id.bytes());
                Some((election, member))
            })
            .max()
            .map(|(_, member)| member)
    }

    /// Polls every member until one is a writable primary, and returns it.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Timeout`] when there is none after `timeout`.
    pub async fn wait_for_primary(&self, timeout: Duration) -> Result<usize, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(member) = self.primary().await {
                return Ok(member);
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::Timeout {
                    port: self.port(0),
                    waiting_for: "a primary in the replica set",
                    timeout,
                    log_tail: self.members[0].log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asks member `member` (the primary) to step down and not to stand for election again for
    /// `seconds` (at least 10, as the server requires for the catch-up period used here).
    ///
    /// # Errors
    ///
    /// [`TestkitError::Mongo`] when the member refuses, e.g. because it is not the primary.
    pub async fn step_down(&self, member: usize, seconds: u32) -> Result<(), TestkitError> {
        let admin = self.admin(member, None).await?;
        let command = doc! {
            "replSetStepDown": i64::from(seconds.max(10)),
            "secondaryCatchUpPeriodSecs": 5_i64,
        };
        match admin.run_command(command).await {
            Ok(_) => Ok(()),
            // Servers before 4.2 close every connection when they step down, this one included.
            Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Io(_)) => Ok(()),
            Err(e) => Err(TestkitError::mongo("`replSetStepDown`", e)),
        }
    }

    /// Kills member `member` at once (SIGKILL), keeping its port and data for
    /// [`restart`](Self::restart).
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub fn kill(&mut self, member: usize) {
        // SIGKILL ends a paused process as well.
        self.members[member].kill();
        self.paused[member] = false;
    }

    /// Pauses member `member` (SIGSTOP), as a long garbage collection or a frozen virtual
    /// machine would: it keeps its connections open but answers nothing, and commands sent to
    /// it wait. Paused longer than the [election timeout](Self::election_timeout) (allow twice
    /// that and a second, for the heartbeats and the vote), a primary is replaced by an election
    /// among the others; when [resumed](Self::resume) it still believes it leads, and says so to
    /// `hello`, until it hears of the new term, steps down, and rolls back the writes that only
    /// it had. Nothing happens to a member already paused.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len), is not running (killed), or cannot be
    /// signalled (no `kill` program).
    pub fn pause(&mut self, member: usize) {
        if !self.paused[member] {
            self.signal(member, "STOP");
            self.paused[member] = true;
        }
    }

    /// Resumes member `member` after [`pause`](Self::pause) (SIGCONT). Nothing happens to a
    /// member that is not paused.
    ///
    /// # Panics
    ///
    /// As for [`pause`](Self::pause).
    pub fn resume(&mut self, member: usize) {
        if self.paused[member] {
            self.signal(member, "CONT");
            self.paused[member] = false;
        }
    }

    /// Whether member `member` is paused.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub fn is_paused(&self, member: usize) -> bool {
        self.paused[member]
    }

    /// Sends `SIG<name>` to member `member`'s process.
    fn signal(&self, member: usize, name: &str) {
        let Some(pid) = self.members[member].pid() else {
            panic!("member {member} is not running: restart it before it is paused or resumed");
        };
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        match status {
            Ok(status) if status.success() => {
                tracing::debug!(member, pid, signal = name, "signalled a member");
            }
            Ok(status) => panic!("`kill -{name} {pid}` (member {member}) ended with {status}"),
            Err(e) => panic!("cannot run `kill -{name} {pid}` (member {member}): {e}"),
        }
    }

    /// Stops the other members from replicating: each other member that runs and is not paused
    /// gets the server's `stopReplProducer` fail point, which stops its oplog fetcher (from any
    /// sync source), and this waits until each secondary's fetcher has stopped. Writes that
    /// member `member` (the primary) then acknowledges with `w: 1` are on it alone, and an
    /// election that replaces it (after [`kill`](Self::kill) or [`pause`](Self::pause)) rolls
    /// them back when it rejoins; writes with `w: "majority"` wait until replication starts
    /// again or fail with the failover. Undo it with [`start_replication`](Self::start_replication);
    /// a member restarted meanwhile replicates again at once (fail points do not survive a
    /// restart), and one paused now is not stopped.
    ///
    /// The fail point is a test command: every member runs with `enableTestCommands=1`.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Mongo`] when a member refuses the command or does not answer within
    /// 5 seconds, or its fetcher does not stop within 10.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub async fn stop_replication(&self, member: usize) -> Result<(), TestkitError> {
        for other in self.others(member) {
            let Some(reply) = self.hello(other).await else {
                // Down: it replicates nothing, and restarts without the fail point.
                continue;
            };
            let admin = self.admin(other, Some(FAIL_POINT_TIMEOUT_MS)).await?;
            let set = admin
                .run_command(doc! { "configureFailPoint": STOP_REPLICATION, "mode": "alwaysOn" })
                .await
                .map_err(|e| TestkitError::mongo("`configureFailPoint` stopReplProducer", e))?;
            // A primary has no fetcher to stop (it gets one when it steps down, and stops it
            // at once).
            if reply.get_bool("isWritablePrimary").unwrap_or(false) {
                continue;
            }
            // The fetcher may be inside a batch: wait until it has checked the fail point, so
            // that nothing written from now on reaches this member.
            let entered = match set.get("count") {
                Some(Bson::Int32(n)) => i64::from(*n),
                Some(Bson::Int64(n)) => *n,
                _ => 0,
            };
            admin
                .run_command(doc! {
                    "waitForFailPoint": STOP_REPLICATION,
                    "timesEntered": entered + 1,
                    "maxTimeMS": FAIL_POINT_HIT_TIMEOUT_MS,
                })
                .await
                .map_err(|e| TestkitError::mongo("`waitForFailPoint` stopReplProducer", e))?;
        }
        tracing::info!(member, "replication from this member stopped");
        Ok(())
    }

    /// Lets the other members replicate again after
    /// [`stop_replication`](Self::stop_replication): the `stopReplProducer` fail point is turned
    /// off on each other member that runs and is not paused (one resumed later must be asked
    /// again).
    ///
    /// # Errors
    ///
    /// [`TestkitError::Mongo`] when a member refuses the command or does not answer within
    /// 5 seconds.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub async fn start_replication(&self, member: usize) -> Result<(), TestkitError> {
        for other in self.others(member) {
            if self.hello(other).await.is_none() {
                continue;
            }
            self.admin(other, Some(FAIL_POINT_TIMEOUT_MS))
                .await?
                .run_command(doc! { "configureFailPoint": STOP_REPLICATION, "mode": "off" })
                .await
                .map_err(|e| TestkitError::mongo("`configureFailPoint` stopReplProducer", e))?;
        }
        tracing::info!(member, "replication from this member started again");
        Ok(())
    }

    /// The members other than `member` that run and are not paused.
    fn others(&self, member: usize) -> Vec<usize> {
        assert!(
            member < self.len(),
            "no member {member} in a set of {}",
            self.len()
        );
        (0..self.len())
            .filter(|&other| other != member && !self.paused[other])
            .filter(|&other| self.members[other].pid().is_some())
            .collect()
    }

    /// Stops member `member` if it runs (resuming it first if it is paused) and starts it again
    /// on the same port and data, then waits until it has rejoined the set as a primary or a
    /// secondary.
    ///
    /// # Errors
    ///
    /// As for [`MongoServer::restart`](crate::MongoServer::restart), and
    /// [`TestkitError::Timeout`] when it does not rejoin within 60 seconds.
    ///
    /// # Panics
    ///
    /// When `member` is not below [`len`](Self::len).
    pub async fn restart(&mut self, member: usize) -> Result<(), TestkitError> {
        // A paused process would keep the shutdown signal pending until it is killed.
        self.resume(member);
        self.members[member].restart_member().await?;
        let deadline = Instant::now() + FIRST_PRIMARY_TIMEOUT;
        loop {
            if let Some(reply) = self.hello(member).await {
                let primary = reply.get_bool("isWritablePrimary").unwrap_or(false);
                let secondary = reply.get_bool("secondary").unwrap_or(false);
                if primary || secondary {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::Timeout {
                    port: self.port(member),
                    waiting_for: "a primary or a secondary again",
                    timeout: FIRST_PRIMARY_TIMEOUT,
                    log_tail: self.members[member].log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        // Killed, not stopped: the data goes with them, and a primary asked to shut down spends
        // its quiesce period (15 s) waiting for secondaries that are shutting down too.
        for node in &mut self.members {
            node.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_count_out_of_range_is_refused_before_anything_starts() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for n in [0, 8] {
            let error = runtime.block_on(ReplicaSet::start(n)).unwrap_err();
            assert!(
                matches!(error, TestkitError::Members { members } if members == n),
                "{error:?}"
            );
            assert!(error.to_string().contains(&n.to_string()), "{error}");
        }
    }
}
