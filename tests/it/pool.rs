//! The Redis pool's check of the connections it hands out
//! (`src/topology/trusted.rs`): skipped for a connection that answered
//! just now, made for one idle longer, and a connection that failed
//! unanswered is never handed out again.

use std::time::Duration;

use seckill::topology::{RedisAt, RedisPool, TRUSTED_FOR};

/// A pool of the test Redis server, and a connection beside it that looks
/// at the pool's clients.
async fn pool_and_observer() -> (RedisPool, redis::aio::MultiplexedConnection) {
    let redis = crate::helpers::services().await.redis.clone();
    let RedisAt::Server(url) = &redis else {
        panic!("the tests' Redis is one server");
    };
    let pool = RedisPool::new(&redis, Duration::from_secs(5)).expect("a pool");
    (pool, crate::helpers::redis_at(url).await)
}

/// The id of the connection the pool hands out next.
async fn next_id(pool: &RedisPool) -> redis::RedisResult<i64> {
    let mut conn = pool.get().await.expect("a connection");
    redis::cmd("CLIENT").arg("ID").query_async(&mut conn).await
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
    let (pool, mut observer) = pool_and_observer().await;
    // Taken again at once: no round trip of a check on the way. (A test
    // beside this one that loses a connection makes every connection of
    // the process checked once more, so this may take a few tries.)
    let mut unchecked = None;
    for _ in 0..20 {
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

/// A connection lost anywhere in the process (Redis restarting closes them
/// all): every other one is checked before it is trusted again.
#[tokio::test]
async fn after_a_connection_is_lost_the_others_are_checked_before_they_are_trusted() {
    let (pool, mut observer) = pool_and_observer().await;
    let (other, _) = pool_and_observer().await;
    let id = next_id(&pool).await.expect("CLIENT ID");
    kill(&mut observer, next_id(&other).await.expect("CLIENT ID")).await;
    // The killed one, handed out: this command finds it closed. (Or, if a
    // test beside this one lost a connection after it answered, it is
    // checked and replaced, and so is the one below.)
    let _ = next_id(&other).await;
    drop(pool.get().await.expect("a connection"));
    assert_eq!(last_command(&mut observer, id).await, "ping");
}

#[tokio::test]
async fn a_connection_killed_under_the_pool_fails_once_and_is_never_handed_out_again() {
    let (pool, mut observer) = pool_and_observer().await;
    let killed = next_id(&pool).await.expect("CLIENT ID");
    kill(&mut observer, killed).await;
    // It answered a moment ago, so it is trusted and handed out: the first
    // command on it finds the socket gone (or, if the client saw the close
    // first, it never reaches the server). Either way that connection is
    // dropped, and the next is a new one that works.
    let first = next_id(&pool).await;
    let second = next_id(&pool).await.expect("a working connection");
    assert_ne!(second, killed);
    if let Ok(first) = first {
        assert_ne!(first, killed);
    }
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
