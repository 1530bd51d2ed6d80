//! The command line: `sale create` and `migrate` and their errors, how
//! `serve` stops, and `serve` and `worker` with a stdout nobody reads.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::helpers::{Scratch, client, cluster, seckill_command, spawn_app_on};
use crate::processes::sale_count;

#[tokio::test]
async fn sale_create_prints_the_sale_and_it_can_be_bought() {
    let scratch = Scratch::new().await;
    let output = seckill_command(
        &scratch,
        &[
            "sale",
            "create",
            "--name",
            "Lamp",
            "--stock",
            "2",
            "--price-cents",
            "1999",
        ],
        &[],
    )
    .output()
    .await
    .expect("seckill sale create");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sale: Value = serde_json::from_slice(&output.stdout).expect("the sale as JSON on stdout");
    assert_eq!(sale["name"], "Lamp");
    assert_eq!(sale["stock_left"], 2);
    assert_eq!(sale["price_cents"], 1999);
    assert_eq!(sale["status"], "live");

    let app = spawn_app_on(scratch, Default::default()).await;
    let id = sale["id"].as_i64().expect("an id");
    assert_eq!(app.purchase(id, "ann").await.status(), 202);
    assert_eq!(app.redis_stock(id).await, Some(1));
}

#[tokio::test]
async fn sale_create_refuses_an_invalid_sale_with_a_clear_message_and_stores_nothing() {
    let scratch = Scratch::new().await;
    for (args, expected) in [
        (
            vec!["--name", "Lamp", "--stock", "0"],
            "stock must be between 1",
        ),
        (
            vec!["--name", "   ", "--stock", "5"],
            "name must not be empty",
        ),
        (
            vec!["--name", "Lamp", "--stock", "5", "--price-cents", "-1"],
            "price_cents must be between",
        ),
        (
            vec!["--name", "Lamp", "--stock", "five"],
            "invalid value 'five'",
        ),
        // Far beyond any date: a clear refusal, not a panic in date arithmetic.
        (
            vec![
                "--name",
                "Lamp",
                "--stock",
                "5",
                "--starts-in",
                "10000000000000",
            ],
            "a sale opens between now and 31536000 seconds from now",
        ),
        (
            vec!["--name", "Lamp", "--stock", "5", "--duration", "0"],
            "a sale lasts between 1 and 31536000 seconds",
        ),
    ] {
        let mut all = vec!["sale", "create"];
        all.extend(&args);
        let output = seckill_command(&scratch, &all, &[])
            .output()
            .await
            .expect("seckill sale create");
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed a sale");
    }
    assert_eq!(sale_count(&scratch).await, 0);
}

#[tokio::test]
async fn migrate_creates_the_schema_and_running_it_twice_is_harmless() {
    let scratch = Scratch::new().await;
    for _ in 0..2 {
        let output = seckill_command(&scratch, &["migrate"], &[])
            .output()
            .await
            .expect("seckill migrate");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let pg = sqlx::PgPool::connect(&scratch.database_url)
        .await
        .expect("PostgreSQL");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'public' AND table_name IN ('sales', 'orders') ORDER BY 1",
    )
    .fetch_all(&pg)
    .await
    .expect("tables");
    assert_eq!(tables, ["orders", "sales"]);
}

/// An instance name the `X-Seckill-Instance` header cannot carry made
/// every HTTP worker panic as it started, after `serve` had printed the
/// address it would listen on.
#[tokio::test]
async fn serve_refuses_an_instance_name_a_header_cannot_carry() {
    let scratch = Scratch::new().await;
    let output = seckill_command(
        &scratch,
        &["serve", "--bind", "127.0.0.1:0"],
        &[("SECKILL_INSTANCE_ID", "shop\u{1}one")],
    )
    .output()
    .await
    .expect("serve runs");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "it printed an address");
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        errors.contains("--instance-id") && errors.contains("printable ASCII"),
        "{errors}"
    );
    assert!(!errors.contains("panicked"), "{errors}");
}

