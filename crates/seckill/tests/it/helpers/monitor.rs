//! Redis' `MONITOR` feed, for the tests that must see a command that
//! leaves nothing behind to read afterwards: a key created without a TTL
//! and given one a moment later, a worker's pass that looked at an empty
//! queue. Redis hands over every command it runs, in order, the commands
//! of scripts included, so nothing falls between two reads. (The lab's
//! lock watch, `seckill-tools/src/lab/watch.rs`, reads it the same way:
//! both take its lines apart with `seckill_devenv::monitor`.)
//!
//! The feed carries every client's commands, the other tests' too: only
//! the lines that contain the test's needle (one of its own keys) are kept.

use std::time::Duration;

use futures_util::StreamExt;
use seckill_devenv::monitor::{arguments, is_echo_of};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

/// A running `MONITOR` on one server; it stops when dropped.
pub struct Monitor {
    url: String,
    /// The argument of the `ECHO` that [`Monitor::until_now`] sends: once
    /// the feed shows it, it has shown every command run before it.
    marker: String,
    /// The commands kept, as their arguments, in the order Redis ran them.
    commands: mpsc::UnboundedReceiver<Vec<String>>,
    /// The reading task, aborted with the monitor.
    _task: AbortOnDropHandle<()>,
}

impl Monitor {
    /// Watch the commands of the server at `url` whose line contains
    /// `needle` (a key of printable ASCII, as the tests' are, appears in
    /// the line as it is written). Returns once Redis has confirmed
    /// `MONITOR`: every command it runs from then on is seen.
    pub async fn start(url: &str, needle: &str) -> Self {
        let monitor = redis::Client::open(url)
            .expect("a Redis URL")
            .get_async_monitor()
            .await
            .expect("MONITOR");
        let marker = format!("seckill-test-monitor:{}", uuid::Uuid::new_v4().simple());
        let (sender, commands) = mpsc::unbounded_channel();
        let task = tokio::spawn({
            let (needle, marker) = (needle.to_owned(), marker.clone());
            async move {
                let mut feed = monitor.into_on_message::<String>();
                while let Some(line) = feed.next().await {
                    if (line.contains(&needle) || line.contains(&marker))
                        && sender.send(arguments(&line)).is_err()
                    {
                        return;
                    }
                }
            }
        });
        Self {
            url: url.to_owned(),
            marker,
            commands,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// The next command kept; panics when none comes within `limit`.
    pub async fn next(&mut self, limit: Duration) -> Vec<String> {
        tokio::time::timeout(limit, self.commands.recv())
            .await
            .unwrap_or_else(|_| panic!("no command seen in {limit:?}"))
            .expect("the MONITOR feed ended")
    }

    /// Every command kept from the start (or the last call) up to now, in
    /// the order Redis ran them.
    pub async fn until_now(&mut self) -> Vec<Vec<String>> {
        let _: String = redis::cmd("ECHO")
            .arg(&self.marker)
            .query_async(&mut super::redis_at(&self.url).await)
            .await
            .expect("ECHO");
        let mut seen = Vec::new();
        loop {
            let command = self.next(Duration::from_secs(30)).await;
            if is_echo_of(&command, &self.marker) {
                return seen;
            }
            seen.push(command);
        }
    }
}
