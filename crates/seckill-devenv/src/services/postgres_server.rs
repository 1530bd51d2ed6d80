//! A private PostgreSQL server (a fresh cluster from the installed `initdb`
//! and `postgres`), and the server-administration statements seckill needs
//! on any server: creating and dropping its database. These are the only
//! SQL statements outside `store/`, and they touch no table of the app.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use nix::unistd::User;
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tempfile::TempDir;

use super::probes::postgres_answers;
use super::supervise::{PORT_TRIES, Supervised, find_on_path, free_port, port_taken};
use seckill_core::urls::{redact, with_database};

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
    let mut conn = PgConnection::connect(&admin_url)
        .await
        .with_context(|| format!("connecting to PostgreSQL at {}", redact(&admin_url)))?;
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

/// A session to a server's `postgres` database, for what concerns whole
/// databases: the bench's leftovers (`seckill-tools`' `bench/leftovers.rs`).
/// Its advisory locks are held for as long as the session is open, and
/// let go when it ends, however its process ended.
pub struct ServerSession {
    conn: PgConnection,
}

impl ServerSession {
    /// A session to the server of `database_url`.
    pub async fn open(database_url: &str) -> anyhow::Result<Self> {
        let server = with_database(database_url, "postgres")?;
        let conn = PgConnection::connect(&server)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {}", redact(&server)))?;
        Ok(Self { conn })
    }

    /// Take the advisory lock (`class`, `hashtext(name)`) if nobody holds
    /// it; whether this session holds it now.
    pub async fn try_lock(&mut self, class: i32, name: &str) -> anyhow::Result<bool> {
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext($2))")
            .bind(class)
            .bind(name)
            .fetch_one(&mut self.conn)
            .await
            .with_context(|| format!("taking the advisory lock of {name}"))
    }

    /// Let go of a lock [`ServerSession::try_lock`] took.
    pub async fn unlock(&mut self, class: i32, name: &str) -> anyhow::Result<()> {
        sqlx::query("SELECT pg_advisory_unlock($1, hashtext($2))")
            .bind(class)
            .bind(name)
            .execute(&mut self.conn)
            .await
            .with_context(|| format!("letting go of the advisory lock of {name}"))?;
        Ok(())
    }

    /// The server's databases whose name starts with `prefix` (taken as
    /// written: a `_` in it matches a `_` only).
    pub async fn databases_starting(&mut self, prefix: &str) -> anyhow::Result<Vec<String>> {
        let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database")
            .fetch_all(&mut self.conn)
            .await
            .context("listing the databases")?;
        Ok(names
            .into_iter()
            .filter(|name| name.starts_with(prefix))
            .collect())
    }

    /// `DROP DATABASE`, never forced: while sessions remain, tried again
    /// for `patience`, then an error.
    pub async fn drop_unused(&mut self, database: &str, patience: Duration) -> anyhow::Result<()> {
        let started = tokio::time::Instant::now();
        let quoted = database.replace('"', "\"\"");
        loop {
            let dropped = sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{quoted}""#))
                .execute(&mut self.conn)
                .await;
            match dropped {
                Ok(_) => return Ok(()),
                Err(error) if started.elapsed() < patience => {
                    tracing::debug!(database, error = %error, "a database still in use");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(error) => {
                    return Err(error)
                        .with_context(|| format!("dropping {database}, still in use"));
                }
            }
        }
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
        for tries in 1.. {
            postgres.launch()?;
            match postgres.wait_ready().await {
                Ok(()) => break,
                Err(error) if tries < PORT_TRIES && port_taken(&error) => {
                    tracing::info!(
                        port = postgres.port,
                        "a PostgreSQL port taken by another process: another"
                    );
                    // Its log is made anew by the next launch.
                    if let Some(failed) = postgres.server.take() {
                        failed.abandon();
                    }
                    postgres.port = free_port()?;
                }
                Err(error) => return Err(error),
            }
        }
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

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let url = self.url("postgres");
        let log = self.dir.path().join("postgres.log");
        let server = self
            .server
            .as_mut()
            .expect("launched before it is waited for");
        server
            .wait_ready("PostgreSQL", &log, || postgres_answers(&url))
            .await
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.stop();
    }
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