/// A short admin token is guessed: `serve` refuses one shorter than 16
/// characters at start, says so, listens on nothing, and does not repeat
/// the token it refused. One of 16 starts (the tests' own token is 16).
#[tokio::test]
async fn serve_refuses_an_admin_token_shorter_than_16_characters() {
    let scratch = Scratch::new().await;
    for short in ["change-me", "fifteen-chars-x"] {
        let serve = seckill_command(
            &scratch,
            &["serve", "--bind", "127.0.0.1:0"],
            &[("SECKILL_ADMIN_TOKEN", short)],
        )
        .output();
        // A refusal comes before anything is connected, at once; a serve
        // still running after this long took the token (and is killed
        // with the future).
        let output = tokio::time::timeout(Duration::from_secs(30), serve)
            .await
            .unwrap_or_else(|_| panic!("serve started with the short token {short:?}"))
            .expect("serve runs");
        let errors = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{short:?} was accepted: {errors}");
        assert!(output.stdout.is_empty(), "it printed an address");
        assert!(
            errors.contains("SECKILL_ADMIN_TOKEN") && errors.contains("at least 16"),
            "{errors}"
        );
        assert!(!errors.contains(short), "the token is repeated: {errors}");
        assert!(!errors.contains("panicked"), "{errors}");
    }
    assert_eq!(crate::helpers::ADMIN_TOKEN.chars().count(), 16);
}

/// `docker-compose.yml` publishes the app: it has no admin token of its
/// own to fall back on, and refuses to start without one (`:?`), saying
/// how long it must be. (Docker is not on the development machine: the
/// file is read, not run.)
#[test]
fn the_compose_file_starts_the_app_only_with_an_admin_token() {
    let compose = std::fs::read_to_string(crate::helpers::repo_root().join("docker-compose.yml"))
        .expect("docker-compose.yml");
    let settings: Vec<&str> = compose
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("SECKILL_ADMIN_TOKEN:"))
        .collect();
    assert_eq!(settings.len(), 1, "{settings:?}");
    let value = settings[0]
        .trim_start_matches("SECKILL_ADMIN_TOKEN:")
        .trim();
    assert!(
        value.starts_with("${SECKILL_ADMIN_TOKEN:?") && value.ends_with('}'),
        "the app's token is not required: {value}"
    );
    assert!(
        value.contains("16 characters"),
        "the refusal does not say how long: {value}"
    );
    assert!(
        !value.contains(":-") && !value.contains("change-me"),
        "a default token: {value}"
    );
}
#[tokio::test]
async fn serve_stops_cleanly_on_sigterm() {
    let scratch = Scratch::new().await;
    let mut server = cluster(&scratch, &[]);
    let address = server.start_app("a", &[]).await.expect("serve starts");
    let health = client()
        .get(format!("{address}/healthz"))
        .send()
        .await
        .expect("GET /healthz");
    assert_eq!(health.status(), 200);
    server.signal("a", Signal::SIGTERM).expect("SIGTERM");
    let status = server
        .wait("a", Duration::from_secs(20))
        .await
        .expect("serve exits within 20 s of SIGTERM");
    assert!(status.success(), "serve exited with {status}");
}

#[tokio::test]
async fn serve_ends_open_event_streams_and_exits_cleanly_on_sigterm() {
    let scratch = Scratch::new().await;
    let mut server = cluster(&scratch, &[]);
    let address = server.start_app("a", &[]).await.expect("serve starts");
    let (_, mut stream) = a_watched_sale(&client(), &address).await;

    server.signal("a", Signal::SIGTERM).expect("SIGTERM");
    // The stream ends (cleanly, or with the connection), rather than
    // holding the shutdown up.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the event stream outlived SIGTERM by 20 s");
    let status = server
        .wait("a", Duration::from_secs(20))
        .await
        .expect("serve exits within 20 s of SIGTERM");
    assert!(status.success(), "serve exited with {status}");
}

