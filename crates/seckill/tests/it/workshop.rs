//! `docs/workshop.md` cannot rot: every command in its `sh` blocks is run
//! here, as written, against the real binary (a debug build stands in for
//! `cargo run --release --`), and must end well. `reset` is answered "yes",
//! as the instructor does.

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{RUN_LIMIT, finish, interrupt, start_until_within, text};

const GUIDE: &str = include_str!("../../../../docs/workshop.md");

/// What a user types before `seckill`'s own arguments.
const RUN: &str = "cargo run --release -- ";

/// The commands of the guide's `sh` blocks, in order, as written.
fn commands(guide: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in guide.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            command if in_sh && !command.is_empty() && !command.starts_with('#') => {
                commands.push(command.to_owned());
            }
            _ => {}
        }
    }
    commands
}

#[test]
fn the_guide_has_about_eight_steps_each_with_a_command_and_a_question() {
    let steps: Vec<&str> = GUIDE.split("\n## ").skip(1).collect();
    assert!(
        (8..=13).contains(&steps.len()),
        "{} steps; a 90-minute session has about eight",
        steps.len()
    );
    for step in steps {
        let title = step.lines().next().unwrap_or_default();
        assert!(step.contains("```sh"), "{title}: no command");
        assert!(
            step.contains("**Question for the room**"),
            "{title}: no question for the room"
        );
    }
    // Every command is one this test knows how to run.
    let commands = commands(GUIDE);
    assert!(commands.len() >= 10, "{commands:?}");
    for command in &commands {
        assert!(command.starts_with(RUN), "not a seckill command: {command}");
    }
}

/// Every command, in the guide's order, each on a database and a key
/// prefix of its own and in an empty directory (the reports go there). A
/// command that keeps serving until Ctrl-C must print "Press Ctrl-C to
/// stop." and then stop cleanly on SIGINT; the others must exit 0, and a
/// lab must say every row was as expected. The last step's full lab and
/// step 11's failover comparison are the suite's only ones: each is
/// checked as `lab.rs` and `chaos.rs` say (`lab::the_full_lab_holds`,
/// `chaos::the_failover_comparison_holds`).
#[tokio::test]
async fn every_command_of_the_workshop_guide_runs_and_ends_well() {
    // The whole lab, a chaos run and a failover under sentinels that call
    // a primary down after 2 s without an answer: not beside the tests
    // that saturate both cores.
    let _cores = crate::helpers::cores_alone().await;
    // The guide's full lab and its failover comparison, each checked once.
    let (mut full_labs, mut comparisons) = (0, 0);
    for command in commands(GUIDE) {
        let args: Vec<&str> = command
            .strip_prefix(RUN)
            .expect("checked by the test above")
            .split_whitespace()
            .collect();
        let scratch = Scratch::new().await;
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut process = seckill_command(&scratch, &args, &[]);
        process.current_dir(dir.path());
        let serves =
            args.first().is_some_and(|c| *c == "lab" || *c == "demo") && !args.contains(&"--exit");
        if serves {
            // Whether the verdict printed before the pages said every row
            // (or both runs) kept to what was expected.
            let mut kept = false;
            // What it printed before the prompt (the full lab's table).
            let mut printed = String::new();
            // The sale the waiting-room demo keeps for the audience.
            let mut audience = None;
            // The last step is the whole lab: thirteen rows before the
            // prompt, beside the rest of the suite.
            let prompt = "Press Ctrl-C to stop.";
            let (child, (kept, audience)) =
                start_until_within(2 * RUN_LIMIT, process, prompt, |line| {
                    printed.push_str(line);
                    printed.push('\n');
                    kept |= line.contains("lab verdict: every row as expected")
                        || line.contains("demo verdict: PASS");
                    if let Some((_, page)) = line.split_once("before it opens: ") {
                        audience = Some(page.trim().to_owned());
                    }
                    line.contains(prompt).then(|| (kept, audience.clone()))
                })
                .await;
            assert!(kept, "{command}: no passing verdict before the pages");
            if args.contains(&"--waiting-room") {
                let page = audience.expect("the waiting-room demo names the audience's sale");
                first_in_the_audiences_line(&page).await;
            }
            assert_eq!(interrupt(child).await, Some(0), "{command}");
            // The full lab: every strategy, as `lab` runs it by default.
            if args[0] == "lab" && !args.contains(&"--strategy") {
                full_labs += 1;
                // The lab's reports go to target/seckill-lab by default.
                let reports = dir.path().join("target/seckill-lab");
                crate::lab::the_full_lab_holds(&scratch, &reports, &printed).await;
            }
            continue;
        }
        let output = if args[0] == "reset" {
            crate::processes::answered(process, "yes\n").await
        } else {
            finish(process).await
        };
        assert_eq!(
            output.status.code(),
            Some(0),
            "{command}\n{}",
            text(&output)
        );
        if args.contains(&"--compare-durability") {
            comparisons += 1;
            // Its reports go to target/seckill-chaos by default, and its
            // crowd is chaos's own unless the guide says `--crowd`.
            let reports = dir.path().join("target/seckill-chaos");
            let crowd = args
                .iter()
                .position(|arg| *arg == "--crowd")
                .map_or(u64::from(seckill_tools::chaos::DEFAULT_CROWD), |at| {
                    args[at + 1].parse().expect("--crowd N")
                });
            crate::chaos::the_failover_comparison_holds(&output, &reports, crowd);
        }
        if args[0] == "lab" {
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                stdout.contains("lab verdict: every row as expected"),
                "{command}\n{stdout}"
            );
        }
    }
    // The suite runs neither anywhere else: a guide without them would
    // leave them untested.
    assert_eq!(
        (full_labs, comparisons),
        (1, 1),
        "the guide's full labs (serving) and failover comparisons"
    );
}

