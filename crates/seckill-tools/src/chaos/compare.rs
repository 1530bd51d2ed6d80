//! `seckill chaos --compare-durability`: the lesson of a replicated Redis
//! in one table.
//!
//! The same failover (with `--cluster`, the cluster's faults) runs twice,
//! with the same seed, load and schedule: first with `--redis-durability
//! local`, where a `202` waits for the primary alone, then with
//! `replica`, where it waits until a replica holds the pass's writes
//! (`WAIT 1`). Replication is asynchronous, so what the primary wrote
//! while its replica was cut off dies with it: under `local` those buyers
//! were told `202` all the same, and the
//! promoted replica has their units on sale again and has forgotten that
//! they bought. Under `replica` they were told `503 unconfirmed` instead,
//! and nothing they were promised is lost.
//!
//! Each run prints and writes its own full report (in a folder named after
//! its durability); the table of the two comes last, with the waiting
//! crowd's beside it when the runs had one, and is written as
//! `compare.json`. The verdict passes when `replica` kept every promise
//! and `local` broke only the ones a failover breaks (lost `202`s, units
//! on sale again, buyers forgotten, the second sales PostgreSQL refuses):
//! nothing oversold, nobody holding two, no `500`, in either run.

use anyhow::Context;
use seckill_cli::Durability;
use seckill_loadtest::report::{Align, Table, Verdict};
use serde::Serialize;

use super::judge::Summary;
use super::judge::crowd as waiting;
use super::{ChaosArgs, Fault};

/// The checks a failover under `local` breaks, by design: what the
/// replica never got (the sale's units and buyers, and the waiting
/// crowd's places, admissions and spent marks). Every other check must
/// hold in both runs.
const A_FAILOVER_BREAKS: [&str; 11] = [
    "lost 202s (no Redis wipe in this run)",
    "Redis stock = units - sold",
    "Redis buyers = PostgreSQL buyers",
    "orders PostgreSQL refused",
    waiting::TAKEN_BACK,
    waiting::BEYOND_LIMIT,
    waiting::READMITTED,
    waiting::UNADMITTED,
    waiting::LOST,
    waiting::TOLD_CUT_OFF,
    waiting::DOUBLE,
];

/// One run of the comparison, as the table and `compare.json` show it.
#[derive(Debug, Serialize)]
struct Side {
    durability: &'static str,
    verdict: &'static str,
    /// The checks that failed, by name.
    broken: Vec<&'static str>,
    /// The table's rows that failed (`ok` NO), by fault, but the waiting
    /// crowd's, whose `ok` is its checks' (judged by name in `broken`).
    failed_rows: Vec<String>,
    #[serde(flatten)]
    summary: Summary,
}

impl Side {
    /// Whether the run showed what its durability promises: `replica`
    /// a verdict of PASS (every check and every row of its table: a
    /// window that answered a `500`, or a `503` where nothing may fail,
    /// breaks a promise as surely as a failed check), `local` every row
    /// and every check but [`A_FAILOVER_BREAKS`].
    fn as_expected(&self) -> bool {
        match self.durability {
            "replica" => {
                self.verdict == Verdict::Pass.as_str()
                    && self.broken.is_empty()
                    && self.failed_rows.is_empty()
            }
            _ => {
                self.failed_rows.is_empty()
                    && self
                        .broken
                        .iter()
                        .all(|name| A_FAILOVER_BREAKS.contains(name))
            }
        }
    }

    /// The last column: whether the run kept every promise, and if not,
    /// whether it broke only what a failover breaks.
    fn kept(&self) -> String {
        let rows = self.failed_rows.iter().map(|row| format!("row {row}"));
        let broken: Vec<String> = rows
            .chain(self.broken.iter().map(|name| (*name).to_owned()))
            .collect();
        if broken.is_empty() && self.verdict == Verdict::Pass.as_str() {
            "yes".to_owned()
        } else if self.as_expected() {
            "no, as a failover does".to_owned()
        } else if broken.is_empty() {
            format!("NO, unexpectedly: verdict {}", self.verdict)
        } else {
            format!("NO, unexpectedly: {}", broken.join("; "))
        }
    }
}

