//! The README and `docs/` cannot rot: every command of their shell blocks
//! is run by a test, here or elsewhere, or says here why it is not. (The
//! workshop guide's commands are all run, by `workshop.rs`.)
//!
//! A command added to a page fails
//! `every_command_of_the_readme_and_docs_is_run_or_says_why_not` until it
//! is given a line in [`ACCOUNTED`]; a line there that no page uses any
//! more fails it too.

use std::path::Path;

use crate::helpers::{Scratch, loadtest_command, repo_root, seckill_command};
use crate::processes::{finish, interrupt, start_until_within, text};

/// Each command of the pages (by how it starts), and the test that runs
/// it or why none does. The storefront's curl walk is not listed line by
/// line: `the_storefront_walk_runs_as_written_against_serve` runs that
/// block whole ([`walk`]).
const ACCOUNTED: &[(&str, &str)] = &[
    (
        "cargo run --release -- demo     #",
        "workshop::every_command_of_the_workshop_guide_runs_and_ends_well runs the demo (step 1 of docs/workshop.md), and loadtest_demo.rs its parts",
    ),
    (
        "cargo test --workspace",
        "the command that runs this very test",
    ),
    (
        "cargo run --release -- bench",
        "bench::the_bench_measures_each_row_beside_its_target runs every row on shorter settings; the whole bench takes about 10 minutes on two cores",
    ),
    (
        "cargo run --release -- chaos --fault redis-failover",
        "chaos::a_failover_takes_back_202s_under_local_durability_and_none_under_replica runs both, shorter, with --compare-durability",
    ),
    (
        "cargo run --release -- chaos --compare-durability",
        "chaos::a_failover_takes_back_202s_under_local_durability_and_none_under_replica, shorter",
    ),
    (
        "cargo run --release -- crowd",
        "crowd::the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order, with a smaller crowd",
    ),
    (
        "cargo run --release -- chaos",
        "chaos::every_fault_keeps_the_promise_in_a_short_chaos_run runs every fault on a shorter schedule; the default run takes minutes",
    ),
    (
        "cargo run --release -- lab --exit",
        "lab::the_lab_runs_every_row_as_expected_and_exits_0",
    ),
    (
        "SECKILL_ADMIN_TOKEN=correct-horse-battery cargo run --release -- serve",
        "docs::the_storefront_walk_runs_as_written_against_serve (here), on a port of its own",
    ),
    (
        "target/release/seckill-loadtest --help",
        "docs::the_load_tests_help_runs_as_written (here, on the debug build)",
    ),
    (
        "target/release/seckill-loadtest --spawn 2 --users 10000",
        "loadtest::a_burst_on_two_spawned_instances_sells_each_unit_once_and_reports_it, with fewer buyers",
    ),
    (
        "target/release/seckill-loadtest --spawn 2 --strategy naive --expect oversell",
        "loadtest::the_naive_strategy_oversells_and_only_passes_when_that_is_expected",
    ),
    (
        "target/release/seckill-loadtest --target http://127.0.0.1:8080",
        "needs instances the reader started on 8080 and 8081; loadtest::a_second_run_on_an_existing_sale_counts_the_units_sold_before_it runs --target against instances of its own",
    ),
    (
        "target/release/seckill-loadtest --spawn 2 --scenario rate",
        "loadtest::the_closed_and_rate_scenarios_keep_the_promise_too, with a lower rate",
    ),
    (
        "target/release/seckill-loadtest --target http://127.0.0.1:18080 --sale $SALE --scenario closed",
        "needs the reader's sold-out sale on port 18080; loadtest::the_closed_and_rate_scenarios_keep_the_promise_too runs the closed scenario",
    ),
    (
        "wrk -t2 -c64 -d10s -s loadtest/bench/wrk-purchase.lua",
        "needs the reader's sold-out sale on port 18080; the bench runs wrk with the same script against its own instances (bench::the_bench_measures_each_row_beside_its_target)",
    ),
    (
        "for port in 7000 7001 7002",
        "takes the fixed ports 7000-7002 of the reader's machine; cluster::a_two_instance_burst_on_sales_spread_over_three_masters_sells_each_unit_once starts a 3-master cluster the same way on free ports (seckill-devenv's services/redis_cluster.rs)",
    ),
    ("mkdir -p /tmp/seckill-cluster", "a line of the loop above"),
    ("redis-server --port $port", "a line of the loop above"),
    ("--dir /tmp/seckill-cluster", "a line of the loop above"),
    ("done", "the end of the loop above"),
    (
        "redis-cli --cluster create",
        "the cluster of the loop above; see its line",
    ),
    (
        "export SECKILL_REDIS_CLUSTER_NODES",
        "the cluster of the loop above; see its line",
    ),
    (
        "export SECKILL_REDIS_SENTINELS",
        "names the reader's sentinels; sentinel::with_replica_durability_a_failover_takes_back_no_202 runs the app on a private primary, replica and three sentinels (seckill-devenv's services/redis_sentinel.rs)",
    ),
    (
        "export SECKILL_REDIS_MASTER_NAME",
        "the sentinels' name for the primary; see the line above",
    ),
    (
        "export SECKILL_REDIS_DURABILITY",
        "sentinel::with_replica_durability_a_failover_takes_back_no_202 runs the app with it",
    ),
    (
        "cargo run --release -- serve",
        "on the sentinels above; sentinel.rs runs the same app on private ones",
    ),
    (
        "cargo run --release -- demo --exit",
        "on the cluster of the loop above; cluster::a_two_instance_burst_on_sales_spread_over_three_masters_sells_each_unit_once runs a burst on such a cluster",
    ),
];

