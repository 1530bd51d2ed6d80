//! Running the real binaries to the end, and reading what they leave:
//! what the tests of the load test, the demo, the lab and the workshop
//! guide share.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::helpers::Scratch;

/// Long enough for three processes to start and a few hundred buyers to race
/// on a loaded CI machine; a hung run fails instead of hanging the suite.
pub const RUN_LIMIT: Duration = Duration::from_secs(180);

pub async fn finish(command: tokio::process::Command) -> Output {
    finish_within(RUN_LIMIT, command).await
}

/// [`finish`] for a command that is a sequence of such runs (the whole
/// lab's thirteen rows, the bench's dozen measurements), given `limit`.
pub async fn finish_within(limit: Duration, mut command: tokio::process::Command) -> Output {
    tokio::time::timeout(limit, command.output())
        .await
        .expect("the run ended in time")
        .expect("the program started")
}

pub fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("the JSON report"))
        .expect("valid JSON")
}

/// How many sales the scratch database holds.
pub async fn sale_count(scratch: &Scratch) -> i64 {
    let pg = scratch.pg().await;
    sqlx::query_scalar("SELECT count(*) FROM sales")
        .fetch_one(&pg)
        .await
        .expect("count the sales")
}

/// `(status, count)` of every order in the scratch database.
pub async fn orders_by_status(scratch: &Scratch) -> Vec<(String, i64)> {
    let pg = scratch.pg().await;
    sqlx::query_as("SELECT status, count(*) FROM orders GROUP BY status ORDER BY status")
        .fetch_all(&pg)
        .await
        .expect("orders")
}

/// Orders holding a unit in the scratch database (`confirmed`, not paid).
pub async fn confirmed_orders(scratch: &Scratch) -> i64 {
    orders_by_status(scratch)
        .await
        .into_iter()
        .filter(|(status, _)| status == "confirmed")
        .map(|(_, n)| n)
        .sum()
}

/// A long-running command, started, until it prints a line `find` picks
/// out (within [`RUN_LIMIT`]). Returns the process and what `find` made of
/// the line; panics, naming `what`, if the command ends first.
pub async fn start_until<T>(
    command: tokio::process::Command,
    what: &str,
    find: impl FnMut(&str) -> Option<T>,
) -> (tokio::process::Child, T) {
    start_until_within(RUN_LIMIT, command, what, find).await
}

/// [`start_until`] for a command that runs a sequence of runs before the
/// line (the whole lab's thirteen rows), given `limit`.
pub async fn start_until_within<T>(
    limit: Duration,
    mut command: tokio::process::Command,
    what: &str,
    mut find: impl FnMut(&str) -> Option<T>,
) -> (tokio::process::Child, T) {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mut child = command.spawn().expect("the program started");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let found = tokio::time::timeout(limit, async {
        while let Some(line) = lines.next_line().await.expect("reading stdout") {
            if let Some(found) = find(&line) {
                return found;
            }
        }
        panic!("the program ended before it printed {what}");
    })
    .await
    .unwrap_or_else(|_| panic!("the program did not print {what} in time"));
    // Keep reading: a closed pipe would fail the program's next print.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, found)
}

/// `seckill serve --bind 127.0.0.1:0 <extra>` on `scratch`, a process of
/// its own (its own metrics registry, unlike an in-process app), and a
/// store on the same database and prefix. Returns the process, its URL
/// and the store.
pub async fn serve_process(
    scratch: &crate::helpers::Scratch,
    extra: &[&str],
) -> (tokio::process::Child, String, seckill_core::store::Store) {
    let mut args = vec!["serve", "--bind", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let serve = crate::helpers::seckill_command(scratch, &args, &[]);
    let (server, url) = start_until(serve, "its address", |line| {
        line.strip_prefix("seckill listening on ")
            .map(str::to_owned)
    })
    .await;
    let redis = seckill_core::redis_pool::connect_redis(&scratch.redis, Duration::from_secs(5))
        .await
        .expect("Redis");
    let store = seckill_core::store::Store::new(scratch.pg().await, redis, scratch.prefix.clone());
    (server, url, store)
}

/// Ctrl-C, as a user at the terminal: SIGINT, then the exit code, within 30 s.
pub async fn interrupt(mut child: tokio::process::Child) -> Option<i32> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let pid = i32::try_from(child.id().expect("running")).expect("a pid");
    kill(Pid::from_raw(pid), Signal::SIGINT).expect("SIGINT");
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the program stopped in time")
        .expect("its exit status")
        .code()
}

/// Run `process` with `answer` typed on its standard input.
pub async fn answered(mut process: tokio::process::Command, answer: &str) -> std::process::Output {
    use tokio::io::AsyncWriteExt;
    process.stdin(std::process::Stdio::piped());
    let mut child = process.spawn().expect("the command started");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin
        .write_all(answer.as_bytes())
        .await
        .expect("typing the answer");
    drop(stdin);
    tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .expect("the command ended in time")
        .expect("its output")
}
