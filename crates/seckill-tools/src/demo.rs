//! `seckill demo`: the whole show in one command.
//!
//! The same burst twice, on app instances and a worker this process starts:
//! once with the `lock` strategy, which must not oversell, once with the
//! deliberately broken `naive` one, which must (and PostgreSQL must refuse
//! the excess). Then both reports side by side, and the `lock` sale's page
//! stays up until Ctrl-C, so its unpaid orders can be watched coming back on
//! sale. The pieces are the load test's: see [`crate::loadrun`].
//!
//! With `--waiting-room`, the demo asks another question instead: who gets
//! the units? The crowd of people and bots of `seckill crowd`, with the
//! room off, `fifo` and `lottery`; then a sale with a lottery room stays
//! up for the audience to join from their own browsers (`demo/waiting_room.rs`).

mod waiting_room;

use std::path::PathBuf;
use std::pin::pin;

use anyhow::bail;
use clap::Args;
use seckill_loadtest::LoadArgs;
use seckill_loadtest::progress::Progress;
use seckill_loadtest::report::{Report, Verdict, side_by_side};
use seckill_loadtest::scenario::Scenario;
use seckill_loadtest::verify::Expect;

use crate::loadrun::{self, admin_token};
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// `seckill demo`'s options: all have defaults, none is needed.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Distinct buyers in each run.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) users: u32,

    /// Units for sale in each run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) stock: u32,

    /// App instances in each run (plus one worker).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(crate) instances: u32,

    /// Where the JSON and HTML reports go.
    #[arg(long, default_value = "target/seckill-demo")]
    pub(crate) report_dir: PathBuf,

    /// Quit after the verdict instead of serving the sale page until Ctrl-C.
    #[arg(long)]
    pub(crate) exit: bool,

    /// Seconds the winners have to pay. Short, so that while the page stays
    /// up the unpaid orders are cancelled and their units come back on sale.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(30..=31_536_000))]
    pub(crate) payment_window_secs: u64,

    /// Before the `lock` run, print its live page and wait for Enter, so that a room watching the page sees the race (when standard input ends, as without a terminal, the run starts at once).
    #[arg(long)]
    pub(crate) wait_for_enter: bool,

    /// Who gets the units? Instead of the two runs, people against bots with the waiting room off, `fifo` and `lottery` (as `seckill crowd`); then a sale with a lottery room opening in a minute stays up, to join from the sale page.
    #[arg(long, conflicts_with_all = ["users", "instances", "wait_for_enter"])]
    pub(crate) waiting_room: bool,
}

/// How many winners' order pages the demo prints, for a volunteer to pay.
const ORDERS_SHOWN: i64 = 3;

/// How long a demo's sales stay open, in seconds: long enough for a
/// workshop to play with the page, short enough that the sales of earlier
/// demos move to the "Ended" list instead of piling up as live ones.
const DEMO_SALE_OPEN_SECS: i64 = 3600;

/// The `lock` run's instances and sale, kept serving after the demo.
struct Kept {
    cluster: Fleet,
    sale_id: i64,
    /// A few of its winners' orders, for a volunteer to pay.
    orders: Vec<uuid::Uuid>,
}

