//! Finding Redis and PostgreSQL, or starting private ones.
//!
//! seckill needs a real Redis and a real PostgreSQL, and a newcomer should not
//! have to set anything up to try it. [`Services::resolve`] decides, for each
//! of the two, in this order:
//!
//! 1. the URL the user gave (`SECKILL_REDIS_URL`, `SECKILL_DATABASE_URL`);
//! 2. the server on its default local port, if it answers;
//! 3. a private server, started from the installed binaries (`redis-server`;
//!    PostgreSQL's `initdb` and `postgres`) in a temporary directory on a free
//!    port. It stops, and its directory is deleted, when the [`Services`]
//!    value is dropped.
//!
//! When all three fail it says how to get the servers: install the packages,
//! or `docker compose up -d`.
//!
//! The tests use the same code; the fault tests start [`PrivateRedis`] and
//! [`PrivatePostgres`] directly, because they need servers they may stop.
//!
//! A process that is killed (`kill -9`, a crashed test) cannot run its
//! destructors. So that its private servers do not outlive it, each one has a
//! tiny "reaper" shell process that checks every second whether the parent
//! still lives and stops the server when it does not.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, User};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tempfile::TempDir;

/// Where seckill looks for Redis when no URL is given.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Where seckill looks for PostgreSQL when no URL is given (trust auth, as a
/// fresh Debian install allows for local connections).
pub const DEFAULT_POSTGRES_SERVER: &str = "postgres://postgres@127.0.0.1:5432";
/// The database seckill uses on a server it found or started.
pub const DEFAULT_DATABASE: &str = "seckill";

/// How long a private server may take to answer after it was started.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a probe waits for a local server before deciding it is not there.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

const HOW_TO_GET_SERVERS: &str = "install the packages (Debian/Ubuntu: `apt-get install redis-server postgresql`) \
     so seckill can find or start them, or run `docker compose up -d` and point \
     SECKILL_REDIS_URL / SECKILL_DATABASE_URL at them";

/// Whether [`Services::resolve`] may start private servers. A command that
/// exits at once (`migrate`, `sale create`) or must share its servers with
/// other processes (`worker`) gains nothing from servers that die with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivateServers {
    Allowed,
    Refused,
}

/// Where a service came from, for the start-up log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The user gave its URL.
    Configured,
    /// It answered on its default local port.
    Local,
    /// This process started it; it stops when the process exits.
    Private,
}

/// The Redis and PostgreSQL this process uses. Keep it alive as long as the
/// URLs are in use: dropping it stops the private servers.
#[derive(Debug)]
pub struct Services {
    pub redis_url: String,
    pub redis_origin: Origin,
    /// A URL naming a database that exists and may be migrated.
    pub database_url: String,
    pub postgres_origin: Origin,
    private_redis: Option<PrivateRedis>,
    private_postgres: Option<PrivatePostgres>,
}

impl Services {
    /// Decide where Redis and PostgreSQL are (see the module docs).
    pub async fn resolve(
        redis_url: Option<&str>,
        database_url: Option<&str>,
        private: PrivateServers,
    ) -> anyhow::Result<Self> {
        let refuse = |what: &str| {
            anyhow::anyhow!(
                "no {what} answers on its default local port, and a private server would vanish \
                 when this command exits; start the local servers, or set SECKILL_REDIS_URL and \
                 SECKILL_DATABASE_URL (for example to the servers of `docker compose up -d`)"
            )
        };
        let (redis_url, redis_origin, private_redis) = match redis_url {
            Some(url) => (url.to_owned(), Origin::Configured, None),
            None if redis_answers(DEFAULT_REDIS_URL).await => {
                (DEFAULT_REDIS_URL.to_owned(), Origin::Local, None)
            }
            None if private == PrivateServers::Refused => return Err(refuse("Redis")),
            None => {
                let redis = PrivateRedis::start()
                    .await
                    .with_context(|| format!("no Redis answers on 127.0.0.1:6379 and none could be started; {HOW_TO_GET_SERVERS}"))?;
                (redis.url(), Origin::Private, Some(redis))
            }
        };
        let (server_url, postgres_origin, private_postgres) = match database_url {
            Some(url) => (url.to_owned(), Origin::Configured, None),
            None if postgres_answers(DEFAULT_POSTGRES_SERVER).await => (
                with_database(DEFAULT_POSTGRES_SERVER, DEFAULT_DATABASE)?,
                Origin::Local,
                None,
            ),
            None if private == PrivateServers::Refused => return Err(refuse("PostgreSQL")),
            None => {
                let postgres = PrivatePostgres::start()
                    .await
                    .with_context(|| format!("no PostgreSQL answers on 127.0.0.1:5432 and none could be started; {HOW_TO_GET_SERVERS}"))?;
                (
                    postgres.url(DEFAULT_DATABASE),
                    Origin::Private,
                    Some(postgres),
                )
            }
        };
        ensure_database(&server_url).await?;
        Ok(Self {
            redis_url,
            redis_origin,
            database_url: server_url,
            postgres_origin,
            private_redis,
            private_postgres,
        })
    }

