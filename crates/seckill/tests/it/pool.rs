//! The Redis pool's connections: one shared by every caller of one server
//! (`src/redis_pool/sharing.rs`), one each under `replica`; and its check
//! of what it hands out (`src/redis_pool/recycle_check.rs`): skipped for a
//! connection that answered just now, made for one idle longer and for
//! every one that answered before a connection to the same server, in any
//! pool, was found closed; a closed one is never handed out again. And the pool's deletion of a
//! prefix's keys (`RedisPool::delete_under`, what `reset`, the bench and
//! the tests clean up with).

use std::time::{Duration, Instant};

use seckill_core::config::RedisDurability;
use seckill_core::redis_pool::{RedisAt, RedisConn, RedisPool, TRUSTED_FOR, connect_redis_with};
use seckill_devenv::services::PrivateRedis;

/// A pool of the Redis server at `url`, and a connection beside it that
/// looks at the pool's clients.
async fn pool_and_observer(url: &str) -> (RedisPool, redis::aio::MultiplexedConnection) {
    let pool =
        RedisPool::new(&RedisAt::Server(url.to_owned()), Duration::from_secs(5)).expect("a pool");
    (pool, crate::helpers::redis_at(url).await)
}

/// The id of the connection the pool hands out next.
async fn next_id(pool: &RedisPool) -> redis::RedisResult<i64> {
    client_id(&mut pool.get().await.expect("a connection")).await
}

async fn client_id(conn: &mut RedisConn) -> redis::RedisResult<i64> {
    redis::cmd("CLIENT").arg("ID").query_async(conn).await
}

/// The last command a client ran, as the server saw it.
async fn last_command(observer: &mut redis::aio::MultiplexedConnection, id: i64) -> String {
    let line: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query_async(observer)
        .await
        .expect("CLIENT LIST");
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("cmd="))
        .unwrap_or_else(|| panic!("no cmd= in {line}"))
        .to_owned()
}

#[tokio::test]
async fn a_connection_that_just_answered_is_handed_out_unchecked_and_an_idle_one_checked() {
    let RedisAt::Server(url) = &crate::helpers::services().await.redis else {
        panic!("the tests' Redis is one server");
    };
    let (pool, mut observer) = pool_and_observer(url).await;
    // Taken again at once: no round trip of a check on the way. (A test
    // beside this one that finds a connection to the same server closed
    // has every connection to it checked once more: hence a few tries.)
    let mut unchecked = None;
    for _ in 0..5 {
        let id = next_id(&pool).await.expect("CLIENT ID");
        drop(pool.get().await.expect("a connection"));
        if last_command(&mut observer, id).await == "client|id" {
            unchecked = Some(id);
            break;
        }
    }
    let id = unchecked.expect("a connection that had just answered was checked every time");
    // Idle for longer: checked (deadpool-redis' PING) before it is given.
    tokio::time::sleep(TRUSTED_FOR + Duration::from_millis(100)).await;
    drop(pool.get().await.expect("a connection"));
    assert_eq!(last_command(&mut observer, id).await, "ping");
}

/// A command sent without waiting for its answer (`set_no_response`, as
/// `lock.rs` sends an abandon behind a lost attempt) says nothing of its
/// server: a connection whose last command timed out on a stalled server
/// is still checked before it is handed out again, however soon. Taken as
/// an answer, it made the connection trusted at once.
#[tokio::test]
async fn a_command_sent_unheard_after_a_timeout_leaves_the_connection_to_be_checked() {
    use redis::aio::ConnectionLike;

    let redis = PrivateRedis::start().await.expect("a private Redis");
    let (pool, mut observer) = pool_and_observer(&redis.url()).await;
    let mut conn = pool.get().await.expect("a connection");
    let id = client_id(&mut conn).await.expect("CLIENT ID");
    redis.pause();
    let lost: redis::RedisResult<Option<String>> =
        redis::cmd("GET").arg("x").query_async(&mut conn).await;
    let unheard = {
        let mut echo = redis::cmd("ECHO");
        echo.arg("unheard").set_no_response(true);
        conn.req_packed_command(&echo).await
    };
    redis.resume();
    assert!(
        lost.as_ref().is_err_and(redis::RedisError::is_timeout),
        "{lost:?}"
    );
    unheard.expect("sent without waiting");
    drop(conn);
    drop(pool.get().await.expect("a connection"));
    assert_eq!(last_command(&mut observer, id).await, "ping");
}

