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

mod accounted;
use accounted::ACCOUNTED;

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
