//! `seckill bench` as a process: it runs, and says what it measured.

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{RUN_LIMIT, finish, finish_within, sale_count, text};
use seckill_tools::BENCH_RUN_LOCK_CLASS as RUN_LOCK_CLASS;

/// The header line of the bench's table in `stdout`.
fn table_header(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("figure") && line.contains("measured"))
        .unwrap_or_else(|| panic!("no table:\n{stdout}"))
}

/// `seckill bench`, small: every row measured or said not to be, each
/// beside its target, and nothing of it left afterwards.
#[tokio::test]
async fn the_bench_measures_each_row_beside_its_target() {
    let _cores = crate::helpers::cores_alone().await;
    let scratch = Scratch::new().await;
    // Every group of rows but three, each tested below on its own
    // (`every_group_of_rows_has_a_test` keeps the list whole), one round of
    // each comparison: a row's figures, not their noise, are what this
    // test checks.
    let only = GROUPS_HERE.iter().flat_map(|group| ["--only", group]);
    let args: Vec<&str> = ["bench"]
        .into_iter()
        .chain(only)
        .chain([
            "--rounds",
            "1",
            "--secs",
            "0.5",
            "--burst-users",
            "200",
            "--memory-buyers",
            "600",
            "--drain-orders",
            "300",
            "--drain-orders-large",
            "600",
            "--pages",
            "200",
            "--ended-sales",
            "100",
            "--room-buyers",
            "200",
        ])
        .collect();
    let bench = seckill_command(&scratch, &args, &[])
        .spawn()
        .expect("the bench starts");
    let pid = bench.id().expect("running");
    // Every row: about a minute alone on 2 cores, two to three
    // times that on a slower machine beside the rest of the suite.
    let output = tokio::time::timeout(2 * RUN_LIMIT, bench.wait_with_output())
        .await
        .expect("the bench ended in time")
        .expect("its output");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let header = table_header(&stdout);
    for (figure, target) in [
        (
            "burst, 10 units, 2 instances: first send to last win",
            "<= 20 ms",
        ),
        ("same burst: p99 of every answer", "<= 100 ms"),
        ("accepted purchases/s on one sale, lock", ">= 8,000"),
        (
            "accepted purchases/s on one sale, lua / redis-benchmark running the script",
            ">= 80%",
        ),
        (
            "accepted purchases/s, lock, 3 sales at once: 3-master cluster vs 1 Redis",
            "measured, no target (one machine's cores)",
        ),
        (
            "accepted purchases/s on one sale, lock: --redis-durability replica vs local",
            ">= 0.7x",
        ),
        ("worker drain into PostgreSQL, orders/s", ">= 40,000"),
        (
            "worker drain / one server-side INSERT of as many rows",
            ">= 60%",
        ),
        (
            "worker drain of --drain-orders-large / one INSERT of as many rows",
            ">= 60%",
        ),
        ("idle worker: 202 to order confirmed, p50", "<= 5 ms"),
        (
            "same instances: memory of the larger after every burst (VmRSS)",
            "< 64 MiB after 100,000 buyers (here in bursts of <= 18,000)",
        ),
        (
            "accepted purchases/s, lock / sold-out answers (wrk, one instance)",
            ">= 0.50",
        ),
        (
            "accepted purchases/s, lua / sold-out answers (wrk, one instance)",
            ">= 0.50",
        ),
        (
            "sold-out answers / bare actix handler (wrk)",
            ">= 0.95, every round",
        ),
        (
            "the bundled load generator / wrk, closed loop on the bare handler",
            ">= 0.90",
        ),
        (
            "waiting room status, far back in line / sold-out answers (wrk)",
            ">= 0.80",
        ),
        (
            "waiting room status, next in line / sold-out answers (wrk)",
            ">= 0.80",
        ),
        (
            "waiting room status, admitted / sold-out answers (wrk)",
            ">= 0.80",
        ),
        (
            "a waiting room --room-buyers joined: Redis, instance VmRSS",
            "instance < 128 MiB",
        ),
        (
            "the same room's admissions/s against its admit_per_sec (100)",
            "within 5%",
        ),
        (
            "a lottery room of --room-buyers: Redis' slowest command (SLOWLOG)",
            "<= 5 ms",
        ),
        (
            "a purchase of another sale across a lottery room's open: the slowest",
            "<= 50 ms",
        ),
        (
            "accepted purchases/s on a roomed sale / an unroomed one (in-process)",
            ">= 0.95x",
        ),
        ("storefront index, 20 sales / sale page (wrk)", ">= 50%"),
        (
            "storefront index, 1,000 sales / 20 sales (wrk)",
            ">= 90% (flat)",
        ),
        (
            "open sale pages on one instance: Redis commands/s they add, RSS",
            "independent of the pages (a read per page would be pages/5 per s); < 256 MiB",
        ),
        (
            "burst while the pages watch one instance: last win (median)",
            "unchanged: <= 1.25x the burst alone",
        ),
        (
            "burst while the pages watch one instance: p99 (median)",
            "unchanged: <= 1.25x the burst alone",
        ),
        (
            "an instance's memory after ended sales: --ended-sales vs 10",
            "<= 1.25x",
        ),
        (
            "accepted purchases/s on a live sale after ended sales: --ended-sales vs 10",
            ">= 0.85x",
        ),
    ] {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(figure))
            .unwrap_or_else(|| panic!("no row {figure}:\n{stdout}"));
        let [named, measured, met, shown_target] = columns(header, line);
        assert_eq!(named, figure, "{line}");
        assert_eq!(shown_target, target, "{line}");
        // Measured, a figure with its digits; or said not to be, and then
        // judged neither way.
        let unmeasured =
            measured.starts_with("not measured") || measured.starts_with("wrk is not installed");
        if unmeasured {
            assert_eq!(met, "-", "{line}");
        } else {
            assert!(measured.contains(|c: char| c.is_ascii_digit()), "{line}");
            assert!(["yes", "NO", "-"].contains(&met), "{line}");
        }
        // A row with a target is judged: "-" only where there is none, or
        // where the run was too small to judge (the memory row's 100,000
        // buyers).
        if met == "-" && !unmeasured {
            assert!(
                target.starts_with("measured, no target") || target.contains("100,000 buyers"),
                "a row with a target left unjudged: {line}"
            );
        }
    }
    // `--rounds 1`: every row of alternated runs ran one round.
    let alternated: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains(" alternated"))
        .collect();
    assert!(
        alternated
            .iter()
            .any(|line| line.starts_with("accepted purchases/s on a roomed sale")),
        "{stdout}"
    );
    for line in alternated {
        assert!(line.contains("median of 1 alternated"), "{line}");
    }
    // The memory is read after every buyer asked for, the burst's 200 and
    // one more burst of 400 (the open-files limit allows far more at once).
    assert!(
        stdout.contains("after 600 buyers (the burst's 200, then 1 more burst of 400)"),
        "{stdout}"
    );
    // Its sales, orders and keys were its own, and are gone: the user's
    // database and keys are as they were (empty, here).
    assert_eq!(bench_databases(pid).await, 0);
    assert_eq!(sale_count(&scratch).await, 0);
    assert_eq!(keys_left(&scratch).await, Vec::<String>::new());
}

