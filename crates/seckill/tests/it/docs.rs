//! The README and `docs/` cannot rot: every command they show, in a shell
//! block or in inline code, is run by a test, here or elsewhere, or says
//! here why it is not. (The workshop guide's commands are all run, by
//! `workshop.rs`.)
//!
//! A command is accounted for whole: a line of [`ACCOUNTED`] stands for
//! that command with those arguments, so a new flag on a documented
//! command fails
//! `every_command_of_the_readme_and_docs_is_run_or_says_why_not` until it
//! is given a line; a line there that no page uses any more fails it too.
//! Every test a reason names must exist
//! (`every_test_a_reason_names_exists`), and a reason that names none says
//! why the command is not run.

use std::collections::BTreeSet;
use std::path::Path;

use crate::helpers::{Scratch, loadtest_command, repo_root, seckill_command};
use crate::processes::{finish, interrupt, start_until_within, text};

/// Each command of the pages, whole (a shell block's line without its
/// comment, its `\` continuations joined; an inline command as written),
/// and the test that runs it or why none does: "not run: …". The
/// storefront's curl walk is not listed line by line:
/// `docs::the_storefront_walk_runs_as_written_against_serve` runs that
/// block whole ([`walk`]).
const ACCOUNTED: &[(&[&str], &str)] = &[
    (
        &["cargo run --release -- demo"],
        "workshop::every_command_of_the_workshop_guide_runs_and_ends_well runs the demo (step 1 of docs/workshop.md), and loadtest_demo::the_demo_runs_both_strategies_side_by_side_and_exits_0 its parts",
    ),
    (
        &["cargo run --release"],
        "the README's first build, named in prose; workshop::every_command_of_the_workshop_guide_runs_and_ends_well runs the demo it builds",
    ),
    (
        &[
            "cargo build --release",
            "cargo build --release --no-default-features",
        ],
        "not run: a build, with and without the tools; `cargo test --workspace` builds the same code (with the tools, in the test profile)",
    ),
    (
        &["cargo run --release -- reset"],
        "room::reset_deletes_every_sale_order_and_key_only_when_told_yes",
    ),
    (
        &["cargo test --workspace"],
        "the command that runs this very test",
    ),
    (
        &[
            "cargo test --workspace --lib",
            "cargo test -p seckill --test it",
            "cargo test -p seckill --test it payment",
            "cargo test -p seckill --test it -- lock:: lock_wait::",
            "cargo test -p seckill --test it -- --exact sale_status::the_index_lists_live_sales_then_upcoming_then_ended",
        ],
        "not run: parts of `cargo test --workspace` (the command that runs this very test), picked by cargo's own filters",
    ),
    (
        &[
            "cargo fmt --all --check",
            "cargo clippy --workspace --all-targets -- -D warnings",
        ],
        "not run: CI's checks before the tests (.ci/run), not tests",
    ),
    (
        &["cargo run --release -- bench"],
        "bench::the_bench_measures_each_row_beside_its_target runs every row on shorter settings; the whole bench takes about 10 minutes on two cores",
    ),
    (
        &[
            "cargo run --release -- bench --only room",
            "cargo run --release -- bench --only room --only ended",
            "seckill bench --only accepted",
            "seckill bench --only burst",
            "seckill bench --only drain",
            "seckill bench --only ended",
            "seckill bench --only pages",
            "seckill bench --only replica",
            "seckill bench --only sold-out",
            "seckill bench --only burst --memory-buyers 10000",
            "seckill bench --only room --room-buyers 100000",
            "seckill bench --only room-scripts --room-buyers N",
            "cargo run --release -- bench --only room-scripts --room-buyers 1000000",
            "target/debug/seckill bench --only replica --secs 5",
        ],
        "bench::the_bench_measures_each_row_beside_its_target runs every row, on shorter settings; bench::the_bench_measures_only_the_rows_asked_for runs `--only`",
    ),
    (
        &["cargo run --release -- bench --only capacity"],
        "bench::the_capacity_rows_give_each_process_its_cpu_per_purchase runs it with 4,000 requests a run; bench::the_bench_measures_each_row_beside_its_target with 500",
    ),
    (
        &[
            "cargo run --release -- bench --json before.json",
            "cargo run --release -- bench --compare before.json",
        ],
        "bench::the_bench_compares_only_with_a_run_it_can_read runs --json, then --compare with the run it wrote, and with a missing and a garbled file",
    ),
    (
        &["seckill bench --help", "seckill <command> --help"],
        "not run: clap prints the flags from the definitions the commands parse; docs::the_load_tests_help_runs_as_written runs one such help",
    ),
    (
        &["redis-cli --scan --pattern 'seckill:bench-<pid>_<tag>:*' | xargs redis-cli del"],
        "not run: the clean-up by hand after a bench killed with SIGKILL; bench::an_interrupted_bench_leaves_nothing_behind and bench::deleting_a_prefix_deletes_its_own_keys_only show what the bench deletes itself",
    ),
    (
        &[
            "seckill-loadtest --spawn N --scenario closed --connections 64 --duration 5 --users 10000000 --stock 1000000 --dup 0 --expect observe",
            "seckill-loadtest --target ... --scenario closed --connections 64 --duration 5 --users 10000000 --stock 1000000 --dup 0 --expect observe",
            "seckill-loadtest --spawn 1 --users 10000",
            "seckill serve --strategy lua",
        ],
        "not run: the commands of past measurements, kept as history (docs/bench-history.md); loadtest::the_closed_and_rate_scenarios_keep_the_promise_too runs the closed scenario",
    ),
    (
        &["seckill serve --no-worker"],
        "chaos::every_fault_keeps_the_promise_in_a_short_chaos_run runs its instances so, beside workers of their own",
    ),
    (
        &["cargo run --release -- chaos"],
        "chaos::every_fault_keeps_the_promise_in_a_short_chaos_run runs every fault on a shorter schedule; the default run takes minutes",
    ),
    (
        &[
            "cargo run --release -- chaos --compare-durability --duration-secs 15 --rate 500 --users 9000 --stock 8000",
        ],
        "chaos::a_failover_takes_back_202s_under_local_durability_and_none_under_replica runs it with fewer buyers, a lower rate and a shorter run",
    ),
    (
        &[
            "cargo run --release -- chaos --fault redis-failover --redis-durability replica --duration-secs 15 --rate 500 --users 9000 --stock 8000",
            "cargo run --release -- chaos --fault redis-failover --redis-durability local --duration-secs 15 --rate 500 --users 9000 --stock 8000",
            "seckill chaos --fault redis-failover",
            "seckill chaos --compare-durability",
        ],
        "not run as written (a failover run on sentinels each): --compare-durability makes these two runs one after the other, the durability set by its environment variable rather than this flag, and chaos::a_failover_takes_back_202s_under_local_durability_and_none_under_replica runs that, shorter",
    ),
    (
        &[
            "cargo run --release -- chaos --cluster --compare-durability --duration-secs 45 --rate 300 --users 15000 --stock 8000",
            "target/debug/seckill chaos --cluster --compare-durability --duration-secs 45 --rate 300 --users 15000 --stock 8000",
            "seckill chaos --cluster --compare-durability",
            "seckill chaos --cluster",
        ],
        "not run as written (two runs of a minute each on nine Redis nodes): chaos_cluster::on_a_cluster_with_replicas_a_failover_and_a_stall_take_back_no_202 runs two of its four faults under replica, shorter",
    ),
    (
        &["seckill-loadtest --faults [NAME ...] --users N --stock N --rate R --duration SECS"],
        "chaos::the_load_test_runs_the_same_chaos_scenario_with_faults, with one fault and small figures",
    ),
    (
        &["cargo run --release -- crowd"],
        "crowd::the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order, with a smaller crowd",
    ),
    (
        &["seckill demo --waiting-room"],
        "room::the_demo_waits_for_enter_before_its_race_and_prints_orders_to_pay runs the demo; not run with --waiting-room: crowd::the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order runs the rooms under a crowd",
    ),
    (
        &[
            "seckill sale create --waiting-room fifo|lottery [--admit-per-sec 50] [--max-active 100] [--admission-secs 120]",
        ],
        "waiting_room_made::sale_create_puts_a_room_in_front_and_refuses_bad_room_settings",
    ),
    (
        &["cargo run --release -- lab --exit"],
        "lab::the_lab_runs_every_row_as_expected_and_exits_0",
    ),
    (
        &["redis-cli -u ... PTTL"],
        "not run: the command the lab prints for the reader to look at a lock; lab::the_lab_runs_every_row_as_expected_and_exits_0 checks the TTLs the lab reads",
    ),
    (
        &["seckill-loadtest --spawn"],
        "loadtest::a_burst_on_two_spawned_instances_sells_each_unit_once_and_reports_it",
    ),
    (
        &["SECKILL_ADMIN_TOKEN=correct-horse-battery cargo run --release -- serve"],
        "docs::the_storefront_walk_runs_as_written_against_serve (here), on a port of its own",
    ),
    (
        &["target/release/seckill-loadtest --help"],
        "docs::the_load_tests_help_runs_as_written (here, on the debug build)",
    ),
    (
        &[
            "target/release/seckill-loadtest --spawn 2 --users 10000 --json run.json --html run.html",
        ],
        "loadtest::a_burst_on_two_spawned_instances_sells_each_unit_once_and_reports_it, with fewer buyers",
    ),
    (
        &["target/release/seckill-loadtest --spawn 2 --strategy naive --expect oversell"],
        "loadtest::the_naive_strategy_oversells_and_only_passes_when_that_is_expected",
    ),
    (
        &[
            "target/release/seckill-loadtest --target http://127.0.0.1:8080 --target http://127.0.0.1:8081",
        ],
        "needs instances the reader started on 8080 and 8081; loadtest::a_second_run_on_an_existing_sale_counts_the_units_sold_before_it runs --target against instances of its own",
    ),
    (
        &[
            "target/release/seckill-loadtest --spawn 2 --scenario rate --rate 5000 --duration 10 --users 50000 --connections 256",
        ],
        "loadtest::the_closed_and_rate_scenarios_keep_the_promise_too, with a lower rate",
    ),
    (
        &[
            "target/release/seckill-loadtest --target http://127.0.0.1:18080 --sale $SALE --scenario closed --connections 64 --duration 10",
        ],
        "needs the reader's sold-out sale on port 18080; loadtest::the_closed_and_rate_scenarios_keep_the_promise_too runs the closed scenario",
    ),
    (
        &[
            "wrk -t2 -c64 -d10s -s crates/seckill-loadtest/bench/wrk-purchase.lua http://127.0.0.1:18080/api/sales/$SALE/purchase",
        ],
        "needs the reader's sold-out sale on port 18080; the bench runs wrk with the same script against its own instances (bench::the_bench_measures_each_row_beside_its_target)",
    ),
    (
        &[
            "for port in 7000 7001 7002; do",
            "mkdir -p /tmp/seckill-cluster/$port",
            "redis-server --port $port --cluster-enabled yes --cluster-config-file nodes.conf --dir /tmp/seckill-cluster/$port --save '' --appendonly no --daemonize yes",
            "done",
            "redis-cli --cluster create 127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002 --cluster-replicas 0 --cluster-yes",
            "redis-cli --cluster create",
            "redis-server --cluster-enabled yes",
            "export SECKILL_REDIS_CLUSTER_NODES=redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002",
            "cargo run --release -- demo --exit",
            "redis-cli -p 7000 shutdown nosave",
        ],
        "not run as written: takes the fixed ports 7000-7002 of the reader's machine; cluster::a_two_instance_burst_on_sales_spread_over_three_masters_sells_each_unit_once starts a 3-master cluster the same way on free ports (seckill-devenv's services/redis_cluster.rs) and runs a burst on it",
    ),
    (
        &[
            "export SECKILL_REDIS_SENTINELS=redis://127.0.0.1:26379,redis://127.0.0.1:26380,redis://127.0.0.1:26381",
            "export SECKILL_REDIS_MASTER_NAME=mymaster",
            "export SECKILL_REDIS_DURABILITY=replica",
            "cargo run --release -- serve",
        ],
        "not run as written: names the reader's sentinels; sentinel::with_replica_durability_a_failover_takes_back_no_202 runs the app with replica durability on a private primary, replica and three sentinels (seckill-devenv's services/redis_sentinel.rs)",
    ),
    (
        &[
            "SECKILL_REDIS_URL=redis://127.0.0.1:6390 SECKILL_REDIS_DURABILITY=<d> target/debug/seckill-loadtest --stock 10000 --users 10000 --dup 0",
        ],
        "not run: the command of a past measurement on the reader's Redis with a replica; cluster::on_a_cluster_with_replicas_a_202_waits_for_a_replica runs replica durability",
    ),
    (
        &[
            "docker compose up -d",
            "docker compose up -d redis postgres",
            "docker compose --profile monitoring up -d",
            "docker compose run --rm app demo --exit --report-dir /tmp/seckill-demo",
        ],
        "not run: needs a Docker engine, which the development machine has not; dashboard::prometheus_scrapes_the_compose_app_and_grafana_is_given_the_dashboard and cli::the_compose_file_starts_the_app_only_with_an_admin_token read the compose file",
    ),
];