/// A page's shell blocks (```sh, ```bash), each as its lines, comments and
/// blank lines left out.
fn shell_blocks(page: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut block: Option<Vec<String>> = None;
    for line in page.lines() {
        let trimmed = line.trim();
        match (&mut block, trimmed) {
            (None, "```sh" | "```bash" | "```shell" | "```console") => block = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(block.take()),
            (Some(lines), command) if !command.is_empty() && !command.starts_with('#') => {
                lines.push(command.to_owned());
            }
            _ => {}
        }
    }
    blocks
}

/// README.md and every page of docs/ but the workshop guide, by name.
fn pages() -> Vec<(String, String)> {
    let root = repo_root();
    let mut pages = vec![("README.md".to_owned(), read(&root.join("README.md")))];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("reading docs/")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .filter(|path| !path.ends_with("workshop.md"))
        .collect();
    docs.sort();
    for path in docs {
        let name = format!(
            "docs/{}",
            path.file_name().expect("a name").to_string_lossy()
        );
        pages.push((name, read(&path)));
    }
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The block of docs/storefront.md that the walk test runs: the first
/// with a `curl` in it.
fn walk(blocks: &[Vec<String>]) -> Option<usize> {
    blocks
        .iter()
        .position(|block| block.iter().any(|line| line.contains("curl")))
}

#[test]
fn every_command_of_the_readme_and_docs_is_run_or_says_why_not() {
    let mut used = vec![false; ACCOUNTED.len()];
    let mut unaccounted = Vec::new();
    for (name, page) in pages() {
        let mut blocks = shell_blocks(&page);
        if name == "docs/storefront.md" {
            let walked = walk(&blocks).expect("the storefront page has its curl walk");
            blocks.remove(walked);
        }
        for line in blocks.into_iter().flatten() {
            match ACCOUNTED
                .iter()
                .position(|(start, _)| line.starts_with(start))
            {
                Some(index) => used[index] = true,
                None => unaccounted.push(format!("{name}: {line}")),
            }
        }
    }
    assert!(
        unaccounted.is_empty(),
        "commands no test runs and nothing says why: {unaccounted:#?}"
    );
    let stale: Vec<&str> = ACCOUNTED
        .iter()
        .zip(used)
        .filter(|(_, used)| !used)
        .map(|((start, _), _)| *start)
        .collect();
    assert!(
        stale.is_empty(),
        "no page has these commands any more: {stale:?}"
    );
}

/// docs/storefront.md's walk, as written: `serve` with the admin token
/// `correct-horse-battery` (on a port of its own, not 8080, so that tests can run side
/// by side), then the curl block in bash, its address pointed at it.
#[tokio::test]
async fn the_storefront_walk_runs_as_written_against_serve() {
    let page = read(&repo_root().join("docs/storefront.md"));
    let blocks = shell_blocks(&page);
    let serve = blocks
        .iter()
        .flatten()
        .find(|line| line.contains("-- serve"))
        .expect("the page starts the storefront");
    let token = serve
        .split_whitespace()
        .find_map(|word| word.strip_prefix("SECKILL_ADMIN_TOKEN="))
        .expect("it sets the admin token");
    let steps = blocks[walk(&blocks).expect("the page has a curl walk")].join("\n");
    let scratch = Scratch::new().await;
    let command = seckill_command(
        &scratch,
        &["serve", "--bind", "127.0.0.1:0"],
        &[("SECKILL_ADMIN_TOKEN", token)],
    );
    let (server, address) = start_until_within(
        crate::processes::RUN_LIMIT,
        command,
        "its address",
        |line| seckill_devenv::processes::listening_url(line).map(str::to_owned),
    )
    .await;
    let script = steps.replace("http://127.0.0.1:8080", &address);
    let mut bash = tokio::process::Command::new("bash");
    bash.args(["-euo", "pipefail", "-c", &script]);
    let output = finish(bash).await;
    assert_eq!(interrupt(server).await, Some(0), "serve stops on Ctrl-C");
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(0), "{printed}");
    // What the page's `# =>` lines say each step prints.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(
        lines[0].contains(r#""stock_left":10,"#) && lines[0].contains(r#""status":"live""#),
        "{stdout}"
    );
    assert!(
        lines[1].contains(r#""status":"pending"}"#) && lines[1].ends_with(" 202"),
        "{stdout}"
    );
    assert!(
        lines[2].contains(r#"{"error":"already_purchased""#) && lines[2].ends_with(" 409"),
        "{stdout}"
    );
    assert!(lines[3].contains(r#""user_id":"ann""#), "{stdout}");
    assert!(lines[4].contains(r#""status":"paid""#), "{stdout}");
}

/// docs/loadtest.md's first command.
#[tokio::test]
async fn the_load_tests_help_runs_as_written() {
    let scratch = Scratch::new().await;
    let output = finish(loadtest_command(&scratch, &["--help"], &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--spawn",
        "--target",
        "--strategy",
        "--expect",
        "--scenario",
        "--json",
        "--html",
    ] {
        assert!(help.contains(flag), "--help does not name {flag}:\n{help}");
    }
}