/// A refusal that is no fault of the server's (`503` to one live page too
/// many, `404` for a sale that does not exist) is not logged as an error:
/// instances started by the demo and the lab log errors only
/// (`RUST_LOG=error`), and a loaded demo printed hundreds of such lines.
#[tokio::test]
async fn refusals_are_not_logged_as_errors() {
    let scratch = Scratch::new().await;
    let (server, address) = serve(&scratch, &["--max-event-streams", "1"], &[]).await;
    let client = client();
    let (events, first) = a_watched_sale(&client, &address).await;
    let second = client.get(&events).send().await.expect("GET events");
    assert_eq!(second.status(), 503, "one stream too many");
    let missing = client
        .get(format!("{address}/api/sales/999999999"))
        .send()
        .await
        .expect("GET a sale");
    assert_eq!(missing.status(), 404);
    drop(first);

    let output = stop(server).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("ERROR"), "{stderr}");
}

/// Whatever is logged while a request is handled names the request, with
/// the id its answer carried in `X-Request-Id`: what a user quotes when
/// reporting a failure is what finds its lines. Both where the middleware
/// logs (a cross-site form refused) and where a handler does (a buyer
/// over its rate). With the default filter, as a user runs it.
#[tokio::test]
async fn a_request_is_logged_under_the_id_its_answer_names() {
    let scratch = Scratch::new().await;
    let env = [
        ("RUST_LOG", seckill_cli::telemetry::DEFAULT_FILTER),
        // One purchase a second per buyer, none at once beyond it.
        ("SECKILL_RATE_LIMIT_PER_BUYER", "1"),
        ("SECKILL_RATE_LIMIT_BURST", "0"),
    ];
    let (server, address) = serve(&scratch, &[], &env).await;
    let client = client();
    let cross_site = client
        .post(format!("{address}/sales/1/buy"))
        .header("Origin", "http://elsewhere.example")
        .form(&[("user_id", "mallory")])
        .send()
        .await
        .expect("POST the form");
    assert_eq!(cross_site.status(), 403);
    // The limit is checked before the sale is looked up: the first gets
    // as far as finding no such sale, the second is refused. Both within
    // the second the limit counts: a round that took longer (a loaded
    // machine) is played again by another buyer.
    let mut limited = None;
    for round in 0..10 {
        let purchase = || {
            client
                .post(format!("{address}/api/sales/999999/purchase"))
                .json(&serde_json::json!({"user_id": format!("eager-{round}")}))
                .send()
        };
        let started = std::time::Instant::now();
        let first = purchase().await.expect("POST a purchase");
        assert_eq!(first.status(), 404);
        let second = purchase().await.expect("POST a purchase");
        if started.elapsed() < Duration::from_secs(1) {
            assert_eq!(second.status(), 429);
            limited = Some(second);
            break;
        }
    }
    let limited = limited.expect("a round of two purchases within a second");

    let output = stop(server).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    for (answer, path, message) in [
        (&cross_site, "/sales/1/buy", "cross-site form post refused"),
        (&limited, "/api/sales/999999/purchase", "rate limited"),
    ] {
        let id = answer.headers()["x-request-id"].to_str().expect("ASCII");
        let line = stderr
            .lines()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("{message:?} was not logged: {stderr}"));
        let span = format!(r#"request{{method=POST path="{path}" request_id={id}}}:"#);
        assert!(line.contains(&span), "{line}");
    }
}