/// `seckill demo`: the same burst against the safe strategy and the naive
/// one, side by side; then the sale page stays up until Ctrl-C (or, with
/// `--exit`, the demo ends). Returns the worse of the two verdicts.
pub(crate) async fn demo(
    args: DemoArgs,
    services: &Services,
    prefix: &str,
) -> anyhow::Result<Verdict> {
    if args.waiting_room {
        return waiting_room::demo_room(&args, services, prefix).await;
    }
    seckill_cli::process::raise_open_files_limit();
    let token = admin_token();
    // One listener from start to end: a Ctrl-C between the runs and the
    // wait below is not lost (see stop_requested).
    let mut stop = pin!(seckill_cli::process::stop_requested());
    // Interrupted during the runs, the runs' future is dropped, and with it
    // the clusters, whose processes are killed (a worker killed mid-batch
    // loses nothing: that is what the queue is for).
    let (verdict, kept) = tokio::select! {
        ran = both_runs(&args, services, prefix, &token) => ran?,
        () = &mut stop => bail!("interrupted; the app instances were stopped"),
    };
    let Some(Kept {
        cluster,
        sale_id,
        orders,
    }) = kept
    else {
        return Ok(verdict);
    };
    if !args.exit {
        let url = &cluster.urls()[0];
        println!(
            "\nThe sale page stays up: {url}/sales/{sale_id}\n\
             The race, live, for a projector: {url}/sales/{sale_id}/live\n\
             Every sale: {url}/   Admin: {url}/admin (token {token})"
        );
        if !orders.is_empty() {
            // Ready for a volunteer: no token to paste, no page to find.
            println!("Winners' orders, to pay before the window closes:");
            for order in &orders {
                println!("  {url}/orders/{order}");
            }
            println!(
                "  (all of them: {url}/admin/sales/{sale_id}, after logging in with the token)"
            );
        }
        println!(
            "\
             Buy from a terminal: {}\n\
             The winners' orders are cancelled {secs} s after they were confirmed unless paid\n\
             (nobody pays them here): watch the units come back on sale.\n\
             Press Ctrl-C to stop.",
            curl_purchase(url, sale_id),
            secs = args.payment_window_secs
        );
        stop.await;
    }
    cluster.stop().await;
    Ok(verdict)
}

/// The two runs of the demo. Returns the worse verdict, and the `lock`
/// cluster with its sale (kept serving).
async fn both_runs(
    args: &DemoArgs,
    services: &Services,
    prefix: &str,
    token: &str,
) -> anyhow::Result<(Verdict, Option<Kept>)> {
    let store = &loadrun::connect(services, prefix).await?;
    println!(
        "seckill demo: {} buyers race for {} units on {} app instances, twice:\n  \
         1. strategy `lock`: the Redis lock guards the stock; nothing may be oversold;\n  \
         2. strategy `naive`: no lock (deliberately broken); it must oversell, and PostgreSQL must refuse the excess.",
        args.users, args.stock, args.instances
    );
    let mut reports: Vec<Report> = Vec::new();
    let mut kept = None;
    for (label, strategy, expect) in [
        ("lock", Strategy::Lock, Expect::NoOversell),
        ("naive", Strategy::Naive, Expect::Oversell),
    ] {
        let (report, cluster, sale_id) =
            one_run(args, services, store, token, (label, strategy, expect)).await?;
        reports.push(report);
        if strategy == Strategy::Lock {
            let orders = store
                .orders_of_sale(sale_id, ORDERS_SHOWN)
                .await?
                .into_iter()
                .map(|order| order.id)
                .collect();
            kept = Some(Kept {
                cluster,
                sale_id,
                orders,
            });
        } else {
            cluster.stop().await;
            // The naive run leaves the sale's figures in Redis wrong on
            // purpose; left so, the page would go on showing them, and the
            // cancelled orders' units would be added to a wrong count.
            store.reset_sale_in_redis(sale_id).await?;
        }
    }
    println!("\n== side by side ==");
    println!("{}", side_by_side(&reports.iter().collect::<Vec<_>>()));
    let verdict = reports
        .iter()
        .map(|r| r.verdict)
        .max_by_key(|v| v.exit_code())
        .unwrap_or(Verdict::Invalid);
    println!("demo verdict: {}", verdict.as_str());
    Ok((verdict, kept))
}

