//! The Redis pool's check of the connections it hands out
//! (`src/redis_pool/recycle_check.rs`): skipped for a connection that answered
//! just now, made for one idle longer and for every one that answered
//! before a connection to the same server, in any pool, was found closed;
//! a closed one is never handed out again. And the pool's deletion of a
//! prefix's keys (`RedisPool::delete_under`, what `reset`, the bench and
//! the tests clean up with).

use std::time::{Duration, Instant};

use seckill_core::redis_pool::{RedisAt, RedisConn, RedisPool, TRUSTED_FOR};
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

/// Redis closing a connection that has just answered (as a restart closes
/// them all): the command that finds it fails, the others are checked
/// before they are trusted again, and that one is never handed out again.
#[tokio::test]
async fn a_connection_closed_under_the_pool_fails_once_and_the_pool_checks_the_rest() {
    // A server of its own: what it kills makes no other test's pool check.
    let redis = PrivateRedis::start().await.expect("a private Redis");
    // Each step counts on the connections' last answers being less than
    // TRUSTED_FOR old: on a machine too busy for that, the try says
    // nothing and is made again.
    for _ in 0..5 {
        let (pool, mut observer) = pool_and_observer(&redis.url()).await;
        // Two connections, each having answered; `killed` goes back first
        // and so comes out first (the pool's queue is first in, first out).
        let (mut other, mut killed) = (pool.get().await.expect("a"), pool.get().await.expect("b"));
        let answered = Instant::now();
        let other_id = client_id(&mut other).await.expect("CLIENT ID");
        let killed_id = client_id(&mut killed).await.expect("CLIENT ID");
        drop(killed);
        drop(other);
        kill(&mut observer, killed_id).await;
        // It answered a moment ago, so it is handed out unchecked, and the
        // command sent on it fails: the price of not checking.
        let first = next_id(&pool).await;
        // The other answered before that failure: checked first.
        drop(pool.get().await.expect("a connection"));
        let other_last = last_command(&mut observer, other_id).await;
        if answered.elapsed() >= TRUSTED_FOR {
            continue;
        }
        assert!(first.is_err(), "the closed connection answered: {first:?}");
        assert_eq!(other_last, "ping");
        // The closed one is not handed out again: every command works.
        for _ in 0..3 {
            next_id(&pool).await.expect("a working connection");
        }
        return;
    }
    panic!("every try took longer than TRUSTED_FOR");
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
