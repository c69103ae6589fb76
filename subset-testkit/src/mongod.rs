//! One `mongod` process on a loopback port and a temporary data directory.
//!
//! The data directory outlives the process: a node can be killed and restarted on the same port
//! and data. The directory is removed when the [`Node`] is dropped, and, should the test process
//! die without dropping it (a process-wide shared server is never dropped), by a watchdog shell
//! that notices the test process is gone, stops mongod and removes the directory.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::doc;
use tracing::Instrument;

use crate::error::{tail, TestkitError};

/// How long a node may take from spawn to ready (writable primary, or accepting commands).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a SIGTERM'd mongod gets to shut down cleanly before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many ports are tried when the one picked is taken before mongod binds it.
const PORT_ATTEMPTS: u32 = 5;

/// How many log lines an error shows.
const LOG_TAIL_LINES: usize = 15;

/// mongod's exit code when it cannot listen (`EXIT_NET_ERROR`).
const EXIT_NET_ERROR: i32 = 48;

/// Waits until its stdin closes (the test process exited, however it exited), then stops the
/// mongod whose pid is in `$1/testkit.pid` and removes the directory `$1`.
const WATCHDOG: &str = r#"
read -r _ignored
pid=$(cat "$1/testkit.pid" 2>/dev/null)
if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null
    n=0
    while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 20 ]; do sleep 1; n=$((n + 1)); done
    kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$1"
"#;

/// A temporary data directory, and the watchdog that removes it if the test process dies.
#[derive(Debug)]
pub(crate) struct DataDir {
    path: PathBuf,
    watchdog: Option<Watchdog>,
}

#[derive(Debug)]
struct Watchdog {
    process: Child,
    /// Never written: the watchdog acts when this pipe closes, which the kernel does when the
    /// test process exits, however it exits.
    _lifeline: ChildStdin,
}

impl DataDir {
    /// Creates a fresh directory under the system temporary directory and starts its watchdog.
    fn create() -> Result<Self, TestkitError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let path = loop {
            let candidate = base.join(format!(
                "subset-mongod-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::create_dir(&candidate) {
                Ok(()) => break candidate,
                // Left behind by an earlier process with the same pid: pick another name.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(TestkitError::io("create the data directory", candidate, e)),
            }
        };
        let mut dir = Self {
            path,
            watchdog: None,
        };
        dir.watchdog = Some(dir.spawn_watchdog()?);
        Ok(dir)
    }

    fn spawn_watchdog(&self) -> Result<Watchdog, TestkitError> {
        let mut command = Command::new("sh");
        command
            .args(["-c", WATCHDOG, "subset-testkit-watchdog"])
            .arg(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group, so that a Ctrl-C aimed at the tests does not kill the watchdog
        // before it has cleaned up.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut process = command.spawn().map_err(|source| TestkitError::Spawn {
            program: "sh".into(),
            source,
        })?;
        let lifeline = process.stdin.take().ok_or_else(|| TestkitError::Spawn {
            program: "sh".into(),
            source: std::io::Error::other("the watchdog has no stdin pipe"),
        })?;
        Ok(Watchdog {
            process,
            _lifeline: lifeline,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn log(&self) -> PathBuf {
        self.path.join("mongod.log")
    }

    /// mongod's own stdout and stderr: where the dynamic loader complains, before any logging.
    fn stdio(&self) -> PathBuf {
        self.path.join("mongod.stdio")
    }

    fn pid_file(&self) -> PathBuf {
        self.path.join("testkit.pid")
    }

    /// Writes the key file the members of a replica set with authentication share (6 to 1024
    /// base64 characters, readable by its owner alone, or mongod refuses it), and returns its
    /// path. The key guards nothing: the set listens on loopback and lives for one test run.
    fn write_key_file(&self) -> Result<PathBuf, TestkitError> {
        let path = self.path.join("keyfile");
        let mut options = File::options();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, b"c3Vic2V0LXRlc3RraXQta2V5"))
            .map_err(|e| TestkitError::io("write the key file", &path, e))?;
        Ok(path)
    }