/// One run of the demo: start the strategy's instances, create its sale,
/// fire the burst, print the report. Returns the report, the instances
/// (still running) and the sale.
async fn one_run(
    args: &DemoArgs,
    services: &Services,
    store: &Store,
    token: &str,
    (label, strategy, expect): (&str, Strategy, Expect),
) -> anyhow::Result<(Report, Fleet, i64)> {
    let progress = Progress::stderr();
    let starting = progress.phase("start", None);
    // The join limit off: the demo's crowd comes from this one address.
    let deployment = loadrun::deployment(services, store.prefix(), strategy, token)?
        .env(
            "SECKILL_PAYMENT_WINDOW_SECS",
            args.payment_window_secs.to_string(),
        )
        .env("SECKILL_ROOM_JOINS_PER_IP", "0");
    let cluster = Fleet::start(deployment, label, args.instances).await?;
    starting.finish(&format!(
        "{} `{label}` instances ({}) and a worker",
        args.instances,
        cluster.urls().join(", ")
    ));
    let name = sale_name(chrono::Local::now(), label);
    let sale_id = loadrun::create_sale(store, &name, args.stock, Some(DEMO_SALE_OPEN_SECS)).await?;
    if args.wait_for_enter && strategy == Strategy::Lock {
        println!(
            "\nThe race, live, for a projector: {}/sales/{sale_id}/live\n\
             Open it, then press Enter to start the race.",
            cluster.urls()[0]
        );
        enter_pressed().await;
    }
    let load = LoadArgs {
        scenario: Scenario::Burst,
        users: args.users,
        dup: 0.05,
        rate: 0.0,
        duration: None,
        connections: 1,
        expect,
        settle_secs: 60,
        json: Some(args.report_dir.join(format!("{label}.json"))),
        html: Some(args.report_dir.join(format!("{label}.html"))),
    };
    let run = loadrun::burst(
        store,
        &cluster,
        strategy,
        (sale_id, args.stock),
        (label, &load),
    )
    .await;
    let report = match run {
        Ok(report) => report,
        Err(error) => {
            cluster.stop().await;
            return Err(error);
        }
    };
    println!("{}", report.to_text());
    loadrun::print_paths(&load);
    Ok((report, cluster, sale_id))
}

/// Wait until a line, or the end, of standard input. On a thread of its
/// own, not tokio's `stdin`: a read that never ends there would hold the
/// runtime's shutdown (a Ctrl-C during the wait); a plain thread dies with
/// the process.
async fn enter_pressed() {
    let (pressed, enter) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        // An error counts as the end: the demo goes on rather than hang.
        let _ = std::io::stdin().read_line(&mut line);
        let _ = pressed.send(());
    });
    let _ = enter.await;
}

/// The purchase the demo offers to run by hand. `-w '\n'` ends the
/// answer with a newline: the JSON has none, and the prompt would follow it
/// on the same line.
fn curl_purchase(url: &str, sale_id: i64) -> String {
    format!(
        "curl -s -w '\\n' -X POST {url}/api/sales/{sale_id}/purchase -d '{{\"user_id\": \"ann\"}}'"
    )
}

/// The demo sale's name. The time in it, to the second, tells the demos on
/// the storefront apart: two started in the same minute get two names
/// (two started in the same second share one; their ids differ).
fn sale_name(at: chrono::DateTime<chrono::Local>, label: &str) -> String {
    format!(
        "Demo {}: phone, {label} strategy",
        at.format("%b %-d %H:%M:%S")
    )
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::{curl_purchase, sale_name};

    #[test]
    fn the_printed_curl_ends_its_answer_with_a_newline() {
        let curl = curl_purchase("http://127.0.0.1:8080", 7);
        assert!(curl.starts_with("curl -s -w '\\n' -X POST"), "{curl}");
        assert!(
            curl.ends_with(r#"/api/sales/7/purchase -d '{"user_id": "ann"}'"#),
            "{curl}"
        );
    }

    #[test]
    fn two_demos_started_in_the_same_minute_get_two_names() {
        let first = chrono::Local
            .with_ymd_and_hms(2026, 11, 27, 10, 5, 3)
            .single()
            .expect("a local time");
        let second = first + chrono::Duration::seconds(40);
        assert_ne!(sale_name(first, "lock"), sale_name(second, "lock"));
        assert!(sale_name(first, "lock").starts_with("Demo Nov 27 10:05:03"));
    }
}