/// `seckill serve` with `args` and `env` added, started: the process (its
/// error output piped) and the address it listens on.
async fn serve(
    scratch: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mut all = vec!["serve", "--bind", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(("SECKILL_ADMIN_TOKEN", crate::helpers::ADMIN_TOKEN));
    let mut server = seckill_command(scratch, &all, &env)
        .spawn()
        .expect("serve starts");
    let stdout = server.stdout.take().expect("piped");
    let line = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .expect("its output")
        .expect("a first line");
    let address = seckill_devenv::processes::listening_url(&line)
        .unwrap_or_else(|| panic!("not an address: {line}"))
        .to_owned();
    (server, address)
}

/// Stop `server` with SIGTERM: what it wrote, once it exited cleanly.
async fn stop(server: tokio::process::Child) -> std::process::Output {
    let pid = nix::unistd::Pid::from_raw(server.id().expect("running") as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let output = tokio::time::timeout(Duration::from_secs(20), server.wait_with_output())
        .await
        .expect("serve exits within 20 s of SIGTERM")
        .expect("its output");
    assert!(
        output.status.success(),
        "serve exited with {}",
        output.status
    );
    output
}

/// A 2-unit sale created on the instance at `address` through the admin
/// API, and its page's event stream, open (its first snapshot read).
/// Returns the stream's URL and the stream.
async fn a_watched_sale(client: &reqwest::Client, address: &str) -> (String, reqwest::Response) {
    let created = client
        .post(format!("{address}/api/sales"))
        .bearer_auth(crate::helpers::ADMIN_TOKEN)
        .json(&serde_json::json!({"name": "Lamp", "stock": 2, "price_cents": 100}))
        .send()
        .await
        .expect("POST /api/sales");
    assert_eq!(created.status(), 201);
    let sale: Value = created.json().await.expect("a sale");
    let events = format!("{address}/api/sales/{}/events", sale["id"]);
    let mut stream = client.get(&events).send().await.expect("GET events");
    crate::helpers::read_first_snapshot(&mut stream).await;
    (events, stream)
}

/// `seckill <args>`'s help as it prints it, with no SECKILL_ variable set.
fn help(args: &[&str]) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("SECKILL_")) {
        command.env_remove(name);
    }
    // One set, to show its value is not printed.
    command.env("SECKILL_REDIS_MASTER_NAME", "secret-name");
    let output = command.args(args).output().expect("seckill runs");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The help can be scanned: a command's own options first, the shared
/// Redis and PostgreSQL options under their own heading after them, only
/// those the command uses, and every environment note in one style.
#[test]
fn the_help_groups_the_shared_flags_and_shows_each_command_what_it_uses() {
    const HEADING: &str = "Where Redis and PostgreSQL are:";
    for (args, own, shown, hidden) in [
        (
            &["sale", "create", "-h"][..],
            &["--name", "--stock"][..],
            &["--database-url", "--redis-url", "--redis-prefix"][..],
            &[
                "--redis-durability",
                "--redis-replica-wait-ms",
                "--redis-wait-replicas",
            ][..],
        ),
        (
            &["migrate", "--help"],
            &["--help"],
            &["--database-url"],
            &[
                "--redis-url",
                "--redis-cluster-nodes",
                "--redis-sentinels",
                "--redis-master-name",
                "--redis-durability",
                "--redis-wait-replicas",
                "--redis-prefix",
            ],
        ),
        (
            &["reset", "-h"],
            &["--yes"],
            &["--database-url", "--redis-url"],
            &["--redis-durability", "--redis-wait-replicas"],
        ),
        (
            &["serve", "--help"],
            &["--bind", "--strategy"],
            &[
                "--redis-durability",
                "--redis-master-name",
                "--database-url",
            ],
            &[],
        ),
    ] {
        let text = help(args);
        let heading = text
            .find(HEADING)
            .unwrap_or_else(|| panic!("{args:?}: no heading {HEADING:?}: {text}"));
        for flag in own {
            let at = text
                .find(flag)
                .unwrap_or_else(|| panic!("{args:?}: {flag}"));
            assert!(at < heading, "{args:?}: {flag} under the shared heading");
        }
        for flag in shown {
            let at = text
                .find(flag)
                .unwrap_or_else(|| panic!("{args:?}: {flag}: {text}"));
            assert!(at > heading, "{args:?}: {flag} above the shared heading");
        }
        for flag in hidden {
            assert!(!text.contains(flag), "{args:?} shows {flag}: {text}");
        }
        // One style, `[env: SECKILL_X]`: never the `=value` form.
        assert!(text.contains("[env: SECKILL_"), "{args:?}: {text}");
        assert!(!text.contains("=]"), "{args:?}: {text}");
        assert!(!text.contains("secret-name"), "{args:?}: {text}");
    }
}

/// Every command's path, `seckill`'s own first: each listed under
/// "Commands:" in its parent's help, and theirs.
fn every_command(path: Vec<String>) -> Vec<Vec<String>> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let text = help(&args);
    let mut found = vec![path.clone()];
    let Some(list) = text.split("Commands:\n").nth(1) else {
        return found;
    };
    for line in list.lines().take_while(|line| !line.trim().is_empty()) {
        let name = line.trim_start();
        if line.len() - name.len() != 2 {
            continue; // a description on a line of its own
        }
        let name = name.split_whitespace().next().expect("a command's name");
        if name != "help" {
            let mut sub = path.clone();
            sub.push(name.to_owned());
            found.extend(every_command(sub));
        }
    }
    found
}