    /// The last lines of the log and of the process output, for error messages.
    fn log_tail(&self) -> String {
        let log = tail(&read_tail(&self.log()), LOG_TAIL_LINES);
        let stdio = tail(&read_tail(&self.stdio()), LOG_TAIL_LINES);
        match (log.is_empty(), stdio.is_empty()) {
            (_, true) => log,
            (true, false) => stdio,
            (false, false) => format!("{log}\n--- stdout/stderr ---\n{stdio}"),
        }
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), %error, "could not remove the mongod data directory");
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            // Nothing is left for it to do.
            let _ = watchdog.process.kill();
            let _ = watchdog.process.wait();
        }
    }
}

/// One mongod process (or none, between [`Node::kill`] and [`Node::restart`]) and its data.
#[derive(Debug)]
pub(crate) struct Node {
    binary: PathBuf,
    port: u16,
    repl_set: Option<String>,
    /// Whether clients must authenticate (`--auth`, and a keyfile for a replica set).
    auth: bool,
    process: Option<Child>,
    data: DataDir,
    /// The log's length when the process was spawned, and when: what it logs from there on is
    /// this process's (see [`Node::wait_listening`]).
    spawned: (u64, Instant),
}

/// How long a mongod that answers on its port but has not logged that it listens is given
/// before it is taken to be listening (a version that logs otherwise).
const UNLOGGED_LISTENING: Duration = Duration::from_secs(2);

enum Listening {
    Yes,
    PortTaken,
}

/// What a started node waits for before it counts as ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// A writable primary: a standalone accepting commands, or a single-node replica set,
    /// initiated first when `initiate` (a restart finds it initiated already).
    Primary { initiate: bool },
    /// Answering `hello`: a member of a larger set, which the set initiates and elects.
    Answering,
}

impl Node {
    /// Starts mongod on a free port and waits until it is ready: for a replica set, initiated
    /// with itself as the only member and a writable primary; otherwise accepting commands.
    /// With `auth`, clients must authenticate; until a first user is created, the server
    /// lets clients on localhost create it (the localhost exception), which is how the set is
    /// initiated here too.
    ///
    /// # Errors
    ///
    /// See [`TestkitError`]: the data directory, spawning, ports, early exit, timeout.
    pub(crate) async fn start(
        binary: PathBuf,
        repl_set: Option<String>,
        auth: bool,
    ) -> Result<Self, TestkitError> {
        Self::start_as(binary, repl_set, auth, Ready::Primary { initiate: true }).await
    }

    /// Starts a member of the replica set `repl_set` on a free port and waits until it answers
    /// `hello`; initiating the set and electing a primary is the caller's business.
    ///
    /// # Errors
    ///
    /// As for [`Node::start`].
    pub(crate) async fn start_member(
        binary: PathBuf,
        repl_set: String,
    ) -> Result<Self, TestkitError> {
        Self::start_as(binary, Some(repl_set), false, Ready::Answering).await
    }

    async fn start_as(
        binary: PathBuf,
        repl_set: Option<String>,
        auth: bool,
        ready: Ready,
    ) -> Result<Self, TestkitError> {
        let data = DataDir::create()?;
        let mut node = Self {
            binary,
            port: 0,
            repl_set,
            auth,
            process: None,
            data,
            spawned: (0, Instant::now()),
        };
        let span = tracing::info_span!("mongod.start", dbpath = %node.data.path.display());
        async {
            let started = Instant::now();
            let deadline = started + START_TIMEOUT;
            let mut attempts = 0;
            loop {
                attempts += 1;
                node.port = free_port()?;
                node.spawn()?;
                match node.wait_listening(deadline).await? {
                    Listening::Yes => break,
                    Listening::PortTaken if attempts < PORT_ATTEMPTS => {
                        tracing::debug!(
                            port = node.port,
                            "port taken before mongod bound it; retrying"
                        );
                    }
                    Listening::PortTaken => {
                        return Err(TestkitError::PortInUse {
                            attempts,
                            port: node.port,
                        });
                    }
                }
            }
            node.wait_ready(ready, deadline).await?;
            tracing::info!(
                port = node.port,
                replica_set = node.repl_set.as_deref(),
                seconds = started.elapsed().as_secs_f64(),
                "mongod ready"
            );
            Ok(())
        }
        .instrument(span)
        .await?;
        Ok(node)
    }

