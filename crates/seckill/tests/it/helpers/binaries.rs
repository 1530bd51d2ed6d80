//! The real binaries, started on a test's database and key prefix:
//! `seckill` and `seckill-loadtest` as single commands or as a cluster of
//! processes, and this test binary again, as a second process a test can
//! run beside itself or kill.

use std::process::Stdio;

use seckill_devenv::processes::{Deployment, Fleet};

use super::{ADMIN_TOKEN, Scratch, client};

/// The scratch database and prefix as a deployment of the real `seckill`
/// binary, with the tests' admin token and `env` added.
fn deployment(scratch: &Scratch, env: &[(&str, &str)]) -> Deployment {
    let deployment = Deployment::new(
        env!("CARGO_BIN_EXE_seckill"),
        &scratch.redis,
        &scratch.database_url,
        &scratch.prefix,
    )
    .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN);
    env.iter().fold(deployment, |deployment, (name, value)| {
        deployment.env(name, *value)
    })
}

/// An empty cluster of `seckill` processes on the scratch database and prefix.
pub fn cluster(scratch: &Scratch, env: &[(&str, &str)]) -> Fleet {
    Fleet::new(deployment(scratch, env))
}

/// `seckill <args>` (the real binary) on the scratch database and prefix.
pub fn seckill_command(
    scratch: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    deployment(scratch, env).command(args)
}

/// `seckill-loadtest <args>` (the real binary) on the scratch database and prefix.
pub fn loadtest_command(
    scratch: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    deployment(scratch, env)
        .with_binary(env!("CARGO_BIN_EXE_seckill-loadtest"))
        .command(args)
}

/// Start this test binary again, running only `test` (its full path, such as
/// `lock::some_test`), with `env` set. Tests use it to get a second process
/// that they can run beside themselves, or kill.
pub fn spawn_this_test(test: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting a child test process")
}

/// Create a sale of `stock` units through the admin API of the instance at
/// `url` (a `seckill serve` process); returns its id.
pub async fn create_sale_at(url: &str, name: &str, stock: i64) -> i64 {
    create_sale_with_at(
        url,
        &serde_json::json!({"name": name, "stock": stock, "price_cents": 99_900}),
    )
    .await
}

/// Create the sale `body` describes (`POST /api/sales`'s body) through the
/// admin API of the instance at `url`; returns its id.
pub async fn create_sale_with_at(url: &str, body: &serde_json::Value) -> i64 {
    let created: serde_json::Value = client()
        .post(format!("{url}/api/sales"))
        .bearer_auth(ADMIN_TOKEN)
        .json(body)
        .send()
        .await
        .expect("POST /api/sales")
        .json()
        .await
        .expect("a sale");
    created["id"].as_i64().expect("a sale id")
}

/// Start app instance `name` without a worker, and a stand-alone worker
/// beside it; returns the instance's base URL.
pub async fn start_app_and_a_worker(processes: &mut Fleet, name: &str) -> String {
    let url = processes
        .start_app(name, &["--no-worker"])
        .await
        .expect("the instance starts");
    processes
        .start_worker("worker", &[])
        .await
        .expect("the worker starts");
    url
}
