//! Finding Redis and PostgreSQL, or starting private ones.
//!
//! seckill needs a real Redis and a real PostgreSQL, and a newcomer should not
//! have to set anything up to try it. [`Services::resolve`] decides, for each
//! of the two, in this order:
//!
//! 1. the URL the user gave (`SECKILL_REDIS_URL` or, for a Redis Cluster,
//!    `SECKILL_REDIS_CLUSTER_NODES`; `SECKILL_DATABASE_URL`);
//! 2. the server on its default local port, if it answers (for Redis, only
//!    beside a PostgreSQL that is not private: a private one numbers its
//!    sales from 1 again, and they would take another deployment's keys);
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
//! The files: this one decides; `redis_server.rs` and `postgres_server.rs` start private
//! servers, `redis_cluster.rs` a private Redis Cluster (for the tests and the bench), `redis_sentinel.rs` a private primary, replica and sentinels (for the failover tests and chaos), `redis_faults.rs` what a fault does to a node's connections; `supervise.rs` keeps a started server from outliving us. Reading and
//! rewriting the URLs (and hiding their passwords) is `seckill_core::urls`.
//!
//! A process that is killed (`kill -9`, a crashed test) cannot run its
//! destructors. So that its private servers do not outlive it, each one has a
//! tiny "reaper" shell process that checks every second whether the parent
//! still lives and stops the server when it does not.

mod leftovers;
mod postgres_server;
mod probes;
mod redis_cluster;
mod redis_faults;
mod redis_sentinel;
mod redis_server;
mod supervise;

use anyhow::Context;

pub use leftovers::{Held, Leftovers};
pub use postgres_server::{PrivatePostgres, ServerSession, drop_database, ensure_database};
pub use probes::postgres_answers;
use probes::{postgres_refusal, redis_answers};
pub use redis_cluster::PrivateRedisCluster;
pub use redis_faults::{DroppingClients, cut_replicas_off, drop_clients};
pub use redis_sentinel::PrivateRedisSentinel;
pub use redis_server::PrivateRedis;
pub use supervise::find_on_path;

use seckill_core::redis_pool::RedisAt;
use seckill_core::urls::{redact, with_database};

/// Where seckill looks for Redis when no URL is given.
pub(crate) const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Where seckill looks for PostgreSQL when no URL is given (trust auth, as a
/// fresh Debian install allows for local connections).
pub const DEFAULT_POSTGRES_SERVER: &str = "postgres://postgres@127.0.0.1:5432";
/// Where [`Services::find`] looks for local servers.
#[derive(Debug, Clone, Copy)]
struct Local<'a> {
    redis: &'a str,
    postgres: &'a str,
}

/// The default local ports.
const LOCAL: Local<'static> = Local {
    redis: DEFAULT_REDIS_URL,
    postgres: DEFAULT_POSTGRES_SERVER,
};

/// The database seckill uses on a server it found or started.
pub(crate) const DEFAULT_DATABASE: &str = "seckill";

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
pub(crate) enum Origin {
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
    /// One Redis server, or a cluster (only ever configured).
    pub redis: RedisAt,
    pub(crate) redis_origin: Origin,
    /// A URL naming a database that exists and may be migrated.
    pub database_url: String,
    pub(crate) postgres_origin: Origin,
    private_redis: Option<PrivateRedis>,
    private_postgres: Option<PrivatePostgres>,
}

impl Services {
    /// Decide where Redis and PostgreSQL are (see the module docs), and
    /// create the database the URL names if the server lacks it.
    pub async fn resolve(
        redis: Option<RedisAt>,
        database_url: Option<&str>,
        private: PrivateServers,
    ) -> anyhow::Result<Self> {
        let services = Self::find(redis, database_url, private).await?;
        ensure_database(&services.database_url).await?;
        Ok(services)
    }

    /// [`Services::resolve`], without creating the named database: for a
    /// command that works only in databases of its own on the server
    /// (`bench`), which would otherwise leave an empty `seckill` behind.
    pub async fn find(
        redis: Option<RedisAt>,
        database_url: Option<&str>,
        private: PrivateServers,
    ) -> anyhow::Result<Self> {
        Self::find_looking_at(LOCAL, redis, database_url, private).await
    }

