//! The command line of `seckill`, and what `sale create` prints.
//!
//! Only definitions live here: clap turns them into parsing, `--help` and
//! environment fallbacks. The knobs they share with the server (where the
//! servers are, how purchases and the worker behave) are in
//! `seckill_core::config`; each tool's options live with the tool
//! (`seckill_tools`); `main.rs` runs the commands.

use std::net::SocketAddr;

use chrono::{DateTime, Utc};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde::Serialize;

use seckill_cli::{
    DURABILITY_FLAGS, LimitFlags, PurchaseFlags, REDIS_FLAGS, ServiceArgs, WorkerFlags, tidy_help,
};
use seckill_core::config::{DEFAULT_ROOM_ABANDON_SECS, DEFAULT_ROOM_GRACE_SECS};
use seckill_core::domain::{RoomMode, RoomSettings, Sale, SaleStatus};
use seckill_web::startup::DEFAULT_MAX_EVENT_STREAMS;

/// A flash sale that proves, under load and under faults, that 10 units are
/// never sold 11 times.
#[derive(Debug, Parser)]
#[command(name = "seckill", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub services: ServiceArgs,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line, parsed; `--help` shows each command only the
    /// shared flags it uses, under their own heading.
    pub(crate) fn parse_args() -> Self {
        let command = tidy_help(
            Self::command(),
            &[
                (&["migrate"], REDIS_FLAGS),
                (&["sale", "create"], DURABILITY_FLAGS),
                (&["reset"], DURABILITY_FLAGS),
            ],
        );
        Self::from_arg_matches(&command.get_matches()).unwrap_or_else(|error| error.exit())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The server's commands.
    #[command(flatten)]
    Server(ServerCommand),
    /// The tools: demo, chaos, lab, bench (`seckill-tools`).
    #[cfg(feature = "tools")]
    #[command(flatten)]
    Tool(seckill_tools::Tool),
}

/// What runs a deployment: the app, the worker, the schema, the sales.
#[derive(Debug, Subcommand)]
pub(crate) enum ServerCommand {
    /// Run the web app (and, unless --no-worker, the queue worker in-process).
    Serve(ServeArgs),
    /// Run the queue worker alone; several may run at once.
    Worker(WorkerArgs),
    /// Apply the database migrations and exit.
    Migrate,
    /// Manage sales.
    #[command(subcommand)]
    Sale(SaleCommand),
    /// Forget every sale and order (PostgreSQL's, and every Redis key under the prefix), for a storefront as new before a workshop. Asks first, and refuses while a seckill process runs.
    Reset(ResetArgs),
}

#[derive(Debug, Clone, Args)]
pub(crate) struct ResetArgs {
    /// Do not ask: delete at once.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SaleCommand {
    /// Create a sale and print it as JSON.
    Create(CreateSaleArgs),
}

#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "SECKILL_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// Do not run the queue worker inside this process (run `seckill worker` instead).
    #[arg(long, env = "SECKILL_NO_WORKER")]
    pub no_worker: bool,

    /// Token for the admin API (`Authorization: Bearer ...`) and pages, at least 16 characters (a shorter one is refused at start); admin calls are refused while unset.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Name of this instance, sent in the X-Seckill-Instance header of every response: 1 to 64 printable ASCII characters, no spaces [default: the bind address].
    #[arg(long, env = "SECKILL_INSTANCE_ID", value_parser = instance_name)]
    pub instance_id: Option<String>,

    /// Seconds an admin session lasts after its login, 60 to 2592000.
    #[arg(long, env = "SECKILL_ADMIN_SESSION_SECS", default_value_t = 43_200, value_parser = clap::value_parser!(u64).range(60..=2_592_000))]
    pub admin_session_secs: u64,

    /// Live sale pages (event streams) this instance serves at once, 1 to 1000000; one more is answered 503.
    #[arg(long, env = "SECKILL_MAX_EVENT_STREAMS", default_value_t = DEFAULT_MAX_EVENT_STREAMS, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_event_streams: u32,

    /// Seconds a buyer in a waiting room's line may go without asking (the sale page asks every second or two) before the room takes them for gone: when their turn comes they are dropped, counted abandoned, and the next is admitted; 5 to 86400.
    #[arg(long, env = "SECKILL_ROOM_ABANDON_SECS", default_value_t = DEFAULT_ROOM_ABANDON_SECS, value_parser = clap::value_parser!(u64).range(5..=86_400))]
    pub room_abandon_secs: u64,

    /// Seconds a waiting room's keys outlive its sale's end, in which its figures (/metrics, the live page) and a late buyer's "closed" are still told; then Redis drops them; 1 to 604800.
    #[arg(long, env = "SECKILL_ROOM_GRACE_SECS", default_value_t = DEFAULT_ROOM_GRACE_SECS, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub room_grace_secs: u64,

    #[command(flatten)]
    pub purchase: PurchaseFlags,

    #[command(flatten)]
    pub worker: WorkerFlags,

    #[command(flatten)]
    pub limits: LimitFlags,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub worker: WorkerFlags,

    /// Serve this worker's figures at `GET /metrics` on this address (an app instance serves them on its own port).
    #[arg(long, env = "SECKILL_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct CreateSaleArgs {
    /// Name shown on the sale page.
    #[arg(long)]
    pub name: String,
    /// Units for sale.
    // Negative numbers parse, so that validation can say what is wrong with them.
    #[arg(long, allow_negative_numbers = true)]
    pub stock: i32,
    /// Price in cents.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub price_cents: i64,
    /// Seconds from now until the sale opens.
    #[arg(long, default_value_t = 0)]
    pub starts_in: u64,
    /// Seconds the sale stays open after it starts [default: no end].
    #[arg(long)]
    pub duration: Option<u64>,
    /// Put a waiting room in front of the sale, admitting in this order [default: no room].
    #[arg(long, value_enum)]
    pub waiting_room: Option<RoomOrder>,
    /// The room's admissions per second (1-10000).
    #[arg(long, default_value_t = 50, requires = "waiting_room")]
    pub admit_per_sec: u32,
    /// The room's admitted buyers at once who have neither bought nor run out (1-1000000).
    #[arg(long, default_value_t = 100, requires = "waiting_room")]
    pub max_active: u32,
    /// Seconds an admission lasts (10-3600).
    #[arg(long, default_value_t = 120, requires = "waiting_room")]
    pub admission_secs: u32,
}