    /// Stops mongod if it runs and starts it again on the same port and data directory.
    ///
    /// # Errors
    ///
    /// As for [`Node::start`]; a taken port is not retried, since the data names it.
    pub(crate) async fn restart(&mut self) -> Result<(), TestkitError> {
        self.restart_as(Ready::Primary { initiate: false }).await
    }

    /// Restarts a member of a larger set: stops it if it runs, starts it on the same port and
    /// data directory, and waits until it answers `hello` (it rejoins the set by itself).
    ///
    /// # Errors
    ///
    /// As for [`Node::restart`].
    pub(crate) async fn restart_member(&mut self) -> Result<(), TestkitError> {
        self.restart_as(Ready::Answering).await
    }

    async fn restart_as(&mut self, ready: Ready) -> Result<(), TestkitError> {
        let span = tracing::info_span!("mongod.restart", port = self.port);
        async {
            self.stop();
            let deadline = Instant::now() + START_TIMEOUT;
            self.spawn()?;
            if let Listening::PortTaken = self.wait_listening(deadline).await? {
                return Err(TestkitError::PortInUse {
                    attempts: 1,
                    port: self.port,
                });
            }
            self.wait_ready(ready, deadline).await
        }
        .instrument(span)
        .await
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The process id of mongod while it runs (`None` once stopped or killed).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    pub(crate) fn data_dir(&self) -> &Path {
        self.data.path()
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.data.log()
    }

    /// The last lines of the log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        self.data.log_tail()
    }