/// Run the failover under `local`, then under `replica`; print the table.
pub(super) async fn compare(args: ChaosArgs) -> anyhow::Result<Verdict> {
    let mut sides = Vec::new();
    for durability in [Durability::Local, Durability::Replica] {
        let env = durability.env(args.replica_wait);
        let name = if durability == Durability::Local {
            "local"
        } else {
            "replica"
        };
        let run_args = ChaosArgs {
            faults: if args.cluster {
                Fault::CLUSTER.to_vec()
            } else {
                vec![Fault::RedisFailover]
            },
            compare_durability: false,
            report_dir: args.report_dir.join(name),
            durability: env.to_vec(),
            ..args.clone()
        };
        let (verdict, report) = super::run(run_args).await?;
        if verdict == Verdict::Invalid {
            println!(
                "the {name} run could not be trusted (the generator could not keep the rate): no comparison"
            );
            return Ok(Verdict::Invalid);
        }
        sides.push(Side {
            durability: name,
            verdict: verdict.as_str(),
            broken: report
                .checks
                .iter()
                .filter(|c| !c.ok)
                .map(|c| c.name)
                .collect(),
            failed_rows: report
                .rows
                .iter()
                .filter(|row| !row.ok && row.fault != super::judge::CROWD_ROW)
                .map(|row| row.fault.clone())
                .collect(),
            summary: report.summary,
        });
    }
    println!("{}", table(&sides, args.seed, args.cluster));
    if let Some(crowds) = crowd_table(&sides) {
        println!("{crowds}");
    }
    let held = sides.iter().all(Side::as_expected);
    println!(
        "verdict: {}",
        if held {
            "PASS (local broke only what a failover breaks; replica kept every 202)"
        } else {
            "FAIL (a run broke a promise its durability keeps)"
        }
    );
    std::fs::create_dir_all(&args.report_dir).context("creating the report directory")?;
    let path = args.report_dir.join("compare.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&sides).expect("a comparison serializes"),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    println!("JSON report: {}", path.display());
    Ok(if held { Verdict::Pass } else { Verdict::Fail })
}

/// The two runs side by side, narrow enough for a projector.
fn table(sides: &[Side], seed: u64, cluster: bool) -> String {
    let mut table = Table::new().gap(2).columns(&[
        ("durability", Align::Left, 10),
        ("202", Align::Right, 5),
        ("503 in doubt", Align::Right, 12),
        ("lost 202", Align::Right, 8),
        ("sold again", Align::Right, 10),
        ("forgotten", Align::Right, 9),
        ("500", Align::Right, 3),
        ("kept the promise", Align::Left, 16),
    ]);
    for side in sides {
        let s = &side.summary;
        table.row([
            side.durability.to_owned(),
            s.accepted.to_string(),
            s.in_doubt.to_string(),
            s.lost.to_string(),
            s.sold_again.to_string(),
            s.forgotten.to_string(),
            s.internal.to_string(),
            side.kept(),
        ]);
    }
    format!(
        "\n== the same {} (seed {seed}): local against replica ==\n{table}\
         503 in doubt: orders named by a 503 unconfirmed (the buyer looks them up)\n\
         sold again: units PostgreSQL counts as sold that Redis has on sale again\n\
         forgotten: buyers in PostgreSQL whom Redis would let buy a second time",
        if cluster {
            "faults on a cluster"
        } else {
            "failover"
        }
    )
}

/// The waiting crowd of each run side by side, if the runs had one.
fn crowd_table(sides: &[Side]) -> Option<String> {
    let mut table = Table::new().gap(2).columns(&[
        ("durability", Align::Left, 10),
        ("placed", Align::Right, 6),
        ("taken back", Align::Right, 10),
        ("admitted", Align::Right, 8),
        ("at once", Align::Right, 7),
        ("forgotten", Align::Right, 9),
        ("again", Align::Right, 5),
        ("cut off", Align::Right, 7),
        ("202", Align::Right, 4),
        ("lost", Align::Right, 4),
        ("double", Align::Right, 6),
    ]);
    let mut buyers = None;
    for side in sides {
        let c = side.summary.crowd?;
        buyers = Some(c.buyers);
        table.row([
            side.durability.to_owned(),
            c.placed.to_string(),
            c.taken_back.to_string(),
            c.admitted.to_string(),
            format!("{} of {}", c.most_admitted, c.max_active),
            c.unadmitted.to_string(),
            c.readmitted.to_string(),
            c.told_cut_off.to_string(),
            c.accepted.to_string(),
            c.lost.to_string(),
            c.doubled.to_string(),
        ]);
    }
    Some(format!(
        "\n== the waiting crowd across the same failover: {} buyers in a FIFO room ==\n{table}\
         placed: buyers told a place; taken back: then told outside, or gone from the room at the end\n\
         at once: the most buyers holding an admission told to them, of the room's max_active\n\
         forgotten: told admitted, then waiting or another admission before it ran out or bought\n\
         again: told a new admission after their 202; cut off: 200s and 202s told with no replica\n\
         lost: 202s (or orders a 409 named) not in PostgreSQL; double: buyers with two orders or two 202s",
        buyers?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::judge::CrowdSummary;

    fn side(durability: &'static str, broken: &[&'static str]) -> Side {
        Side {
            durability,
            verdict: if broken.is_empty() { "PASS" } else { "FAIL" },
            broken: broken.to_vec(),
            failed_rows: Vec::new(),
            summary: Summary {
                accepted: 1781,
                lost: 3,
                sold_again: 237,
                ..Summary::default()
            },
        }
    }

    #[test]
    fn the_crowds_table_names_each_side_and_what_it_was_told() {
        let crowd = |taken_back| CrowdSummary {
            buyers: 150,
            placed: 150,
            taken_back,
            most_admitted: 4,
            max_active: 4,
            ..CrowdSummary::default()
        };
        let with = |name, taken_back| Side {
            summary: Summary {
                crowd: Some(crowd(taken_back)),
                ..Summary::default()
            },
            ..side(name, &[])
        };
        let text = crowd_table(&[with("local", 4), with("replica", 0)]).expect("a crowd table");
        let local = text
            .lines()
            .find(|l| l.starts_with("local"))
            .expect("local");
        let cells: Vec<&str> = local.split_whitespace().collect();
        assert_eq!(cells[..6], ["local", "150", "4", "0", "4", "of"], "{local}");
        assert!(text.lines().all(|l| l.len() <= 100), "{text}");
        assert!(crowd_table(&[side("local", &[])]).is_none());
    }

    #[test]
    fn local_may_break_only_what_a_failover_breaks_and_replica_nothing() {
        assert!(side("local", &A_FAILOVER_BREAKS).as_expected());
        assert!(side("local", &[]).as_expected());
        assert!(!side("local", &["answers 500 internal"]).as_expected());
        assert!(!side("local", &["buyers holding two units"]).as_expected());
        assert!(side("replica", &[]).as_expected());
        assert!(!side("replica", &["lost 202s (no Redis wipe in this run)"]).as_expected());
    }

    /// A row of the table that failed (a `503` in the time between faults,
    /// a window no request fell in) fails the run as a check does: a
    /// `replica` run is kept only with a verdict of PASS.
    #[test]
    fn a_failed_row_or_verdict_is_not_kept_though_every_check_passed() {
        let row_failed = Side {
            verdict: "FAIL",
            failed_rows: vec!["(between faults)".to_owned()],
            ..side("replica", &[])
        };
        assert!(!row_failed.as_expected());
        assert_eq!(row_failed.kept(), "NO, unexpectedly: row (between faults)");
        let failed = Side {
            verdict: "FAIL",
            ..side("replica", &[])
        };
        assert!(!failed.as_expected());
        assert_eq!(failed.kept(), "NO, unexpectedly: verdict FAIL");
        let local = Side {
            failed_rows: vec!["(between faults)".to_owned()],
            ..side("local", &["Redis stock = units - sold"])
        };
        assert!(!local.as_expected());
    }

    #[test]
    fn the_table_names_each_side_and_what_it_lost() {
        let text = table(
            &[
                side("local", &["Redis stock = units - sold"]),
                side("replica", &[]),
            ],
            1,
            false,
        );
        let local = text
            .lines()
            .find(|l| l.starts_with("local"))
            .expect("a local row");
        let cells: Vec<&str> = local.split_whitespace().collect();
        assert_eq!(cells[..5], ["local", "1781", "0", "3", "237"], "{local}");
        assert!(local.ends_with("no, as a failover does"), "{local}");
        let replica = text
            .lines()
            .find(|l| l.starts_with("replica"))
            .expect("a replica row");
        assert!(replica.ends_with("yes"), "{replica}");
        assert!(text.lines().all(|l| l.len() <= 100), "{text}");
    }
}