    /// Whether this process started a server of its own.
    pub fn has_private_servers(&self) -> bool {
        self.private_redis.is_some() || self.private_postgres.is_some()
    }
}

/// Whether a Redis server answers PING at `url`.
pub async fn redis_answers(url: &str) -> bool {
    let ping = async {
        let client = redis::Client::open(url).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(tokio::time::timeout(PROBE_TIMEOUT, ping).await, Ok(Some(_)))
}

/// Whether a PostgreSQL server accepts a connection to its `postgres`
/// database at `server_url`.
pub async fn postgres_answers(server_url: &str) -> bool {
    let Ok(url) = with_database(server_url, "postgres") else {
        return false;
    };
    let connect = PgConnection::connect(&url);
    match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            true
        }
        _ => false,
    }
}

/// `url` with its database (the path) replaced by `database`.
pub fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let mut parsed = url::Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    parsed.set_path(database);
    Ok(parsed.to_string())
}

/// Create the database named in `database_url` if it does not exist yet.
///
/// The name is checked to be a plain identifier, because `CREATE DATABASE`
/// cannot take it as a bind parameter.
pub async fn ensure_database(database_url: &str) -> anyhow::Result<()> {
    let parsed = url::Url::parse(database_url).context("SECKILL_DATABASE_URL is not a URL")?;
    let name = parsed.path().trim_start_matches('/').to_owned();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        bail!("database name {name:?} must be lower-case letters, digits and '_'");
    }
    let admin_url = with_database(database_url, "postgres")?;
    let mut conn = PgConnection::connect(&admin_url).await.with_context(|| {
        format!(
            "connecting to PostgreSQL at {}",
            crate::startup::redact(&admin_url)
        )
    })?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut conn)
            .await
            .context("looking for the database")?;
    if !exists {
        // Two processes may both find it missing; the loser's "already
        // exists" (42P04, or 23505 from the catalog's unique index) is fine.
        if let Err(error) = sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut conn)
            .await
        {
            let code = error.as_database_error().and_then(|e| e.code());
            if !matches!(code.as_deref(), Some("42P04" | "23505")) {
                return Err(error).with_context(|| format!("creating database {name}"));
            }
        }
    }
    conn.close().await.ok();
    Ok(())
}

/// Drop a database, disconnecting whoever still uses it (tests clean up with it).
pub async fn drop_database(database_url: &str) -> anyhow::Result<()> {
    let parsed = url::Url::parse(database_url).context("not a URL")?;
    let name = parsed.path().trim_start_matches('/').to_owned();
    let mut conn = PgConnection::connect(&with_database(database_url, "postgres")?).await?;
    sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
        .execute(&mut conn)
        .await
        .with_context(|| format!("dropping database {name}"))?;
    conn.close().await.ok();
    Ok(())
}

/// A Redis server of our own, on a free port, keeping nothing on disk.
#[derive(Debug)]
pub struct PrivateRedis {
    port: u16,
    dir: TempDir,
    server: Option<Supervised>,
}

impl PrivateRedis {
    /// Start `redis-server` and wait until it answers.
    pub async fn start() -> anyhow::Result<Self> {
        let binary = find_on_path("redis-server").context("redis-server is not installed")?;
        let dir = tempfile::Builder::new()
            .prefix("seckill-redis-")
            .tempdir()
            .context("creating a directory for Redis")?;
        let mut redis = Self {
            port: free_port()?,
            dir,
            server: None,
        };
        redis.launch(&binary)?;
        redis.wait_ready().await?;
        Ok(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kill the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop(Signal::SIGKILL);
        }
    }

    /// Start the server again on the same port (after [`PrivateRedis::kill`]).
    /// It comes back empty: it keeps nothing on disk.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        let binary = find_on_path("redis-server").context("redis-server is not installed")?;
        self.launch(&binary)?;
        self.wait_ready().await
    }

    fn launch(&mut self, binary: &Path) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.path().join("redis.log"))?;
        let mut command = Command::new(binary);
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
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

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let url = self.url();
        wait_until(|| redis_answers(&url)).await.with_context(|| {
            format!(
                "Redis did not answer; see {}",
                self.dir.path().join("redis.log").display()
            )
        })
    }
}

/// A PostgreSQL server of our own: a fresh cluster in a temporary directory,
/// on a free port, with trust authentication for user `postgres`.
///
/// It runs with `fsync=off`: it is thrown away when the process ends, so
/// durability against power loss buys nothing and costs speed. (A process
/// crash, which the fault tests cause, loses nothing even so.)
#[derive(Debug)]
pub struct PrivatePostgres {
    port: u16,
    dir: TempDir,
    bin: PathBuf,
    /// Who the server runs as: PostgreSQL refuses to run as root.
    run_as: Option<User>,
    server: Option<Supervised>,
}