    fn spawn(&mut self) -> Result<(), TestkitError> {
        let logged = std::fs::metadata(self.data.log()).map_or(0, |m| m.len());
        self.spawned = (logged, Instant::now());
        let stdio = File::options()
            .create(true)
            .append(true)
            .open(self.data.stdio())
            .map_err(|e| TestkitError::io("create", self.data.stdio(), e))?;
        let stderr = stdio
            .try_clone()
            .map_err(|e| TestkitError::io("open", self.data.stdio(), e))?;
        let mut command = Command::new(&self.binary);
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind_ip", "127.0.0.1", "--nounixsocket"])
            .arg("--dbpath")
            .arg(self.data.path())
            .arg("--logpath")
            .arg(self.data.log())
            .arg("--logappend")
            // The default takes half the machine's memory; tests hold little data.
            .args(["--wiredTigerCacheSizeGB", "0.25"])
            .args(["--setParameter", "diagnosticDataCollectionEnabled=false"])
            // A transaction left open by a killed process holds its documents until the server
            // aborts it: after this limit, by a sweep every half limit, so at worst 1.5 times it.
            // The default (60 s) can keep a crash test waiting 90 s.
            .args(["--setParameter", "transactionLifetimeLimitSeconds=20"])
            // Fail points (`configureFailPoint`), so that tests can make the server fail one
            // command of their own client (`failCommand` with `appName`) at a chosen step.
            .args(["--setParameter", "enableTestCommands=1"])
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr);
        if let Some(name) = &self.repl_set {
            command.args(["--replSet", name]);
        }
        if self.auth {
            command.arg("--auth");
            // Members of a set with authentication authenticate to each other, even a set of
            // one: with a key file.
            if self.repl_set.is_some() {
                command.arg("--keyFile").arg(self.data.write_key_file()?);
            }
        }
        let process = spawn_retrying_busy(&mut command).map_err(|source| match source.kind() {
            std::io::ErrorKind::PermissionDenied => TestkitError::NotExecutable {
                path: self.binary.clone(),
            },
            _ => TestkitError::Spawn {
                program: self.binary.clone(),
                source,
            },
        })?;
        let pid_file = self.data.pid_file();
        std::fs::write(&pid_file, process.id().to_string())
            .map_err(|e| TestkitError::io("write", pid_file, e))?;
        tracing::debug!(pid = process.id(), port = self.port, "spawned mongod");
        self.process = Some(process);
        Ok(())
    }

    /// `Some(status)` if the process has exited (or was never started).
    fn exit_status(&mut self) -> Option<ExitStatus> {
        match self.process.as_mut().map(Child::try_wait) {
            Some(Ok(status)) => status,
            Some(Err(error)) => {
                tracing::warn!(%error, "could not poll mongod");
                None
            }
            None => Some(ExitStatus::default()),
        }
    }

    fn exited(&self, status: ExitStatus) -> TestkitError {
        TestkitError::Exited {
            status,
            log_tail: self.data.log_tail(),
        }
    }

    fn timeout(&self, waiting_for: &'static str) -> TestkitError {
        TestkitError::Timeout {
            port: self.port,
            waiting_for,
            timeout: START_TIMEOUT,
            log_tail: self.data.log_tail(),
        }
    }

    /// Polls until the port accepts TCP connections, or mongod exits.
    async fn wait_listening(&mut self, deadline: Instant) -> Result<Listening, TestkitError> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if let Some(status) = self.exit_status() {
                // The log says "Address already in use"; the exit code is the stable signal.
                if status.code() == Some(EXIT_NET_ERROR) {
                    return Ok(Listening::PortTaken);
                }
                return Err(self.exited(status));
            }
            // Loopback connects are refused at once, so blocking here is brief. A connect alone
            // may reach another test's mongod that took the port first (this one then exits
            // for want of it): the port is this process's once its own log says it listens.
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
                && (self.logged_listening() || self.spawned.1.elapsed() >= UNLOGGED_LISTENING)
            {
                return Ok(Listening::Yes);
            }
            if Instant::now() >= deadline {
                return Err(self.timeout("listening"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Whether this process has logged, since it was spawned, that it waits for connections.
    fn logged_listening(&self) -> bool {
        let Ok(mut log) = File::open(self.data.log()) else {
            return false;
        };
        let mut since = String::new();
        log.seek(SeekFrom::Start(self.spawned.0))
            .and_then(|_| log.read_to_string(&mut since))
            .is_ok_and(|_| since.contains("Waiting for connections"))
    }

    /// Polls `hello` until the node is `ready`, initiating a single-node replica set first when
    /// asked to.
    async fn wait_ready(&mut self, ready: Ready, deadline: Instant) -> Result<(), TestkitError> {
        let uri = format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=2000",
            self.port
        );
        // A client of the caller's runtime, dropped before returning.
        let client = mongodb::Client::with_uri_str(&uri)
            .await
            .map_err(|e| TestkitError::mongo("connecting to the new mongod", e))?;
        let admin = client.database("admin");
        let mut must_initiate =
            ready == (Ready::Primary { initiate: true }) && self.repl_set.is_some();
        loop {
            if let Some(status) = self.exit_status() {
                return Err(self.exited(status));
            }
            match admin.run_command(doc! { "hello": 1 }).await {
                Ok(reply) => {
                    if ready == Ready::Answering {
                        return Ok(());
                    }
                    let Some(name) = &self.repl_set else {
                        return Ok(());
                    };
                    if reply.get_bool("isWritablePrimary").unwrap_or(false) {
                        return Ok(());
                    }
                    if must_initiate {
                        let member = format!("127.0.0.1:{}", self.port);
                        let config = doc! {
                            "_id": name.as_str(),
                            "members": [{ "_id": 0, "host": member }],
                        };
                        admin
                            .run_command(doc! { "replSetInitiate": config })
                            .await
                            .map_err(|e| TestkitError::mongo("`replSetInitiate`", e))?;
                        tracing::debug!(set = %name, "replica set initiated");
                        must_initiate = false;
                        continue;
                    }
                }
                Err(error) => tracing::debug!(%error, "mongod not answering `hello` yet"),
            }
            if Instant::now() >= deadline {
                let what = if ready == Ready::Answering {
                    "answering `hello`"
                } else if self.repl_set.is_some() {
                    "a writable primary"
                } else {
                    "accepting commands"
                };
                return Err(self.timeout(what));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM, waits up to [`STOP_TIMEOUT`], then kills. Blocks the calling thread
    /// (a clean shutdown of a test server takes milliseconds).
    pub(crate) fn stop(&mut self) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        if let Ok(None) = process.try_wait() {
            terminate(&mut process);
            let until = Instant::now() + STOP_TIMEOUT;
            loop {
                match process.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < until => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        tracing::warn!(port = self.port, "mongod ignored SIGTERM; killing it");
                        let _ = process.kill();
                        let _ = process.wait();
                        break;
                    }
                }
            }
        }
        self.forget_pid();
        tracing::debug!(port = self.port, "mongod stopped");
    }

    /// Kills mongod at once (SIGKILL), as a crash would; the data directory stays.
    pub(crate) fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
            self.forget_pid();
            tracing::debug!(port = self.port, "mongod killed");
        }
    }

    /// Empties the pid file so the watchdog never signals a recycled pid.
    fn forget_pid(&self) {
        let _ = File::create(self.data.pid_file());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
        // `self.data` is dropped next: it removes the directory.
    }
}