/// One server's pool hands out handles on one connection
/// (`redis_pool/sharing.rs`): every caller's commands pipelined on it.
/// Redis closing it (as a restart closes it): the command that finds it
/// fails, every handle is checked before it is trusted again, and the
/// pool makes one new connection that the handles replaced after it share,
/// not one for each.
#[tokio::test]
async fn a_shared_connection_closed_under_the_pool_fails_once_and_one_new_one_replaces_it() {
    // A server of its own: what it kills makes no other test's pool check,
    // and its clients are this test's alone.
    let redis = PrivateRedis::start().await.expect("a private Redis");
    // Each step counts on the connection's last answer being less than
    // TRUSTED_FOR old: on a machine too busy for that, the try says
    // nothing and is made again.
    for _ in 0..5 {
        let (pool, mut observer) = pool_and_observer(&redis.url()).await;
        // Two handles at once: the pool makes two, on one connection.
        let (mut first, mut second) = (pool.get().await.expect("a"), pool.get().await.expect("b"));
        let answered = Instant::now();
        let shared = client_id(&mut first).await.expect("CLIENT ID");
        assert_eq!(client_id(&mut second).await.expect("CLIENT ID"), shared);
        drop((first, second));
        kill(&mut observer, shared).await;
        // It answered a moment ago, so it is handed out unchecked, and the
        // command sent on it fails: the price of not checking.
        let failed = next_id(&pool).await;
        if answered.elapsed() >= TRUSTED_FOR {
            continue;
        }
        assert!(
            failed.is_err(),
            "the closed connection answered: {failed:?}"
        );
        // Two handles at once again: both checked and dropped, two new
        // ones made, on one new connection.
        let (mut first, mut second) = (pool.get().await.expect("a"), pool.get().await.expect("b"));
        let new = client_id(&mut first).await.expect("a working connection");
        assert_ne!(new, shared);
        assert_eq!(client_id(&mut second).await.expect("CLIENT ID"), new);
        assert_one_pool_connection(&mut observer).await;
        return;
    }
    panic!("every try took longer than TRUSTED_FOR");
}