impl PrivatePostgres {
    /// Create a cluster with `initdb`, start `postgres` and wait until it answers.
    pub async fn start() -> anyhow::Result<Self> {
        let bin = postgres_bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("seckill-postgres-")
            .tempdir()
            .context("creating a directory for PostgreSQL")?;
        let run_as = unprivileged_user()?;
        if let Some(user) = &run_as {
            nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid))
                .context("handing the PostgreSQL directory to its user")?;
        }
        let postgres = Self {
            port: free_port()?,
            dir,
            bin,
            run_as,
            server: None,
        };
        postgres.initdb()?;
        let mut postgres = postgres;
        postgres.launch()?;
        postgres.wait_ready().await?;
        Ok(postgres)
    }

    /// A URL for `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Stop the server with a fast shutdown (SIGINT): open transactions are
    /// rolled back, connections are cut. From the app's side: PostgreSQL is down.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop(Signal::SIGINT);
        }
    }

    /// Start the server again, same port, same data.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.launch()?;
        self.wait_ready().await
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        if let Some(user) = &self.run_as {
            command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        command
    }

    fn initdb(&self) -> anyhow::Result<()> {
        let output = self
            .command("initdb")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .context("running initdb")?;
        if !output.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.path().join("postgres.log"))?;
        if let Some(user) = &self.run_as {
            nix::unistd::chown(
                &self.dir.path().join("postgres.log"),
                Some(user.uid),
                Some(user.gid),
            )?;
        }
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=300",
            ])
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .stdout(log.try_clone()?)
            .stderr(log);
        self.server = Some(Supervised::spawn(command, self.dir.path(), Signal::SIGINT)?);
        Ok(())
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let url = self.url("postgres");
        wait_until(|| postgres_answers(&url))
            .await
            .with_context(|| {
                format!(
                    "PostgreSQL did not answer; see {}",
                    self.dir.path().join("postgres.log").display()
                )
            })
    }
}

/// A server process plus the reaper that stops it if this process dies first.
#[derive(Debug)]
struct Supervised {
    server: Child,
    reaper: Child,
}

impl Supervised {
    fn spawn(mut command: Command, dir: &Path, polite: Signal) -> anyhow::Result<Self> {
        let server = command
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        // $0 = our pid, $1 = the server's, $2 = its directory. While we live,
        // sleep; once we are gone, stop the server and remove its files.
        let script = format!(
            r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done
kill -{sig} "$1" 2>/dev/null; sleep 5; kill -KILL "$1" 2>/dev/null; rm -rf "$2""#,
            sig = polite.as_str().trim_start_matches("SIG"),
        );
        let reaper = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(std::process::id().to_string())
            .arg(server.id().to_string())
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the reaper of a private server")?;
        Ok(Self { server, reaper })
    }

    /// Send `signal`, wait up to 10 s for the server to exit, then SIGKILL it.
    /// Blocks the calling thread for that long at most: it runs at shutdown
    /// and in tests, never on a request path.
    fn stop(mut self, signal: Signal) {
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
        let pid = Pid::from_raw(i32::try_from(self.server.id()).expect("pids fit in i32"));
        let _ = kill(pid, signal);
        for _ in 0..200 {
            if matches!(self.server.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop(Signal::SIGTERM);
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Poll `check` until it says yes or [`STARTUP_TIMEOUT`] passes.
async fn wait_until<F, Fut>(mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("no answer within {STARTUP_TIMEOUT:?}")
}

/// A TCP port that was free a moment ago. Another process could take it
/// before the server binds it; the server then fails to start and says so.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("looking for a free port")?;
    Ok(listener.local_addr()?.port())
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The directory holding `initdb` and `postgres`. Debian keeps them out of
/// PATH, under `/usr/lib/postgresql/<version>/bin`; the newest version wins.
fn postgres_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(initdb) = find_on_path("initdb") {
        // Resolve symlinks: `postgres` lives beside the real initdb.
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent().filter(|dir| dir.join("postgres").is_file()) {
            return Ok(dir.to_path_buf());
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .context("PostgreSQL's initdb and postgres were found neither on PATH nor under /usr/lib/postgresql/*/bin")
}

/// PostgreSQL refuses to run as root. When we are root, run it as the
/// `postgres` user the Debian package creates, or else as `nobody`.
fn unprivileged_user() -> anyhow::Result<Option<User>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let Some(user) = User::from_name(name).context("reading the user database")? {
            return Ok(Some(user));
        }
    }
    bail!(
        "running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://u:p@host:5433/old?sslmode=disable", "new").unwrap(),
            "postgres://u:p@host:5433/new?sslmode=disable"
        );
        assert_eq!(
            with_database(DEFAULT_POSTGRES_SERVER, "seckill").unwrap(),
            "postgres://postgres@127.0.0.1:5432/seckill"
        );
    }
}