    /// [`Services::find`], looking for local servers at `local`.
    async fn find_looking_at(
        local: Local<'_>,
        redis: Option<RedisAt>,
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
        let (server_url, postgres_origin, private_postgres) = match database_url {
            Some(url) => (url.to_owned(), Origin::Configured, None),
            None => match postgres_refusal(local.postgres).await {
                None => (
                    with_database(local.postgres, DEFAULT_DATABASE)?,
                    Origin::Local,
                    None,
                ),
                Some(why) if private == PrivateServers::Refused => {
                    return Err(refuse("PostgreSQL").context(why));
                }
                Some(why) => {
                    // A server that is there but wants a password (a stock
                    // Debian one, over TCP) is passed over: say so, or
                    // the user wonders where the demo's data went.
                    tracing::info!(
                        %why,
                        "the PostgreSQL on 127.0.0.1:5432 is not used; a private one is started \
                         (to use it, set SECKILL_DATABASE_URL, with a password if it asks for one)"
                    );
                    let postgres = PrivatePostgres::start()
                        .await
                        .with_context(|| format!("no PostgreSQL answers on 127.0.0.1:5432 and none could be started; {HOW_TO_GET_SERVERS}"))?;
                    (
                        postgres.url(DEFAULT_DATABASE),
                        Origin::Private,
                        Some(postgres),
                    )
                }
            },
        };
        // A private PostgreSQL numbers its sales from 1 again. Beside a
        // Redis that outlives this process (the local one), its sale 1
        // would take the keys of another deployment's sale 1 there (a load
        // replaces what it finds), and leave keys of sales no database
        // knows. So a private PostgreSQL gets a private Redis.
        let pair_with_private = postgres_origin == Origin::Private;
        let (redis, redis_origin, private_redis) = match redis {
            Some(at) => (at, Origin::Configured, None),
            None if !pair_with_private && redis_answers(local.redis).await => {
                (RedisAt::Server(local.redis.to_owned()), Origin::Local, None)
            }
            None if private == PrivateServers::Refused => return Err(refuse("Redis")),
            None => {
                if pair_with_private {
                    tracing::info!(
                        "a private Redis is started beside the private PostgreSQL: the sales \
                         of a database of this process' own keep their keys to themselves"
                    );
                }
                let redis = PrivateRedis::start().await.with_context(|| {
                    format!("a private Redis could not be started; {HOW_TO_GET_SERVERS}")
                })?;
                (RedisAt::Server(redis.url()), Origin::Private, Some(redis))
            }
        };
        Ok(Self {
            redis,
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

    /// Say in the log which servers are used, and where each came from.
    pub fn log(&self) {
        let origin = |origin: Origin| match origin {
            Origin::Configured => "configured",
            Origin::Local => "found on its default local port",
            Origin::Private => "private, started by this process; it stops when the process exits",
        };
        tracing::info!(url = %self.redis.redacted(), origin = origin(self.redis_origin), "Redis");
        tracing::info!(url = %redact(&self.database_url), origin = origin(self.postgres_origin), "PostgreSQL");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that is there but turns the connection down is passed over
    /// with its own words, which the log then shows.
    #[tokio::test]
    async fn a_postgres_that_refuses_says_why() {
        let postgres = PrivatePostgres::start()
            .await
            .expect("a private PostgreSQL");
        let server = postgres.url("postgres");
        assert_eq!(postgres_refusal(&server).await, None);
        let stranger = server.replacen("postgres@", "nobody_here@", 1);
        let why = postgres_refusal(&stranger).await.expect("refused");
        assert!(why.contains("nobody_here"), "{why}");
        drop(postgres);
        let why = postgres_refusal(&server).await.expect("gone");
        assert!(!why.is_empty());
    }

    /// A private PostgreSQL gets a private Redis, though one answers on
    /// the local port: its sales, numbered from 1 again, must not take
    /// the keys of another deployment's sales there.
    #[tokio::test]
    async fn a_private_postgres_comes_with_a_private_redis() {
        // The local Redis: one that answers, of this test's own.
        let local = PrivateRedis::start().await.expect("a Redis");
        let nothing = PrivateRedis::start().await.expect("a port");
        let refusing = nothing.url().replace("redis://", "postgres://postgres@");
        drop(nothing);
        let found = Services::find_looking_at(
            Local {
                redis: &local.url(),
                postgres: &refusing,
            },
            None,
            None,
            PrivateServers::Allowed,
        )
        .await
        .expect("servers");
        assert_eq!(found.postgres_origin, Origin::Private);
        assert_eq!(found.redis_origin, Origin::Private);
        assert_ne!(found.redis, RedisAt::Server(local.url()));
    }
}