/// One style under every command: `--help` in the long layout (each
/// option's help on the lines under it: `reset` and `migrate` had theirs
/// beside it while `sale create` had the long one), and every default
/// written one way, `[default: …]` after `[env: …]` and on a line of its
/// own there (a default written by hand sat at the end of its help).
#[test]
fn every_commands_help_has_one_layout_and_writes_its_defaults_one_way() {
    let commands = every_command(Vec::new());
    for expected in [&["migrate"][..], &["reset"], &["sale", "create"], &["lab"]] {
        assert!(
            commands.iter().any(|path| path == expected),
            "{expected:?} not among {commands:?}"
        );
    }
    for path in commands {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let text = help(&args);
        let mut defaults = 0;
        for line in text.lines() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            if (2..=6).contains(&indent) && trimmed.starts_with('-') {
                assert!(
                    !trimmed.contains("  "),
                    "{args:?}: help beside its option, not under it: {line:?}\n{text}"
                );
            }
            if let Some(at) = trimmed.find("[default: ") {
                defaults += 1;
                assert!(
                    at == 0 && trimmed.ends_with(']'),
                    "{args:?}: a default not on a line of its own: {line:?}\n{text}"
                );
            }
            if let Some(at) = trimmed.find("[env: ") {
                assert!(at == 0, "{args:?}: {line:?}\n{text}");
            }
        }
        // `-h`: the notes beside the help, the environment first.
        args.pop();
        args.push("-h");
        let short = help(&args).split_whitespace().collect::<Vec<_>>().join(" ");
        for (at, _) in short.match_indices("[default: ") {
            let after = &short[at..];
            let end = after.find(']').expect("a closed note");
            assert!(
                !after[end..].starts_with("] [env: "),
                "{args:?}: a default before its variable: {short}"
            );
        }
        assert_eq!(
            defaults,
            short.matches("[default: ").count(),
            "{args:?}: -h and --help show other defaults"
        );
    }
    let create = help(&["sale", "create", "--help"]);
    assert!(
        create.contains("\n          [default: no end]\n"),
        "{create}"
    );
}

/// Every line of help says something: `chaos -h` describes
/// `--compare-durability`, and `reset`'s description is whole.
#[test]
fn the_help_describes_every_option_and_ends_its_sentences() {
    let chaos = help(&["chaos", "-h"]);
    let line = chaos
        .lines()
        .position(|line| line.trim_start().starts_with("--compare-durability"))
        .expect("--compare-durability listed");
    let described = chaos.lines().nth(line).expect("the line").len()
        > "      --compare-durability".len() + 2
        || chaos
            .lines()
            .nth(line + 1)
            .is_some_and(|next| !next.trim_start().starts_with('-') && !next.trim().is_empty());
    assert!(described, "{chaos}");
    let reset = help(&["reset", "--help"]);
    let about = reset.lines().next().expect("a description");
    assert!(
        about.ends_with("refuses while a seckill process runs"),
        "{about}"
    );
}

/// Each option of `seckill <args> --help`, and whether its help names an
/// environment variable.
fn options_and_env(args: &[&str]) -> Vec<(String, bool)> {
    let text = help(args);
    let mut options: Vec<(String, bool)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let name = trimmed
            .strip_prefix("-h, ")
            .or_else(|| trimmed.strip_prefix("-V, "))
            .unwrap_or(trimmed);
        if (2..=6).contains(&indent) && name.starts_with("--") {
            let flag = name.split([' ', '=']).next().unwrap_or(name).to_owned();
            options.push((flag, false));
        } else if line.contains("[env: ")
            && let Some(last) = options.last_mut()
        {
            last.1 = true;
        }
    }
    options
        .into_iter()
        .filter(|(flag, _)| flag != "--help" && flag != "--version")
        .collect()
}