/// The programs whose inline code is a command: these, or a binary of
/// `target/<profile>/`, after any `NAME=value` words.
const PROGRAMS: [&str; 8] = [
    "cargo",
    "docker",
    "redis-cli",
    "redis-server",
    "curl",
    "wrk",
    "seckill",
    "seckill-loadtest",
];

/// A page's shell blocks (```sh, ```bash), each as its commands: comment
/// lines, blank lines and trailing comments left out, a line ending in
/// `\` joined with the next.
fn shell_blocks(page: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut block: Option<Vec<String>> = None;
    let mut continued = String::new();
    for line in page.lines() {
        let trimmed = line.trim();
        match (&mut block, trimmed) {
            (None, "```sh" | "```bash" | "```shell" | "```console") => block = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(block.take()),
            (Some(lines), command) if !command.is_empty() && !command.starts_with('#') => {
                let command = without_comment(command);
                match command.strip_suffix('\\') {
                    Some(first) => {
                        continued.push_str(first.trim_end());
                        continued.push(' ');
                    }
                    None => lines.push(std::mem::take(&mut continued) + command),
                }
            }
            _ => {}
        }
    }
    blocks
}

/// A shell line without its trailing comment: a `#` after a blank, outside
/// quotes.
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match quote {
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && previous.is_whitespace() => return line[..at].trim_end(),
            None => {}
        }
        previous = c;
    }
    line
}

