//! A private Redis server: started on a free port from the installed
//! `redis-server`, keeping nothing on disk; killed and restarted by the
//! fault tests.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::Signal;
use tempfile::TempDir;

use super::probes::redis_answers;
use super::supervise::{PORT_TRIES, Supervised, find_on_path, free_port, port_taken};

/// The name the sentinels watch the primary under.
pub(super) const MASTER_NAME: &str = "seckill";

/// How long the sentinels wait, without an answer, before they call the
/// primary down and fail it over. Production runs 5 to 30 s; a test would
/// rather not wait that long.
const DOWN_AFTER: Duration = Duration::from_millis(2_000);

/// A sentinel's configuration file, watching the primary on `primary`.
/// Two of the three must agree that it is down (the quorum), and a
/// majority must elect the sentinel that fails it over.
fn sentinel_config(primary: u16) -> String {
    format!(
        "sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
         sentinel failover-timeout {MASTER_NAME} 10000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        down = DOWN_AFTER.as_millis()
    )
}

/// A Redis server of our own, on a free port, keeping nothing on disk
/// unless started with [`PrivateRedis::start_durable`].
#[derive(Debug)]
pub struct PrivateRedis {
    port: u16,
    dir: TempDir,
    /// Whether it writes every command to an append-only file, fsync'ed
    /// before it answers (`appendfsync always`), and reads it back on start.
    durable: bool,
    /// What it is besides a server.
    role: Role,
    server: Option<Supervised>,
}

/// What a private server is started as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A stand-alone server (or a primary under Sentinel).
    Alone,
    /// A node of a private cluster (`redis_cluster.rs`), with its cluster
    /// bus on port `bus`, calling a node that has not answered for
    /// `node_timeout` failing (and, if a master, failing it over).
    ClusterNode { bus: u16, node_timeout: Duration },
    /// A replica of the server on this port (`redis_sentinel.rs`). Started
    /// again after a kill, it is started plain: the sentinels tell it whom
    /// to follow.
    ReplicaOf(u16),
    /// A sentinel watching the primary on this port under [`MASTER_NAME`]
    /// (`redis_sentinel.rs` starts three).
    Sentinel { primary: u16 },
}

