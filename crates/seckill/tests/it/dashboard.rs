//! The monitoring profile's files (`deploy/`, `docker compose --profile
//! monitoring up`): the Grafana dashboard has what Grafana needs, graphs
//! only figures the app exports, and is provisioned where the compose file
//! puts it; Prometheus scrapes the compose file's app. Docker cannot run
//! here, so these checks are what stands between a renamed metric and an
//! empty panel.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{eventually, spawn_app};
use crate::room_figures::room_buyers;

/// A file of `deploy/`, from the repository's root.
fn deploy(path: &str) -> String {
    let path = crate::helpers::repo_root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A YAML file written in JSON's syntax (as `deploy/` writes them, so that
/// they can be read here), its `#` comment lines left out.
fn json_yaml(path: &str) -> Value {
    let text: String = deploy(path)
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&deploy("deploy/grafana/seckill.json")).expect("the dashboard is JSON")
}

/// Every series name an expression of the dashboard asks for.
fn metric_names(dashboard: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expr");
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("seckill_") {
                    names.insert(word.to_owned());
                }
            }
        }
    }
    names
}

#[test]
fn the_dashboard_has_what_grafana_needs_and_names_the_provisioned_datasource() {
    let dashboard = dashboard();
    let datasources = json_yaml("deploy/grafana/provisioning/datasources/prometheus.yaml");
    let uid = datasources["datasources"][0]["uid"]
        .as_str()
        .expect("the datasource's uid");
    assert_eq!(dashboard["uid"], "seckill");
    assert!(dashboard["title"].is_string());
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "a panel per figure");
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("a title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "{title}: id taken"
        );
        for field in ["h", "w", "x", "y"] {
            assert!(panel["gridPos"][field].is_u64(), "{title}: gridPos.{field}");
        }
        assert_eq!(panel["datasource"]["uid"], uid, "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], uid, "{title}");
            assert!(target["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
    // Every figure the app counts has a panel.
    let graphed: BTreeSet<String> = metric_names(&dashboard)
        .into_iter()
        .map(|name| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .fold(name, |name, suffix| {
                    name.trim_end_matches(suffix).to_owned()
                })
        })
        .collect();
    for figure in [
        "seckill_purchases_total",
        "seckill_purchase_seconds",
        "seckill_lock_wait_seconds",
        "seckill_lock_fenced_total",
        "seckill_queue_jobs",
        "seckill_worker_batch_size",
        "seckill_worker_commit_seconds",
        "seckill_orders_total",
        "seckill_redis_loads_total",
        "seckill_event_streams",
        "seckill_room_buyers",
    ] {
        assert!(graphed.contains(figure), "no panel graphs {figure}");
    }
}

#[tokio::test]
async fn every_series_the_dashboard_queries_is_one_the_app_exports() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    assert_eq!(app.purchase(sale, "bob").await.status(), 409);
    app.drain().await;
    let scrape = app.get_text("/metrics").await;
    let exported: BTreeSet<&str> = scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .collect();
    for name in metric_names(&dashboard()) {
        assert!(
            exported.contains(name.as_str()),
            "the dashboard queries {name}, which /metrics does not export:\n{scrape}"
        );
    }
}

/// The room states a dashboard expression picks of `seckill_room_buyers`
/// (`state="x"` or `state=~"x|y"`).
fn room_states_graphed(dashboard: &Value) -> BTreeSet<String> {
    let mut states = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expr");
            for part in expr.split("seckill_room_buyers{").skip(1) {
                let picked = part
                    .trim_start_matches("state=~\"")
                    .trim_start_matches("state=\"");
                let picked = picked.split('"').next().expect("a selector");
                states.extend(picked.split('|').map(str::to_owned));
            }
        }
    }
    states
}

#[tokio::test]
async fn the_room_panels_show_every_state_the_app_reports_and_the_admission_rate() {
    let app = spawn_app().await;
    // The registry is the test process', shared with the other tests'
    // apps: a scrape of theirs may reset the rooms' figures during ours.
    let reported = std::cell::RefCell::new(BTreeSet::new());
    let every = ["waiting", "admitted", "bought", "expired", "abandoned"];
    eventually(
        Duration::from_secs(10),
        "/metrics to report every room state",
        || async {
            let states: BTreeSet<String> = room_buyers(&app.get_text("/metrics").await)
                .into_keys()
                .collect();
            let whole = every.iter().all(|state| states.contains(*state));
            *reported.borrow_mut() = states;
            whole
        },
    )
    .await;
    let reported = reported.into_inner();
    let dashboard = dashboard();
    let graphed = room_states_graphed(&dashboard);
    for state in &reported {
        assert!(graphed.contains(state), "no room panel shows {state}");
    }
    let rate = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| panel["targets"].as_array().expect("targets"))
        .filter_map(|target| target["expr"].as_str())
        .any(|expr| expr.contains("deriv(seckill_room_buyers{state=\"admissions\"}"));
    assert!(rate, "no panel graphs the admission rate");
}

#[test]
fn prometheus_scrapes_the_compose_app_and_grafana_is_given_the_dashboard() {
    let compose = deploy("docker-compose.yml");
    let prometheus = json_yaml("deploy/prometheus.yml");
    let target = prometheus["scrape_configs"][0]["static_configs"][0]["targets"][0]
        .as_str()
        .expect("a scrape target");
    assert_eq!(target, "app:8080");
    assert!(compose.contains("\n  app:\n"), "no app service");
    assert!(compose.contains("SECKILL_BIND: 0.0.0.0:8080"));
    // What the compose file mounts exists, and the dashboards' provider
    // reads the folder the dashboard is mounted in.
    for mounted in [
        "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml",
        "./deploy/grafana/provisioning:/etc/grafana/provisioning",
        "./deploy/grafana/seckill.json:/var/lib/grafana/dashboards/seckill.json",
    ] {
        assert!(compose.contains(mounted), "not mounted: {mounted}");
        let local = mounted.split(':').next().expect("a path");
        assert!(
            crate::helpers::repo_root().join(local).exists(),
            "{local} is missing"
        );
    }
    let providers = json_yaml("deploy/grafana/provisioning/dashboards/seckill.yaml");
    assert_eq!(
        providers["providers"][0]["options"]["path"],
        "/var/lib/grafana/dashboards"
    );
    let datasources = json_yaml("deploy/grafana/provisioning/datasources/prometheus.yaml");
    assert_eq!(
        datasources["datasources"][0]["url"],
        "http://prometheus:9090"
    );
    assert!(compose.contains("\n  prometheus:\n") && compose.contains("\n  grafana:\n"));
}