/// docs/storefront.md says which options the environment can set: every
/// one of `serve` and `worker`, and the shared ones; the options of
/// `sale create`, `reset` and the tools are flags only.
#[test]
fn the_environment_sets_the_options_the_docs_say_it_does() {
    let storefront =
        std::fs::read_to_string(crate::helpers::repo_root().join("docs/storefront.md"))
            .expect("docs/storefront.md");
    assert!(
        storefront.contains("The options of `serve` and `worker`, and the shared ones")
            && !storefront.contains("Every flag can also be set from the environment"),
        "docs/storefront.md no longer says which options the environment sets"
    );
    let shared: Vec<String> = options_and_env(&["serve", "--help"])
        .into_iter()
        .map(|(flag, _)| flag)
        .filter(|flag| flag.starts_with("--redis-") || flag == "--database-url")
        .collect();
    assert!(shared.len() >= 8, "{shared:?}");
    for args in [&["serve", "--help"][..], &["worker", "--help"]] {
        for (flag, env) in options_and_env(args) {
            assert!(env, "{args:?}: {flag} has no environment variable");
        }
    }
    for args in [
        &["sale", "create", "--help"][..],
        &["reset", "--help"],
        &["demo", "--help"],
        &["lab", "--help"],
        &["chaos", "--help"],
    ] {
        for (flag, env) in options_and_env(args) {
            assert_eq!(
                env,
                shared.contains(&flag),
                "{args:?}: {flag}: only the shared options have a variable"
            );
        }
    }
}

/// `seckill reset --yes` refuses while a `seckill serve` runs on its
/// database and prefix, names it, and deletes nothing; once it is
/// stopped, the reset goes through.
#[tokio::test]
async fn reset_refuses_while_a_server_runs_on_its_database() {
    let scratch = Scratch::new().await;
    let (server, address) = serve(&scratch, &[], &[]).await;
    let id = crate::helpers::create_sale_at(&address, "Lamp", 2).await;
    let reset = || async {
        seckill_command(&scratch, &["reset", "--yes"], &[])
            .output()
            .await
            .expect("reset runs")
    };
    let refused = reset().await;
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "{said}");
    let pid = server.id().expect("running");
    assert!(
        said.contains(&format!("pid {pid}: seckill serve")) && said.contains("nothing was deleted"),
        "{said}"
    );
    let pg = scratch.pg().await;
    let sales: i64 = sqlx::query_scalar("SELECT count(*) FROM sales")
        .fetch_one(&pg)
        .await
        .expect("count");
    assert_eq!(sales, 1, "sale {id} is still there");

    stop(server).await;
    let done = reset().await;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let sales: i64 = sqlx::query_scalar("SELECT count(*) FROM sales")
        .fetch_one(&pg)
        .await
        .expect("count");
    assert_eq!(sales, 0);
}

/// `serve` and `worker` each print one line on stdout, which whoever
/// started them reads. With nobody reading it (the reading end already
/// closed) each stops with an error that says so, not a panic (exit 101),
/// as any other failure to start does.
#[tokio::test]
async fn serve_and_worker_with_nobody_reading_their_stdout_stop_with_an_error() {
    let scratch = Scratch::new().await;
    for args in [&["serve", "--bind", "127.0.0.1:0"][..], &["worker"][..]] {
        let (reading, writing) = nix::unistd::pipe().expect("a pipe");
        drop(reading);
        let mut command = seckill_command(&scratch, args, &[]);
        command.stdout(std::process::Stdio::from(writing));
        // Not `output()`: tokio's makes stdout a pipe of its own again.
        let child = command.spawn().expect("started");
        let output = tokio::time::timeout(crate::processes::RUN_LIMIT, child.wait_with_output())
            .await
            .expect("it stopped in time")
            .expect("its output");
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {said}");
        assert!(said.contains("writing to stdout"), "{args:?}: {said}");
    }
}