impl PrivateRedis {
    /// Start `redis-server`, keeping nothing on disk, and wait until it answers.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_as(false, Role::Alone).await
    }

    /// Start `redis-server` with an append-only file fsync'ed on every
    /// write, as production would run it: a kill loses nothing it answered.
    pub async fn start_durable() -> anyhow::Result<Self> {
        Self::start_as(true, Role::Alone).await
    }

    /// Start an empty node of a Redis Cluster (`--cluster-enabled yes`),
    /// with its bus on a second free port and `--cluster-node-timeout
    /// node_timeout`; it serves no slot until `redis-cli --cluster create`
    /// gives it some.
    pub(super) async fn start_cluster_node(node_timeout: Duration) -> anyhow::Result<Self> {
        let bus = free_port()?;
        Self::start_as(false, Role::ClusterNode { bus, node_timeout }).await
    }

    /// Start a server as `role`, with an append-only file when `durable`.
    pub(super) async fn start_as(durable: bool, role: Role) -> anyhow::Result<Self> {
        let binary = find_on_path("redis-server").context("redis-server is not installed")?;
        Self::start_binary(&binary, durable, role).await
    }

    /// [`Self::start_as`] with the server program at `binary`.
    async fn start_binary(binary: &Path, durable: bool, role: Role) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("seckill-redis-")
            .tempdir()
            .context("creating a directory for Redis")?;
        let mut redis = Self {
            port: free_port()?,
            dir,
            durable,
            role,
            server: None,
        };
        for tries in 1.. {
            redis.launch(binary)?;
            match redis.wait_ready().await {
                Ok(()) => break,
                Err(error) if tries < PORT_TRIES && port_taken(&error) => {
                    tracing::info!(
                        port = redis.port,
                        "a Redis port taken by another process: another"
                    );
                    if let Some(failed) = redis.server.take() {
                        failed.abandon();
                    }
                    // The log is appended to across restarts; emptied here,
                    // so that the next start's failure is judged by its
                    // own lines, not by this one's "Address already in use".
                    std::fs::File::create(redis.dir.path().join("redis.log"))
                        .context("emptying the Redis log")?;
                    redis.port = free_port()?;
                    if let Role::ClusterNode { bus, .. } = &mut redis.role {
                        *bus = free_port()?;
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Ok(redis)
    }

    /// The folder of its files, removed when it stops.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The id of the server process last started; `None` after
    /// [`Self::kill`]. It may have exited since.
    pub fn pid(&self) -> Option<nix::unistd::Pid> {
        self.server.as_ref().map(Supervised::pid)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Kill the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop(Signal::SIGKILL);
        }
    }

    /// Freeze the server (SIGSTOP): it holds its connections and answers
    /// nothing, as a server stalled by its host would.
    pub fn pause(&self) {
        if let Some(server) = &self.server {
            server.signal(Signal::SIGSTOP);
        }
    }

    /// Let a frozen server go on (SIGCONT).
    pub fn resume(&self) {
        if let Some(server) = &self.server {
            server.signal(Signal::SIGCONT);
        }
    }

    /// What it is started as at its next (re)start.
    pub(super) fn set_role(&mut self, role: Role) {
        self.role = role;
    }

    /// Start the server again on the same port (after [`PrivateRedis::kill`]).
    /// A durable one comes back with everything it answered; another comes
    /// back empty.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        let binary = find_on_path("redis-server").context("redis-server is not installed")?;
        self.launch(&binary)?;
        self.wait_ready().await
    }

    /// Kill the server and start it again with no data at all, its files
    /// deleted: what a Redis without persistence meets on every restart.
    pub async fn wipe(&mut self) -> anyhow::Result<()> {
        self.kill();
        for entry in std::fs::read_dir(self.dir.path()).context("reading Redis' directory")? {
            let path = entry?.path();
            if path.file_name().is_some_and(|name| name == "redis.log") {
                continue;
            }
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        self.restart().await
    }

    fn launch(&mut self, binary: &Path) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("redis.log"))?;
        let appendonly = if self.durable { "yes" } else { "no" };
        let mut command = Command::new(binary);
        if let Role::Sentinel { primary } = self.role {
            // A sentinel keeps what it learns in its configuration file,
            // which must exist and be writable; it is written once, and
            // after a restart the sentinel reads back what it learnt.
            let config = self.dir.path().join("sentinel.conf");
            if !config.exists() {
                std::fs::write(&config, sentinel_config(primary))?;
            }
            command.arg(&config).arg("--sentinel");
        }
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                appendonly,
                "--daemonize",
                "no",
            ])
            .args(["--appendfsync", "always"]);
        match self.role {
            Role::ClusterNode { bus, node_timeout } => {
                command.args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus.to_string(),
                ]);
                command.args(["--cluster-config-file", "nodes.conf"]);
                command.args([
                    "--cluster-node-timeout",
                    &node_timeout.as_millis().to_string(),
                ]);
                // A shard whose master failed serves nothing until a
                // replica takes over; the other shards serve on (Redis'
                // default, `yes`, has every node refuse every command
                // meanwhile: one shard's trouble would stop every sale).
                command.args(["--cluster-require-full-coverage", "no"]);
                // Each replica stays with its shard. Redis would otherwise
                // move one from a shard with two to a shard left with none
                // (after a failover whose replicas were cut off): the
                // sale's shard could then have three replicas, and a fault
                // that stopped "the sale's replicas", found before the
                // move, would leave one running.
                command.args(["--cluster-allow-replica-migration", "no"]);
            }
            Role::ReplicaOf(primary) => {
                command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
            }
            Role::Alone | Role::Sentinel { .. } => {}
        }
        if !matches!(self.role, Role::Sentinel { .. }) {
            // A replica that (re)connects is synced at once, not after
            // Redis' default 5 s wait for others to share the transfer: a
            // primary without its replica confirms nothing under
            // `--redis-durability replica`. (A replica may be promoted.)
            command.args(["--repl-diskless-sync-delay", "0"]);
        }
        command
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        self.server = Some(Supervised::spawn(
            command,
            self.dir.path(),
            Signal::SIGTERM,
        )?);
        Ok(())
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let url = self.url();
        let log = self.dir.path().join("redis.log");
        let server = self
            .server
            .as_mut()
            .expect("launched before it is waited for");
        server
            .wait_ready("Redis", &log, || redis_answers(&url))
            .await
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop(Signal::SIGTERM);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::{PrivateRedis, Role};

    /// A server that cannot start is reported at once, with what it said:
    /// the log it wrote goes with its folder, so the error quotes it.
    /// (Before, the error came after the 30 s start-up wait and named a
    /// log file already deleted.)
    #[tokio::test]
    async fn a_server_that_exits_at_once_is_reported_with_the_end_of_its_log() {
        let bin = tempfile::tempdir().expect("a folder");
        let fake = bin.path().join("redis-server");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"*** FATAL CONFIG FILE ERROR: Bad directive\" >&2\nexit 1\n",
        )
        .expect("the fake server");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .expect("made runnable");

        let started = tokio::time::timeout(
            Duration::from_secs(10),
            PrivateRedis::start_binary(&fake, false, Role::Alone),
        )
        .await
        .expect("reported well within the 30 s start-up wait");
        let error = format!("{:#}", started.expect_err("it cannot start"));
        assert!(error.contains("exited"), "{error}");
        assert!(
            error.contains("FATAL CONFIG FILE ERROR: Bad directive"),
            "{error}"
        );
    }

    /// Another process took the port drawn for the server before the
    /// server bound it (a second test run drew the same): the server is
    /// started again on another port. The stand-in fails as Redis does the
    /// first time, then runs the real `redis-server`. (Before, the start
    /// failed, and with it the test or the bench that asked.)
    #[tokio::test]
    async fn a_server_whose_port_another_process_took_starts_on_another() {
        let Some(real) = super::find_on_path("redis-server") else {
            panic!("redis-server is not installed");
        };
        let bin = tempfile::tempdir().expect("a folder");
        let fake = bin.path().join("redis-server");
        let tried = bin.path().join("tried");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nif [ ! -e {tried} ]; then\n  touch {tried}\n  echo \"# Warning: Could not create server TCP listening socket 127.0.0.1:$2: bind: Address already in use\"\n  exit 1\nfi\nexec {real} \"$@\"\n",
                tried = tried.display(),
                real = real.display(),
            ),
        )
        .expect("the stand-in");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .expect("made runnable");

        let redis = PrivateRedis::start_binary(&fake, false, Role::Alone)
            .await
            .expect("started on another port");
        assert!(tried.exists(), "the first start did not fail");
        let pong: String = redis::cmd("PING")
            .query_async(
                &mut redis::Client::open(redis.url())
                    .expect("a URL")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("a connection"),
            )
            .await
            .expect("PING");
        assert_eq!(pong, "PONG");
    }

    /// A second start that fails for another reason than the port is not
    /// taken for a port clash: the log is emptied before each new try, so
    /// the first try's "Address already in use" does not decide the
    /// second's. Two starts, then the second's own error. (Before, the log
    /// kept the first failure's line and the start was tried a third time.)
    #[tokio::test]
    async fn only_a_start_whose_own_log_says_the_port_was_taken_is_tried_again() {
        let bin = tempfile::tempdir().expect("a folder");
        let fake = bin.path().join("redis-server");
        let starts = bin.path().join("starts");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho start >> {starts}\nif [ $(wc -l < {starts}) -eq 1 ]; then\n  echo \"# Could not create server TCP listening socket 127.0.0.1:$2: bind: Address already in use\"\nelse\n  echo \"*** FATAL CONFIG FILE ERROR: Bad directive\"\nfi\nexit 1\n",
                starts = starts.display(),
            ),
        )
        .expect("the stand-in");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .expect("made runnable");

        let started = PrivateRedis::start_binary(&fake, false, Role::Alone).await;
        let error = format!("{:#}", started.expect_err("it cannot start"));
        assert!(error.contains("FATAL CONFIG FILE ERROR"), "{error}");
        let launched = std::fs::read_to_string(&starts).expect("the starts");
        assert_eq!(launched.lines().count(), 2, "{error}");
    }
}