/// `--waiting-room`'s choices (`RoomMode`'s, as flags name them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RoomOrder {
    /// By arrival.
    Fifo,
    /// Those who joined before the open by lot, then by arrival.
    Lottery,
}

impl CreateSaleArgs {
    /// The room asked for, unchecked (the sale's builder checks it).
    pub(crate) fn room(&self) -> Option<RoomSettings> {
        self.waiting_room.map(|order| RoomSettings {
            mode: match order {
                RoomOrder::Fifo => RoomMode::Fifo,
                RoomOrder::Lottery => RoomMode::Lottery,
            },
            admit_per_sec: self.admit_per_sec,
            max_active: self.max_active,
            admission_secs: self.admission_secs,
            max_line: None,
        })
    }
}

/// What `seckill sale create` prints, as JSON: the sale as created, with all
/// of its units left and its status.
#[derive(Debug, Serialize)]
pub(crate) struct CreatedSale<'a> {
    #[serde(flatten)]
    pub sale: &'a Sale,
    pub stock_left: i64,
    pub status: SaleStatus,
}

impl<'a> CreatedSale<'a> {
    pub(crate) fn new(sale: &'a Sale, now: DateTime<Utc>) -> Self {
        let stock_left = i64::from(sale.stock_total);
        Self {
            sale,
            stock_left,
            status: sale.status(now, stock_left),
        }
    }
}

/// An instance's name, refused at start unless its header can carry it.
fn instance_name(raw: &str) -> Result<String, String> {
    seckill_web::security::instance_header(raw).map(|_| raw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn settings_defaults_match_flag_defaults() {
        let cli = Cli::try_parse_from(["seckill", "serve"]).expect("serve parses");
        let Command::Server(ServerCommand::Serve(serve)) = cli.command else {
            panic!("expected serve")
        };
        use seckill_core::config::{PurchaseSettings, WorkerSettings};
        let (flags, defaults) = (serve.purchase, PurchaseSettings::default());
        assert_eq!(flags.lock_ttl_ms, defaults.lock_ttl_ms);
        assert_eq!(flags.lock_wait_ms, defaults.lock_wait_ms);
        assert_eq!(flags.strategy, defaults.strategy);
        assert_eq!(
            serve.worker.batch_size,
            WorkerSettings::default().batch_size
        );
        assert_eq!(
            serve.worker.payment_window_secs,
            WorkerSettings::default().payment_window_secs
        );
    }

    #[test]
    fn knobs_that_would_stall_the_system_are_refused() {
        for bad in [
            ["seckill", "worker", "--batch-size", "0"],
            ["seckill", "worker", "--lease-ms", "10"],
            ["seckill", "worker", "--max-attempts", "0"],
            ["seckill", "serve", "--lock-ttl-ms", "0"],
            ["seckill", "worker", "--payment-window-secs", "0"],
            // Numbers so large that a time computed from them would
            // overflow (Instant + Duration panics): refused at start.
            ["seckill", "serve", "--lock-wait-ms", "18446744073709551615"],
            ["seckill", "serve", "--lock-ttl-ms", "18446744073709551615"],
            [
                "seckill",
                "serve",
                "--sold-out-refresh-ms",
                "18446744073709551615",
            ],
            [
                "seckill",
                "serve",
                "--naive-delay-ms",
                "18446744073709551615",
            ],
            ["seckill", "worker", "--lease-ms", "18446744073709551615"],
            ["seckill", "worker", "--poll-ms", "18446744073709551615"],
            ["seckill", "worker", "--max-attempts", "4294967295"],
            // Names the X-Seckill-Instance header could not carry.
            ["seckill", "serve", "--instance-id", "a\nb"],
            ["seckill", "serve", "--instance-id", "shop 1"],
            ["seckill", "serve", "--instance-id", ""],
            ["seckill", "serve", "--instance-id", "ünï"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
