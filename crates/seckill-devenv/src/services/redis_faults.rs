//! What a fault does to a running Redis node's connections, from outside:
//! its replicas' links cut, or its clients' connections dropped again and
//! again. For the failover tests and the chaos run, on one server under
//! Sentinel or a node of a cluster alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;

/// Cut the links of the primary at `url` to its replicas (`CLIENT KILL
/// TYPE replica`): a replica so cut, frozen beforehand, cannot catch up
/// with what the primary takes next.
pub async fn cut_replicas_off(url: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query_async::<()>(&mut conn)
        .await
        .with_context(|| format!("cutting {url}'s replicas off"))
}

/// A task that makes the node at `url` drop every client connection
/// (`CLIENT KILL TYPE normal`, its own excepted) every `every`: what a
/// flaky network or a proxy that restarts does to clients. Its replicas'
/// links are not touched. Stop it with [`DroppingClients::stop`].
pub fn drop_clients(url: &str, every: Duration) -> DroppingClients {
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn({
        let (stop, url) = (stop.clone(), url.to_owned());
        async move {
            let client = redis::Client::open(url.as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let mut rounds = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // Every connection but this one (SKIPME is the default).
                let killed: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .query_async(&mut conn)
                    .await;
                rounds += u32::from(killed.is_ok_and(|n| n > 0));
                tokio::time::sleep(every).await;
            }
            Ok(rounds)
        }
    });
    DroppingClients { stop, task }
}

/// The task [`drop_clients`] started.
#[derive(Debug)]
pub struct DroppingClients {
    /// Set to stop the task; an atomic, not a channel, because the task
    /// only looks at it between two kills.
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<u32>>,
}

impl DroppingClients {
    /// Stop dropping; returns how many of its kills dropped at least one
    /// connection.
    pub async fn stop(self) -> anyhow::Result<u32> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.context("the connection dropper panicked")?
    }
}