/// The commands of a page's inline code outside its fenced blocks: a span
/// (line breaks in it read as blanks) that, after any `NAME=value` words,
/// starts with one of [`PROGRAMS`] or `target/<profile>/<binary>` and has
/// an argument that starts with `-`. (A program named alone, such as
/// `seckill chaos` in a sentence, names the tool, not a command line.)
fn inline_commands(page: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|span| span.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|span| is_command(span))
        .collect()
}

fn is_command(span: &str) -> bool {
    let mut words = span.split(' ').peekable();
    // `NAME=value` words first; a value `$(…)` may hold blanks.
    while let Some(word) = words.next_if(|word| {
        word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
    }) {
        if word.contains("$(") && !word.contains(')') {
            for inside in words.by_ref() {
                if inside.contains(')') {
                    break;
                }
            }
        }
    }
    let Some(program) = words.next() else {
        return false;
    };
    let binary = program
        .strip_prefix("target/release/")
        .or_else(|| program.strip_prefix("target/debug/"))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'));
    (PROGRAMS.contains(&program) || binary) && words.any(|word| word.starts_with('-'))
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

/// Every command of the README and `docs/` (but the workshop guide), each
/// as `(page, command)`.
fn documented_commands() -> Vec<(String, String)> {
    let mut commands = Vec::new();
    for (name, page) in pages() {
        let mut blocks = shell_blocks(&page);
        if name == "docs/storefront.md" {
            let walked = walk(&blocks).expect("the storefront page has its curl walk");
            blocks.remove(walked);
        }
        for command in blocks.into_iter().flatten().chain(inline_commands(&page)) {
            commands.push((name.clone(), command));
        }
    }
    commands
}

#[test]
fn every_command_of_the_readme_and_docs_is_run_or_says_why_not() {
    let accounted: Vec<&str> = ACCOUNTED
        .iter()
        .flat_map(|(lines, _)| lines.iter().copied())
        .collect();
    let twice: Vec<&&str> = accounted
        .iter()
        .enumerate()
        .filter(|(at, line)| accounted[..*at].contains(line))
        .map(|(_, line)| line)
        .collect();
    assert!(twice.is_empty(), "accounted for twice: {twice:?}");
    let mut used = BTreeSet::new();
    let mut unaccounted = Vec::new();
    for (page, command) in documented_commands() {
        if accounted.contains(&command.as_str()) {
            used.insert(command);
        } else {
            unaccounted.push(format!("{page}: {command}"));
        }
    }
    assert!(
        unaccounted.is_empty(),
        "commands no test runs and nothing says why (a line of ACCOUNTED is one whole command): {unaccounted:#?}"
    );
    let stale: Vec<&str> = accounted
        .into_iter()
        .filter(|line| !used.contains(*line))
        .collect();
    assert!(
        stale.is_empty(),
        "no page has these commands any more: {stale:?}"
    );
}

/// The tests a reason names (`file::test_name`, a file of this binary),
/// each must exist; a reason that names none says why nothing runs it.
#[test]
fn every_test_a_reason_names_exists() {
    let dir = repo_root().join("crates/seckill/tests/it");
    let mut missing = Vec::new();
    for (lines, reason) in ACCOUNTED {
        let named = test_names(reason);
        if named.is_empty()
            && !reason.starts_with("not run")
            && !reason.starts_with("the command that runs this very test")
        {
            missing.push(format!(
                "{lines:?}: names no test and does not say \"not run: why\""
            ));
        }
        for (file, test) in named {
            let source =
                std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap_or_default();
            let defined = source.contains(&format!("fn {test}("));
            let a_test = source
                .split(&format!("fn {test}("))
                .next()
                .is_some_and(|before| {
                    before
                        .trim_end()
                        .lines()
                        .rev()
                        .take(3)
                        .any(|line| line.contains("#[tokio::test") || line.contains("#[test]"))
                });
            if !(defined && a_test) {
                missing.push(format!("{file}::{test} (for {lines:?})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "reasons naming tests that do not exist: {missing:#?}"
    );
}

/// The `file::test` names in a reason: two words of Rust's characters
/// joined by `::`, the second lower-case (a test's name, not a type).
fn test_names(reason: &str) -> Vec<(String, String)> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    reason
        .split(|c: char| !(word(c) || c == ':'))
        .filter_map(|token| token.split_once("::"))
        .filter(|(file, test)| {
            !file.is_empty()
                && !test.is_empty()
                && test.chars().all(word)
                && test.starts_with(|c: char| c.is_ascii_lowercase())
        })
        .map(|(file, test)| (file.to_owned(), test.to_owned()))
        .collect()
}

/// The scanners find what they are for: a whole line without its comment,
/// a continued line joined, inline commands (flags, `NAME=value` first,
/// across a line break), and not a program named in a sentence.
#[test]
fn the_scanner_reads_whole_commands_from_blocks_and_inline_code() {
    let page = "Run `cargo run --release -- chaos --fault redis-failover\n--redis-durability replica` or `SECKILL_ADMIN_TOKEN=$(openssl rand -hex 16) docker compose up -d`;\n\
                `seckill chaos` is the tool, `target/seckill-chaos/` a folder.\n\n\
                ```sh\n# a comment\nredis-server --port 1 \\\n  --daemonize yes   # in the background\ncurl -s 'http://x/#top'\n```\n\n\
                ```text\n`cargo run -- not-a-command --x`\n```\n";
    assert_eq!(
        shell_blocks(page),
        [vec![
            "redis-server --port 1 --daemonize yes".to_owned(),
            "curl -s 'http://x/#top'".to_owned(),
        ]]
    );
    assert_eq!(
        inline_commands(page),
        [
            "cargo run --release -- chaos --fault redis-failover --redis-durability replica",
            "SECKILL_ADMIN_TOKEN=$(openssl rand -hex 16) docker compose up -d",
        ]
    );
    assert_eq!(
        test_names("a::b_c runs it; seckill-devenv's services/x.rs; Foo::Bar; c::d, shorter"),
        [
            ("a".to_owned(), "b_c".to_owned()),
            ("c".to_owned(), "d".to_owned())
        ]
    );
}

/// docs/testing.md's table of files lists every file of this test binary,
/// and names no file it does not have.
#[test]
fn the_testing_page_lists_every_test_file() {
    let dir = repo_root().join("crates/seckill/tests/it");
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("the tests").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") {
            files.insert(name);
        } else if entry.path().is_dir() {
            for inner in std::fs::read_dir(entry.path()).expect("a folder").flatten() {
                files.insert(format!("{name}/{}", inner.file_name().to_string_lossy()));
            }
        }
    }
    let page = read(&repo_root().join("docs/testing.md"));
    let named: BTreeSet<String> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.ends_with(".rs") && !span.contains(' '))
        .map(str::to_owned)
        .collect();
    let unlisted: Vec<&String> = files.iter().filter(|file| !named.contains(*file)).collect();
    assert!(
        unlisted.is_empty(),
        "docs/testing.md does not list {unlisted:?}"
    );
    let gone: Vec<&String> = named
        .iter()
        .filter(|file| !file.contains('/') || file.starts_with("helpers/"))
        .filter(|file| !files.contains(*file))
        .collect();
    assert!(
        gone.is_empty(),
        "docs/testing.md lists files the tests do not have: {gone:?}"
    );
}

/// docs/storefront.md's walk, as written: `serve` with the page's admin
/// token (on a port of its own, not 8080, so that tests can run side
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
    let order = lines[1].split('"').nth(3).expect("the order id");
    assert!(
        lines[2].contains(r#"{"error":"already_purchased""#)
            && lines[2].contains(&format!(r#""order_id":"{order}""#))
            && lines[2].ends_with(" 409"),
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