/// The groups of rows the test of every row runs.
const GROUPS_HERE: [&str; 13] = [
    "burst",
    "accepted",
    "cluster",
    "replica",
    "drain",
    "idle",
    "sold-out",
    "room",
    "room-scripts",
    "roomed",
    "index",
    "pages",
    "ended",
];
/// The groups each tested on its own, below.
const GROUPS_ALONE: [&str; 3] = ["rooms-end", "capacity", "redis-cost"];

/// Every group `seckill bench --only` takes is run by a test: the test of
/// every row, or one of its own. A group added to the bench and to
/// neither list fails here.
#[test]
fn every_group_of_rows_has_a_test() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["bench", "--help"])
        .output()
        .expect("seckill bench --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let values = help
        .split_once("--only <ONLY>")
        .and_then(|(_, after)| after.split_once("Possible values:"))
        .map(|(_, after)| after)
        .unwrap_or_else(|| panic!("no values of --only:\n{help}"));
    // The lines after "Possible values:", one a group: "- name: what".
    let mut groups: Vec<&str> = values
        .lines()
        .skip(1)
        .map(str::trim)
        .take_while(|line| line.starts_with("- "))
        .filter_map(|line| line.strip_prefix("- ")?.split_once(':'))
        .map(|(group, _)| group)
        .collect();
    let mut tested: Vec<&str> = GROUPS_HERE.iter().chain(&GROUPS_ALONE).copied().collect();
    groups.sort_unstable();
    tested.sort_unstable();
    assert_eq!(groups, tested);
}