/// Spawns, retrying briefly on `ETXTBSY`: a binary written just before (a test's fake, a fresh
/// copy) can look busy while another thread's fork still holds the writer's descriptor.
fn spawn_retrying_busy(command: &mut Command) -> std::io::Result<Child> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 10 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

#[cfg(unix)]
fn terminate(process: &mut Child) {
    let sent = Command::new("kill")
        .args(["-TERM", &process.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !sent.is_ok_and(|status| status.success()) {
        let _ = process.kill();
    }
}

#[cfg(not(unix))]
fn terminate(process: &mut Child) {
    let _ = process.kill();
}

/// A port that was free a moment ago. mongod may still lose it to another process, which
/// [`Node::start`] notices and retries.
fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| TestkitError::io("find a free port on", "127.0.0.1", e))
}

/// The last 64 KiB of a file, lossily decoded; empty if it cannot be read.
fn read_tail(path: &Path) -> String {
    const MAX: u64 = 64 * 1024;
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        let len = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(MAX)));
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_data_dir_is_removed_on_drop() {
        let dir = DataDir::create().unwrap();
        let path = dir.path().to_path_buf();
        File::create(path.join("file"))
            .unwrap()
            .write_all(b"x")
            .unwrap();
        drop(dir);
        assert!(!path.exists());
    }

    #[cfg(unix)]
    #[test]
    fn the_watchdog_stops_the_process_and_removes_the_dir_when_its_pipe_closes() {
        let mut dir = DataDir::create().unwrap();
        let path = dir.path().to_path_buf();
        let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
        std::fs::write(dir.pid_file(), sleeper.id().to_string()).unwrap();
        // What the kernel does when the test process dies: the lifeline closes.
        let Watchdog {
            mut process,
            _lifeline,
        } = dir.watchdog.take().unwrap();
        drop(_lifeline);
        // Reaped here at once, as init reaps an orphaned mongod; a zombie would look alive.
        assert!(
            !sleeper.wait().unwrap().success(),
            "the watchdog must have signalled it"
        );
        assert!(process.wait().unwrap().success());
        assert!(!path.exists());
        drop(dir);
    }

    /// Starts a node whose "mongod" is a shell script, on a fresh runtime.
    #[cfg(unix)]
    fn start_fake(name: &str, script: &str) -> TestkitError {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("subset-fake-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let binary = dir.join("mongod");
        std::fs::write(&binary, script).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let error = runtime
            .block_on(Node::start(binary, None, false))
            .expect_err("the fake mongod never listens");
        std::fs::remove_dir_all(dir).unwrap();
        error
    }

    #[cfg(unix)]
    #[test]
    fn a_taken_port_is_retried_then_reported() {
        let error = start_fake("port", "#!/bin/sh\nexit 48\n");
        assert!(
            matches!(
                error,
                TestkitError::PortInUse {
                    attempts: PORT_ATTEMPTS,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_early_exit_shows_the_output() {
        let error = start_fake(
            "exit",
            "#!/bin/sh\necho 'libfoo.so: not found' >&2\nexit 127\n",
        );
        assert!(matches!(error, TestkitError::Exited { .. }), "{error:?}");
        assert!(
            error.to_string().contains("libfoo.so: not found"),
            "{error}"
        );
    }

    #[test]
    fn read_tail_tolerates_missing_files() {
        assert_eq!(read_tail(Path::new("/nonexistent/subset/log")), "");
    }
}
