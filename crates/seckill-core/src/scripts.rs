//! Running a Lua script on the node that holds its keys, and nowhere else.
//!
//! Every script goes to Redis by its hash (`EVALSHA`). A server that does
//! not know the script (one restarted, or a replica just promoted) answers
//! `NOSCRIPT`, and the script must be loaded and called again. The redis
//! crate's own `invoke_async` loads it with a bare `SCRIPT LOAD`, which a
//! cluster client sends to every primary and counts as done only when all
//! of them answer (redis 1.8: `SCRIPT LOAD` is routed to all primaries,
//! `AllSucceeded`). The failure that prevents: a shard that lost its
//! scripts (it restarted) while another shard is stalled or down; every
//! script call to the first then failed with the second's timeout, and one
//! shard's trouble stopped the sales and the queues of another.
//!
//! Here the load rides a pipeline with the call itself: a cluster client
//! sends a pipeline whole to the node of its first command with a key
//! (`route_for_pipeline`), the script's node, and `SCRIPT LOAD` has none.
//! On one server or behind Sentinel, the pipeline is one round trip like
//! any other.

use redis::aio::ConnectionLike;
use redis::{
    ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ScriptInvocation, ServerErrorKind,
    Value,
};

/// Run `invocation` of `script`, loading the script first on the same
/// node if that node does not have it.
pub(crate) async fn run<C, T>(
    conn: &mut C,
    script: &Script,
    invocation: &ScriptInvocation<'_>,
) -> RedisResult<T>
where
    C: ConnectionLike + Send,
    T: FromRedisValue,
{
    let mut load = false;
    loop {
        let answers: Vec<RedisResult<Value>> =
            call(script, invocation, load).query_async(conn).await?;
        match answers
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(no_answer()))
        {
            Err(error) if !load && lacks_script(&error) => load = true,
            ran => return T::from_redis_value(ran?).map_err(Into::into),
        }
    }
}

/// A pipeline (errors kept one per command) that calls `invocation`, after
/// loading `script` on the same node when `load` (the load's answer is
/// ignored): the call's answer comes first. Commands added after it go to
/// the same node, on the same connection, in order.
pub(crate) fn call(
    script: &Script,
    invocation: &ScriptInvocation<'_>,
    load: bool,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    if load {
        pipe.load_script(script).ignore();
    }
    pipe.invoke_script(invocation);
    pipe
}

/// Whether `error` says the server does not have the script called.
pub(crate) fn lacks_script(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn no_answer() -> RedisError {
    RedisError::from(std::io::Error::other("no answer to the script's call"))
}
