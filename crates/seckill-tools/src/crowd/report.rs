//! The crowd's figures, one row per setting: who won the units against
//! their share of the buyers, whether the room kept arrival order, how
//! good its estimated wait was, and what the bots were told.

use std::collections::BTreeMap;

use seckill_core::domain::RoomMode;
use seckill_core::waiting_room::LOTTERY_LATE;
use seckill_loadtest::report::{Align, Table};

use super::CrowdArgs;
use super::people::{Kind, Story};

/// One setting's figures.
pub(crate) struct Row {
    setting: &'static str,
    bots_won: usize,
    people_won: usize,
    /// Bots among every buyer.
    bots_share: f64,
    /// Bots among those who joined before the open (rooms only).
    bots_share_early: Option<f64>,
    /// Pairs admitted in the other order than they joined in, among
    /// those who joined after the open; and among everyone.
    inversions: Option<(usize, usize)>,
    /// Predicted minus actual admission, seconds: p50 and p90.
    eta_error: Option<(f64, f64)>,
    /// The bots' answers, most frequent first.
    bot_answers: Vec<(String, usize)>,
    /// The checks on PostgreSQL.
    pub(crate) kept: Result<(), String>,
}

impl Row {
    pub(crate) fn of(
        setting: Option<RoomMode>,
        stories: &[Story],
        kept: Result<(), String>,
    ) -> Self {
        let count = |kind: Kind| stories.iter().filter(|s| s.is(kind)).count();
        let won = |kind: Kind| stories.iter().filter(|s| s.is(kind) && s.won).count();
        let open = super::OPEN_IN.as_secs_f64();
        let early: Vec<&Story> = stories
            .iter()
            .filter(|s| s.arrived.is_some_and(|at| at < open))
            .collect();
        let room = setting.is_some();
        Self {
            setting: setting.map_or("off", RoomMode::as_str),
            bots_won: won(Kind::Bot),
            people_won: won(Kind::Person),
            bots_share: count(Kind::Bot) as f64 / stories.len().max(1) as f64,
            bots_share_early: (room && !early.is_empty()).then(|| {
                early.iter().filter(|s| s.is(Kind::Bot)).count() as f64 / early.len() as f64
            }),
            inversions: setting.map(|mode| inversions(stories, open, mode)),
            eta_error: room.then(|| eta_error(stories)).flatten(),
            bot_answers: bot_answers(stories),
            kept,
        }
    }
}

/// Pairs admitted out of their order of joining: `(both joined after the
/// open, all)`. The order of joining is the number the server gave each
/// join (its arrival order), but for a lottery's drawn places (those who
/// joined before the open, numbered below `LOTTERY_LATE`): those are
/// ordered by when each join was answered, and two answered within a
/// millisecond of each other are one batch, in no order. So the lottery's
/// shuffle shows among all, and none after the open, where it serves in
/// arrival order. Admissions are ordered by the moment Redis made them
/// (`Story::admitted_ms`); those of one visit are one batch, in no order.
fn inversions(stories: &[Story], open: f64, mode: RoomMode) -> (usize, usize) {
    // (drawn, then when answered or the number), and whether it is a time.
    let joined = |s: &Story| -> Option<(u8, f64)> {
        let place = s.place?;
        Some(match mode {
            RoomMode::Lottery if place < LOTTERY_LATE => (0, s.arrived?),
            _ => (1, place as f64),
        })
    };
    let mut admitted: Vec<((u8, f64), i64, bool)> = stories
        .iter()
        .filter_map(|s| Some((joined(s)?, s.admitted_ms?, s.arrived? >= open)))
        .collect();
    admitted.sort_by(|a, b| a.0.0.cmp(&b.0.0).then(a.0.1.total_cmp(&b.0.1)));
    let before = |a: (u8, f64), b: (u8, f64)| match (a.0, b.0) {
        (0, 0) => b.1 > a.1 + 0.001,
        (x, y) if x == y => b.1 > a.1,
        (x, y) => x < y,
    };
    let (mut after_open, mut all) = (0, 0);
    for (i, a) in admitted.iter().enumerate() {
        for b in &admitted[i + 1..] {
            if before(a.0, b.0) && a.1 > b.1 {
                all += 1;
                if a.2 && b.2 {
                    after_open += 1;
                }
            }
        }
    }
    (after_open, all)
}

/// p50 and p90 of the predicted admission time minus the actual one.
fn eta_error(stories: &[Story]) -> Option<(f64, f64)> {
    let mut errors: Vec<f64> = stories
        .iter()
        .filter_map(|s| {
            let (asked, eta) = s.predicted?;
            Some(asked + eta - s.admitted?)
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    errors.sort_by(f64::total_cmp);
    let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.9)))
}

fn bot_answers(stories: &[Story]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for answer in stories
        .iter()
        .filter(|s| s.is(Kind::Bot))
        .flat_map(|s| &s.answers)
    {
        *counts.entry(answer.clone()).or_default() += 1;
    }
    let mut sorted: Vec<(String, usize)> = counts.into_iter().collect();
    sorted.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    sorted
}

/// The rows side by side, and the bots' answers under them.
pub(crate) fn table(rows: &[Row], args: &CrowdArgs) -> String {
    let mut table = Table::new().gap(2).columns(&[
        ("room", Align::Left, 7),
        ("bots won", Align::Right, 8),
        ("people won", Align::Right, 10),
        ("bots of buyers", Align::Right, 14),
        ("of early", Align::Right, 8),
        ("inversions", Align::Right, 10),
        ("eta error p50/p90", Align::Right, 17),
        ("checks", Align::Left, 6),
    ]);
    let percent = |share: f64| format!("{:.0}%", share * 100.0);
    for row in rows {
        table.row([
            row.setting.to_owned(),
            format!("{}/{}", row.bots_won, args.stock),
            format!("{}/{}", row.people_won, args.stock),
            percent(row.bots_share),
            row.bots_share_early.map_or("-".into(), percent),
            row.inversions
                .map_or("-".into(), |(after, all)| format!("{after} ({all})")),
            row.eta_error
                .map_or("-".into(), |(p50, p90)| format!("{p50:+.1} / {p90:+.1} s")),
            match &row.kept {
                Ok(()) => "held".to_owned(),
                Err(broken) => format!("BROKEN: {broken}"),
            },
        ]);
    }
    let mut out = format!("\n== who gets the units? ==\n{table}");
    out.push_str(
        "inversions: pairs admitted in the other order than they joined, among those who joined after the open (and among all)\n",
    );
    for row in rows {
        let told: Vec<String> = row
            .bot_answers
            .iter()
            .take(6)
            .map(|(answer, n)| format!("{answer} x{n}"))
            .collect();
        out.push_str(&format!(
            "bots were told, room {}: {}\n",
            row.setting,
            told.join(", ")
        ));
    }
    out
}