/// The audience's sale of `demo --waiting-room` has a room that takes a
/// buyer before its open: the first to join is first in line, not yet
/// admitted.
async fn first_in_the_audiences_line(page: &str) {
    let joined = reqwest::Client::new()
        .post(page.replacen("/sales/", "/api/sales/", 1) + "/queue")
        .json(&serde_json::json!({"user_id": "first-in-the-room"}))
        .send()
        .await
        .expect("the audience's instance answers");
    assert_eq!(joined.status(), 200, "{page}");
    let standing: serde_json::Value = joined.json().await.expect("a standing");
    assert_eq!(standing["position"], 1, "{standing}");
    assert_eq!(standing["admitted"], false, "{standing}");
}

/// The room has the repository, not the article: the guide points at our
/// own pages and files (each of which exists), never at lines of a text
/// the room cannot see.
#[test]
fn the_guide_points_only_at_pages_and_files_the_room_has() {
    for unseen in ["the article, lines", "lines 1", "second article"] {
        assert!(!GUIDE.contains(unseen), "the guide says {unseen:?}");
    }
    let root = crate::helpers::repo_root();
    let mut named = 0;
    for quoted in GUIDE.split('`').skip(1).step_by(2) {
        if quoted.starts_with("crates/") && !quoted.contains(' ') {
            assert!(root.join(quoted).exists(), "no {quoted}");
            named += 1;
        }
    }
    for link in GUIDE.split("](").skip(1) {
        let target = link.split([')', '#']).next().unwrap_or_default();
        if target.ends_with(".md") {
            assert!(root.join("docs").join(target).exists(), "no {target}");
            named += 1;
        }
    }
    assert!(named >= 10, "{named} pages and files named");
}

/// Someone with a room waiting finds the workshop on the README's first
/// screen, with what preparing it takes; and no shell block of the README
/// pairs a command that serves until Ctrl-C with another, which would
/// wait for ever behind it when pasted.
#[test]
fn the_readme_shows_the_workshop_first_and_no_block_waits_behind_a_server() {
    let readme = include_str!("../../../../README.md");
    let first_screen: String = readme.lines().take(25).collect::<Vec<_>>().join("\n");
    assert!(
        first_screen.contains("docs/workshop.md") && first_screen.contains("4 to 8 minutes"),
        "{first_screen}"
    );
    assert!(GUIDE.contains("4 to 8 minutes"));
    for block in readme.split("```sh\n").skip(1) {
        let lines: Vec<&str> = block
            .split("```")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim().is_empty() && !line.trim().starts_with('#'))
            .collect();
        let serves = |line: &&str| {
            (line.contains("-- demo") || line.contains("-- lab") || line.contains("-- serve"))
                && !line.contains("--exit")
        };
        assert!(
            !(lines.len() > 1 && lines.iter().any(serves)),
            "a block pairs a server with more: {lines:?}"
        );
    }
}