/// A burst of callers on a new pool, each needing a connection at the same
/// moment, makes one connection, not one each: `Sharing::create` holds its
/// lock across the connect.
#[tokio::test]
async fn a_burst_on_a_new_pool_makes_one_connection() {
    let redis = PrivateRedis::start().await.expect("a private Redis");
    let (pool, mut observer) = pool_and_observer(&redis.url()).await;
    let mut handles = futures::future::join_all((0..16).map(|_| pool.get())).await;
    let mut ids = Vec::new();
    for handle in &mut handles {
        ids.push(
            client_id(handle.as_mut().expect("a connection"))
                .await
                .expect("CLIENT ID"),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1, "the pool's handles are on {ids:?}");
    assert_one_pool_connection(&mut observer).await;
}

/// The server's clients are the observer and one connection of the pool's.
async fn assert_one_pool_connection(observer: &mut redis::aio::MultiplexedConnection) {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(observer)
        .await
        .expect("CLIENT LIST");
    assert_eq!(
        clients.lines().count(),
        2,
        "the observer and one connection of the pool's: {clients}"
    );
}

/// Under `--redis-durability replica` each caller has a connection of its
/// own: Redis holds a client in `WAIT` until its replicas answer, and on a
/// shared connection every command pipelined behind the `WAIT` would wait
/// with it, every buyer behind one buyer's replica.
#[tokio::test]
async fn under_replica_a_wait_holds_up_no_other_caller() {
    // No replica: a `WAIT 1` waits its whole timeout.
    let redis = PrivateRedis::start().await.expect("a private Redis");
    let durability = RedisDurability::Replica {
        wait: Duration::from_secs(3),
        replicas: 1,
    };
    let pool = connect_redis_with(
        &RedisAt::Server(redis.url()),
        Duration::from_secs(5),
        durability.timeouts(),
    )
    .await
    .expect("a pool");
    let (mut waiting, mut other) = (pool.get().await.expect("a"), pool.get().await.expect("b"));
    let (waiting_id, other_id) = (
        client_id(&mut waiting).await.expect("CLIENT ID"),
        client_id(&mut other).await.expect("CLIENT ID"),
    );
    assert_ne!(waiting_id, other_id);
    let wait = tokio::spawn(async move {
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(3_000)
            .query_async(&mut waiting)
            .await
            .expect("WAIT");
        acked
    });
    // The `WAIT` is under way (Redis sees its client blocked) before the
    // other caller asks.
    let observer = crate::helpers::redis_at(&redis.url()).await;
    crate::helpers::eventually(Duration::from_secs(2), "the WAIT blocked", || {
        let mut observer = observer.clone();
        async move { last_command(&mut observer, waiting_id).await == "wait" }
    })
    .await;
    let () = redis::cmd("SET")
        .arg("t:other")
        .arg(1)
        .query_async(&mut other)
        .await
        .expect("SET");
    assert!(
        !wait.is_finished(),
        "the other caller was answered only after the WAIT"
    );
    assert_eq!(wait.await.expect("the WAIT's task"), 0);
}

/// Close a client's connection from the server's side.
async fn kill(observer: &mut redis::aio::MultiplexedConnection, id: i64) {
    let count: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query_async(observer)
        .await
        .expect("CLIENT KILL");
    assert_eq!(count, 1);
}

/// A prefix's keys are taken out at once and a big one is freed off
/// Redis' main thread (`UNLINK`): with `DEL`, a room's line of a million
/// held Redis for about a second, and the caller, the bench cleaning up
/// after one, timed out. Redis counts what it freed so
/// (`lazyfreed_objects`), on a server of this test's own.
#[tokio::test]
async fn a_prefix_is_deleted_at_once_and_its_big_keys_freed_off_the_main_thread() {
    let redis = PrivateRedis::start().await.expect("a private Redis");
    let (pool, mut observer) = pool_and_observer(&redis.url()).await;
    let members: Vec<u32> = (0..10_000).collect();
    for chunk in 0..10 {
        let () = redis::cmd("SADD")
            .arg("t:big")
            .arg(
                members
                    .iter()
                    .map(|m| m + chunk * 10_000)
                    .collect::<Vec<_>>(),
            )
            .query_async(&mut observer)
            .await
            .expect("SADD");
    }
    let () = redis::cmd("SET")
        .arg("t:small")
        .arg(1)
        .query_async(&mut observer)
        .await
        .expect("SET");
    let () = redis::cmd("SET")
        .arg("other:key")
        .arg(1)
        .query_async(&mut observer)
        .await
        .expect("SET");
    pool.delete_under("t").await.expect("delete_under");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut observer)
        .await
        .expect("KEYS");
    assert_eq!(left, ["other:key"]);
    let lazyfreed = |memory: &str| {
        memory
            .lines()
            .find_map(|line| line.strip_prefix("lazyfreed_objects:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    crate::helpers::eventually(
        Duration::from_secs(5),
        "the big set freed off the main thread",
        || {
            let url = redis.url();
            async move {
                let memory: String = redis::cmd("INFO")
                    .arg("memory")
                    .query_async(&mut crate::helpers::redis_at(&url).await)
                    .await
                    .unwrap_or_default();
                lazyfreed(&memory) == Some(1)
            }
        },
    )
    .await;
}