/// The rooms-end row, and its target.
const ROOMS_END: &str = "Redis memory after --ended-rooms ended rooms of --room-buyers-each buyers";
const ROOMS_END_TARGET: &str = "<= before + 1 MiB";

/// `seckill bench --only rooms-end`, small: three rooms of 200 buyers fill
/// a private Redis, end, and are gone by Redis' own expiry; its memory is
/// back where it was.
#[tokio::test]
async fn the_rooms_end_row_finds_redis_memory_back_where_it_was() {
    let scratch = Scratch::new().await;
    let args = [
        "bench",
        "--only",
        "rooms-end",
        "--ended-rooms",
        "3",
        "--room-buyers-each",
        "200",
    ];
    let output = finish(seckill_command(&scratch, &args, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let header = table_header(&stdout);
    let line = stdout
        .lines()
        .find(|line| line.starts_with(ROOMS_END))
        .unwrap_or_else(|| panic!("no row {ROOMS_END}:\n{stdout}"));
    let [named, measured, met, target] = columns(header, line);
    assert_eq!(
        (named, met, target),
        (ROOMS_END, "yes", ROOMS_END_TARGET),
        "{line}"
    );
    assert!(measured.starts_with("3 rooms of 200 "), "{line}");
    assert!(measured.contains("at the peak"), "{line}");
    assert!(measured.contains("keys gone"), "{line}");
}

/// The capacity rows: each process' CPU per request, the idle rates taken
/// off them, and the ceilings that follow.
const CAPACITY_ROWS: [&str; 7] = [
    "capacity: an instance's CPU per request (µs)",
    "capacity: Redis' CPU per request (µs)",
    "capacity: PostgreSQL's CPU per request (µs, its processes summed)",
    "capacity: the worker's CPU per request (µs, its drain included)",
    "capacity: each one's idle CPU, taken off the above (ms per s)",
    "capacity: one sale on one Redis primary (one core): accepted purchases/s, room joins/s",
    "capacity: one PostgreSQL for the drain: orders/s per core",
];
const CAPACITY_TARGET: &str = "measured, no target (docs/capacity.md)";

/// `seckill bench --only capacity`, small: each process (an instance, Redis,
/// PostgreSQL, the worker, each its own) costs some CPU per accepted
/// purchase, the drain included, and the ceilings that follow are figures.
#[tokio::test]
async fn the_capacity_rows_give_each_process_its_cpu_per_purchase() {
    let _cores = crate::helpers::cores_alone().await;
    let scratch = Scratch::new().await;
    let args = ["bench", "--only", "capacity", "--capacity-requests", "4000"];
    let output = finish(seckill_command(&scratch, &args, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let header = table_header(&stdout);
    let measured = |figure: &str| -> String {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(figure))
            .unwrap_or_else(|| panic!("no row {figure}:\n{stdout}"));
        let [named, measured, met, target] = columns(header, line);
        assert_eq!(
            (named, met, target),
            (figure, "-", CAPACITY_TARGET),
            "{line}"
        );
        measured.to_owned()
    };
    // The number after `label` in `text`, up to the next comma or space.
    let number = |text: &str, label: &str| -> f64 {
        let after = text
            .split_once(label)
            .unwrap_or_else(|| panic!("no {label:?} in {text:?}"))
            .1
            .trim_start();
        let figure: String = after
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        figure
            .parse()
            .unwrap_or_else(|_| panic!("no figure after {label:?} in {text:?}"))
    };
    for figure in &CAPACITY_ROWS[..4] {
        let shown = measured(figure);
        assert!(
            number(&shown, "accepted purchase") > 0.0,
            "{figure}: {shown}"
        );
        for kind in ["refused (sold out)", "room join", "room status"] {
            assert!(number(&shown, kind) >= 0.0, "{figure}: {shown}");
        }
        assert!(shown.ends_with("(4000 of each)"), "{figure}: {shown}");
    }
    let ceilings = measured(CAPACITY_ROWS[5]);
    assert!(number(&ceilings, "") > 0.0, "{ceilings}");
    assert!(number(&ceilings, ", ") > 0.0, "{ceilings}");
    assert!(number(&measured(CAPACITY_ROWS[6]), "") > 0.0);
    measured(CAPACITY_ROWS[4]);
}

/// The Redis cost rows, and their targets.
const REDIS_COST_ROWS: [(&str, &str); 3] = [
    (
        "Redis CPU per accepted purchase, lock, the purchase path (INFO cpu)",
        "<= 7 µs",
    ),
    (
        "Redis CPU per order the worker drains (INFO cpu)",
        CAPACITY_TARGET,
    ),
    (
        "one sale on one Redis core: accepted purchases/s, the drain's share included",
        CAPACITY_TARGET,
    ),
];

/// `seckill bench --only redis-cost`, small: what Redis spends on an
/// accepted purchase while the worker is paused, and then on each order
/// the worker drains, each with the commands it went to. (A worker left
/// running during the purchases stops the bench: it checks that every
/// order still waits on the queue when the purchases are over.)
#[tokio::test]
async fn the_redis_cost_rows_split_a_purchase_from_its_drain() {
    let _cores = crate::helpers::cores_alone().await;
    let scratch = Scratch::new().await;
    let args = [
        "bench",
        "--only",
        "redis-cost",
        "--capacity-requests",
        "3000",
    ];
    // Three processes started, a drain and the bench's own database: a
    // run of seconds alone, which once passed RUN_LIMIT beside the rest
    // of the suite (cause not found), as the whole bench is given twice.
    let output = finish_within(2 * RUN_LIMIT, seckill_command(&scratch, &args, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let header = table_header(&stdout);
    let measured = |(figure, target): (&str, &str)| -> String {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(figure))
            .unwrap_or_else(|| panic!("no row {figure}:\n{stdout}"));
        let [named, measured, met, shown_target] = columns(header, line);
        assert_eq!((named, shown_target), (figure, target), "{line}");
        let judged: &[&str] = if target == CAPACITY_TARGET {
            &["-"]
        } else {
            &["yes", "NO"]
        };
        assert!(judged.contains(&met), "{line}");
        measured.to_owned()
    };
    let first = |shown: &str| -> f64 {
        shown
            .split(' ')
            .next()
            .and_then(|figure| figure.trim_end_matches("/s").parse().ok())
            .unwrap_or_else(|| panic!("no figure first in {shown:?}"))
    };
    let [purchase, drain, ceiling] = REDIS_COST_ROWS.map(measured);
    assert!(first(&purchase) > 0.0, "{purchase}");
    assert!(
        purchase.contains("(3000 purchases, the worker paused; evalsha "),
        "{purchase}"
    );
    // 3,000 orders drained cost Redis milliseconds: well over a µs each.
    assert!(first(&drain) > 1.0, "{drain}");
    assert!(drain.contains("evalsha "), "{drain}");
    assert!(first(&ceiling) > 0.0, "{ceiling}");
}

/// A row of the bench's table cut into its four columns (figure,
/// measured, met, target) where the header's words start, each trimmed.
fn columns<'a>(header: &str, line: &'a str) -> [&'a str; 4] {
    let at = |word: &str| {
        header
            .find(word)
            .unwrap_or_else(|| panic!("{word} in {header}"))
    };
    let starts = [0, at("measured"), at("met "), at("target")];
    // Character positions: a figure may hold a character wider than a byte.
    let byte = |column: usize| {
        line.char_indices()
            .nth(column)
            .map_or(line.len(), |(byte, _)| byte)
    };
    let mut cut = [""; 4];
    for (i, start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(line.len(), |next| byte(*next));
        cut[i] = line[byte(*start)..end].trim();
    }
    cut
}

/// Ctrl-C in the middle of the burst: the bench stops, and its database
/// and keys are gone all the same.
#[tokio::test]
async fn an_interrupted_bench_leaves_nothing_behind() {
    let scratch = Scratch::new().await;
    let (bench, pid) = in_its_burst(&scratch, seckill_command(&scratch, &BURST, &[])).await;
    let pid_t = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let output = tokio::time::timeout(RUN_LIMIT, bench.wait_with_output())
        .await
        .expect("the bench ended in time")
        .expect("its output");
    // An error, as for any run that could not finish (exit 2).
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("interrupted"), "{}", text(&output));
    assert_eq!(bench_databases(pid).await, 0);
    assert_eq!(keys_left(&scratch).await, Vec::<String>::new());
}

/// A bench killed outright (SIGKILL: no clean-up runs) leaves its
/// database and keys; the next bench takes them away, whatever its
/// prefix. A bench that is alive keeps its own while another runs beside
/// it.
#[tokio::test]
async fn the_next_bench_takes_away_what_a_bench_killed_outright_left() {
    let scratch = Scratch::new().await;
    // What it prints is not read: nothing of it may wait on a full pipe.
    let mut unread = seckill_command(&scratch, &BURST, &[]);
    unread
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let (mut killed, pid) = in_its_burst(&scratch, unread).await;
    // Another bench, while the first is alive: the first's are its own.
    let idle = ["bench", "--only", "idle"];
    let beside = finish(seckill_command(&scratch, &idle, &[])).await;
    assert_eq!(beside.status.code(), Some(0), "{}", text(&beside));
    assert_eq!(bench_databases(pid).await, 1, "{}", text(&beside));
    assert!(!keys_left(&scratch).await.is_empty(), "{}", text(&beside));

    killed.start_kill().expect("SIGKILL");
    killed.wait().await.expect("the bench ended");
    assert_eq!(bench_databases(pid).await, 1, "the kill left no database");
    // The next bench, under a prefix of its own: the run's keys go all
    // the same.
    let own = format!("{}-next", scratch.prefix);
    let prefix = [("SECKILL_REDIS_PREFIX", own.as_str())];
    let next = finish(seckill_command(&scratch, &idle, &prefix)).await;
    assert_eq!(next.status.code(), Some(0), "{}", text(&next));
    let said = String::from_utf8_lossy(&next.stderr);
    assert!(
        said.contains("bench: took away what a bench killed outright left"),
        "{said}"
    );
    assert_eq!(bench_databases(pid).await, 0, "{said}");
    assert_eq!(keys_left(&scratch).await, Vec::<String>::new());
}

/// A bench that is alive keeps its database even while nothing uses it
/// (between two of its queries): the next bench goes by the run's lock,
/// not by the database's sessions. The test plays that bench: it makes
/// the run's database and holds the run's lock, with no session on the
/// database. Once the lock goes, as it does when a bench dies, the next
/// bench takes the database away.
#[tokio::test]
async fn a_bench_that_holds_its_runs_lock_keeps_its_database_though_nobody_uses_it() {
    use seckill_devenv::services::{ServerSession, ensure_database};

    let scratch = Scratch::new().await;
    let server = &crate::helpers::services().await.database_url;
    // A run's name as a bench makes it: a pid and eight hex digits.
    let run = format!(
        "{}_{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    // The lock first, as a bench takes it: a bench of another test,
    // sweeping between the two, would find the database with its lock free.
    let mut alive = ServerSession::open(server).await.expect("PostgreSQL");
    assert!(
        alive.try_lock(RUN_LOCK_CLASS, &run).await.expect("lock"),
        "the run's lock is taken"
    );
    let database = format!("seckill_bench_{run}");
    let url = seckill_core::urls::with_database(server, &database).expect("a URL");
    ensure_database(&url).await.expect("the run's database");
    let idle = ["bench", "--only", "idle"];
    let beside = finish(seckill_command(&scratch, &idle, &[])).await;
    assert_eq!(beside.status.code(), Some(0), "{}", text(&beside));
    let named = format!("^{database}$");
    assert_eq!(
        databases_matching(&named).await,
        1,
        "a live bench's database was dropped: {}",
        text(&beside)
    );

    alive.unlock(RUN_LOCK_CLASS, &run).await.expect("unlock");
    let next = finish(seckill_command(&scratch, &idle, &[])).await;
    assert_eq!(next.status.code(), Some(0), "{}", text(&next));
    assert_eq!(databases_matching(&named).await, 0, "{}", text(&next));
}

/// A bench of the burst alone, small.
const BURST: [&str; 5] = ["bench", "--only", "burst", "--burst-users", "200"];

/// `bench` started, and seen in the middle of its burst: its instances
/// run, its sale is in Redis under the bench's prefix (inside the scratch
/// one), and its database is there. The process, and its pid.
async fn in_its_burst(
    scratch: &Scratch,
    mut bench: tokio::process::Command,
) -> (tokio::process::Child, u32) {
    let bench = bench.spawn().expect("the bench starts");
    let pid = bench.id().expect("running");
    crate::helpers::eventually(RUN_LIMIT, "the bench's sale in Redis", || async {
        !keys_left(scratch).await.is_empty()
    })
    .await;
    assert_eq!(bench_databases(pid).await, 1);
    (bench, pid)
}

/// Databases the bench of process `pid` made (its own, and the index's),
/// each named after the pid and a random tag of eight hex digits.
async fn bench_databases(pid: u32) -> i64 {
    databases_matching(&format!("^seckill_bench_(index_)?{pid}_[0-9a-f]{{8}}$")).await
}

/// How many of the server's databases have a name matching `pattern` (a
/// PostgreSQL regular expression).
async fn databases_matching(pattern: &str) -> i64 {
    use sqlx::Connection;
    // The server, through its base database: no migration.
    let server = &crate::helpers::services().await.database_url;
    let mut pg = sqlx::PgConnection::connect(server)
        .await
        .expect("PostgreSQL");
    sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname ~ $1")
        .bind(pattern)
        .fetch_one(&mut pg)
        .await
        .expect("count the databases")
}

async fn keys_left(scratch: &Scratch) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{}:*", scratch.prefix))
        .query_async(&mut crate::helpers::redis_at(scratch.redis_url()).await)
        .await
        .expect("KEYS")
}

/// `seckill bench --only idle`: that row and no other. It works in a
/// database of its own: the one the user's URL names is not even created
/// (with no URL set, an empty `seckill` database was left behind).
#[tokio::test]
async fn the_bench_measures_only_the_rows_asked_for() {
    let scratch = Scratch::new().await;
    let absent = format!("seckill_absent_{}", uuid::Uuid::new_v4().simple());
    let url = seckill_core::urls::with_database(&scratch.database_url, &absent).expect("a URL");
    let env = [("SECKILL_DATABASE_URL", url.as_str())];
    let output = finish(seckill_command(
        &scratch,
        &["bench", "--only", "idle"],
        &env,
    ))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert!(
        rows[0].starts_with("idle worker: 202 to order confirmed, p50"),
        "{stdout}"
    );
    assert_eq!(databases_matching(&format!("^{absent}$")).await, 0);
}

/// `seckill bench --compare` with an earlier run that is missing, or is
/// not one: a clear error naming the file, at once, before any row is
/// measured; and a run saved with `--json` compares with itself.
#[tokio::test]
async fn the_bench_compares_only_with_a_run_it_can_read() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a directory");
    let missing = dir.path().join("missing.json");
    let garbled = dir.path().join("garbled.json");
    std::fs::write(&garbled, "figure  measured\n").expect("written");
    for (file, says) in [
        (&missing, "cannot read the earlier run"),
        (&garbled, "not a run written by `seckill bench --json`"),
    ] {
        let file = file.to_str().expect("a UTF-8 path");
        let args = ["bench", "--only", "idle", "--compare", file];
        let output = finish(seckill_command(&scratch, &args, &[])).await;
        assert_eq!(output.status.code(), Some(2), "{}", text(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says) && stderr.contains(file), "{stderr}");
        assert!(!stderr.contains("bench: an idle worker"), "{stderr}");
    }
    let saved = dir.path().join("run.json");
    let saved = saved.to_str().expect("a UTF-8 path");
    let args = ["bench", "--only", "idle", "--json", saved];
    let output = finish(seckill_command(&scratch, &args, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let args = ["bench", "--only", "idle", "--compare", saved];
    let output = finish(seckill_command(&scratch, &args, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("since the earlier run"), "{stdout}");
    let row = stdout
        .lines()
        .find(|line| line.starts_with("idle worker"))
        .unwrap_or_else(|| panic!("no idle row:\n{stdout}"));
    assert!(row.contains('%'), "{row}");
}

/// What the bench's clean-up (and every test's) deletes: the keys under its
/// prefix, taken as written. A prefix with glob characters in it (a user's
/// `SECKILL_REDIS_PREFIX` of `shop*`) neither deletes a neighbour's keys
/// nor misses its own.
#[tokio::test]
async fn deleting_a_prefix_deletes_its_own_keys_only() {
    let scratch = Scratch::new().await;
    let mut redis = crate::helpers::redis_at(scratch.redis_url()).await;
    let base = &scratch.prefix;
    let own = [format!("{base}:s*[a]?:1"), format!("{base}:s*[a]?:x:2")];
    // What the prefix's *, [a] and ? would match, taken as a pattern.
    let neighbours = [format!("{base}:sxa!:1")];
    for key in own.iter().chain(&neighbours) {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .query_async(&mut redis)
            .await
            .expect("SET");
    }
    let pool =
        seckill_core::redis_pool::RedisPool::new(&scratch.redis, std::time::Duration::from_secs(5))
            .expect("a pool");
    pool.delete_under(&format!("{base}:s*[a]?"))
        .await
        .expect("delete_under");
    let mut left = keys_left(&scratch).await;
    left.sort();
    assert_eq!(left, neighbours);
}

/// The bench's page holder ends as soon as its input does, even while it
/// is still waiting for its streams to be answered: a bench that dies
/// while it opens them leaves no holder behind.
#[tokio::test]
async fn the_page_holder_ends_with_its_input_even_while_opening() {
    let scratch = Scratch::new().await;
    // An instance that never answers: the kernel completes the
    // connections, nobody reads them.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a listener");
    let url = format!("http://{}", silent.local_addr().expect("its address"));
    let args = ["hold-pages", "--url", &url, "--sale", "1", "--pages", "5"];
    // Its input is empty from the start (the deployment's commands get none).
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        seckill_command(&scratch, &args, &[])
            .spawn()
            .expect("the holder starts")
            .wait_with_output(),
    )
    .await
    .expect("the holder ended with its input, not after its minute of waiting")
    .expect("its output");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    drop(silent);
}
