//! Every command of the README and `docs/`, and the test that runs it or
//! why none does: the list `docs.rs` checks the pages against, kept apart
//! from the checks so that each file stays one job.

/// Each command of the pages, whole (a shell block's line without its
/// comment, its `\` continuations joined; an inline command as written),
/// and the test that runs it or why none does: "not run: …". The
/// storefront's curl walk is not listed line by line:
/// `docs::the_storefront_walk_runs_as_written_against_serve` runs that
/// block whole ([`walk`](super::walk)).
pub(super) const ACCOUNTED: &[(&[&str], &str)] = &[
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
            "cargo build --release --timings",
            "cargo build --release --bin seckill",
            "cargo build --release --timings --bin seckill",
            "cargo build --release -p tikv-jemalloc-sys",
        ],
        "not run: a build, with and without the tools, or of the allocator's C part alone; `cargo test --workspace` builds the same code (with the tools, in the test profile)",
    ),
    (
        &["cargo run --release -- reset"],
        "instructor::reset_deletes_every_sale_order_and_key_only_when_told_yes",
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
            "cargo run --release -- bench --only room --only roomed",
            "cargo run --release -- bench --only roomed --only ended",
            "seckill bench --only accepted",
            "seckill bench --only burst",
            "seckill bench --only drain",
            "seckill bench --only drain --drain-orders-large 1000000",
            "seckill bench --only ended",
            "seckill bench --only pages",
            "seckill bench --only replica",
            "seckill bench --only sold-out",
            "seckill bench --only burst --memory-buyers 10000",
            "seckill bench --only room --room-buyers 100000",
            "seckill bench --only room-scripts --room-buyers N",
            "cargo run --release -- bench --only room-scripts --room-buyers 1000000",
            "cargo run --release -- bench --only roomed",
            "cargo run --release -- bench --only drain",
            "cargo run --release -- bench --only accepted --only sold-out",
            "target/debug/seckill bench --only replica --secs 5",
        ],
        "bench::the_bench_measures_each_row_beside_its_target runs every row, on shorter settings; bench::the_bench_measures_only_the_rows_asked_for runs `--only`",
    ),
    (
        &["redis-cli --intrinsic-latency 30"],
        "not run: a reading of the machine bench.md quotes (how long the kernel alone stalls a thread), not of seckill",
    ),
    (
        &[
            "seckill bench --only rooms-end",
            "cargo run --release -- bench --only rooms-end",
        ],
        "bench::the_rooms_end_row_finds_redis_memory_back_where_it_was runs it with 3 rooms of 200 buyers; bench::the_bench_measures_each_row_beside_its_target with the rest",
    ),
    (
        &["cargo run --release -- bench --only redis-cost"],
        "bench::the_redis_cost_rows_split_a_purchase_from_its_drain runs it with 3,000 purchases; bench::the_bench_measures_each_row_beside_its_target with 500",
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
            "seckill serve --no-worker --strategy lua",
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
        "workshop::every_command_of_the_workshop_guide_runs_and_ends_well runs it as the guide's step 11 does, with fewer buyers, a lower rate and a shorter run, and checks it as chaos.rs says",
    ),
    (
        &[
            "cargo run --release -- chaos --fault redis-failover --redis-durability replica --duration-secs 15 --rate 500 --users 9000 --stock 8000",
            "cargo run --release -- chaos --fault redis-failover --redis-durability local --duration-secs 15 --rate 500 --users 9000 --stock 8000",
            "seckill chaos --fault redis-failover",
            "seckill chaos --compare-durability",
        ],
        "not run as written (a failover run on sentinels each): --compare-durability makes these two runs one after the other, the durability set by its environment variable rather than this flag, and workshop::every_command_of_the_workshop_guide_runs_and_ends_well runs that, shorter (the guide's step 11), checked as chaos.rs says",
    ),
    (
        &[
            "cargo run --release -- chaos --cluster --compare-durability --duration-secs 45 --rate 300 --users 15000 --stock 8000",
            "seckill chaos --cluster --compare-durability",
            "seckill chaos --cluster",
            "seckill chaos --cluster --fault sale-shard-stall --redis-durability replica --users 3000 --stock 2000 --rate 100 --duration-secs 30",
        ],
        "not run as written (two runs of a minute each on nine Redis nodes): chaos_cluster::on_a_cluster_with_replicas_a_failover_and_a_stall_take_back_no_202 runs two of its four faults under replica, shorter",
    ),
    (
        &["seckill-loadtest --faults [NAME ...] --users N --stock N --rate R --duration SECS"],
        "chaos::the_load_test_runs_the_same_chaos_scenario_with_faults, with one fault and small figures",
    ),
    (
        &[
            "cargo run --release -- crowd",
            "cargo run --release -- crowd --bots 100",
            "cargo run --release -- crowd --bots 100 --room-joins-per-ip 0",
        ],
        "crowd::the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order, with a smaller crowd",
    ),
    (
        &["seckill demo --waiting-room"],
        "instructor::the_demo_waits_for_enter_before_its_race_and_prints_orders_to_pay runs the demo; not run with --waiting-room: crowd::the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order runs the rooms under a crowd",
    ),
    (
        &[
            "seckill sale create --waiting-room fifo|lottery [--admit-per-sec 50] [--max-active 100] [--admission-secs 120]",
        ],
        "waiting_room_made::sale_create_puts_a_room_in_front_and_refuses_bad_room_settings",
    ),
    (
        &["cargo run --release -- lab --exit"],
        "not run: the full lab is the workshop guide's last step, run serving and checked by workshop::every_command_of_the_workshop_guide_runs_and_ends_well with the checks lab.rs gives it; --exit's quitting after the table and its exit codes by lab::a_row_not_as_expected_exits_1_and_an_untaught_pairing_runs",
    ),
    (
        &["redis-cli -u ... PTTL"],
        "not run: the command the lab prints for the reader to look at a lock; workshop::every_command_of_the_workshop_guide_runs_and_ends_well checks the TTLs the full lab reads, with the checks lab.rs gives it",
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
