//! One owner per table: no SQL outside `crates/seckill-core/src/store/`
//! (`ARCHITECTURE.md`, "Arrows that must never exist"). The check reads
//! the code of every crate (comments and strings left out) for the ways
//! into sqlx's queries: a path `sqlx::query…` or `sqlx::raw_sql` (the
//! functions and the `query!` macros alike), a `use` that brings one of
//! them or sqlx's `Executor` (whose `execute` takes a `&str`) into scope,
//! a glob import of sqlx, or sqlx under another name. What the query says
//! does not matter: SQL built with `format!` or `concat!`, or opening with
//! a comment, is found like any other. The files outside `store/` allowed
//! to speak SQL are listed below, each with its reason. (Tests, which set
//! up and read their own databases, are not checked.)

use std::collections::BTreeSet;
use std::path::Path;

use crate::helpers::repo_root;
use crate::helpers::source::{code_only, rust_files};

/// Files outside `store/` that may call sqlx's queries, and why.
const ALLOWED: [(&str, &str); 5] = [
    (
        "crates/seckill-core/src/probe.rs",
        "the health probe's `SELECT 1`: whether PostgreSQL answers, on no table",
    ),
    (
        "crates/seckill-devenv/src/services/postgres_server.rs",
        "a private server's databases, created and dropped (`CREATE DATABASE`), and a bench run's advisory lock, on no table",
    ),
    (
        "crates/seckill-tools/src/bench/baseline.rs",
        "the bench's baseline writes a temporary copy of orders, rolled back",
    ),
    (
        "crates/seckill-tools/src/bench/cpu.rs",
        "the capacity rows' clock asks `pg_stat_activity` which server processes serve other databases, on no table",
    ),
    (
        "crates/seckill-loadtest/src/verify/mod.rs",
        "the load test's verifier reads PostgreSQL from outside the app, by table name",
    ),
];

/// The names that lead into sqlx's queries.
fn is_a_way_in(name: &str) -> bool {
    name.starts_with("query") || name == "raw_sql" || name == "Executor" || name == "*"
}

/// Each way into sqlx's queries in `source`, as the code names it:
/// `sqlx::query_as`, `sqlx::{Row, query}`, `sqlx as db`.
fn ways_into_sqlx(source: &str) -> Vec<String> {
    let code = code_only(source);
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (at, _) in code.match_indices("sqlx") {
        let before = code[..at].chars().next_back();
        let rest = &code[at + "sqlx".len()..];
        if before.is_some_and(is_word) || rest.starts_with(is_word) {
            continue;
        }
        if let Some(alias) = rest.trim_start().strip_prefix("as ") {
            let alias: String = alias
                .trim_start()
                .chars()
                .take_while(|c| is_word(*c))
                .collect();
            found.push(format!("sqlx as {alias}"));
            continue;
        }
        let Some(path) = rest.strip_prefix("::") else {
            continue;
        };
        // The path up to where it ends: the rest of a `use` tree (groups
        // included), or a call's path up to its arguments.
        let end = if path.trim_start().starts_with('{') || code[..at].trim_end().ends_with("use") {
            path.find(';').unwrap_or(path.len())
        } else {
            path.find(|c: char| !(is_word(c) || c == ':'))
                .unwrap_or(path.len())
        };
        let path = &path[..end];
        let names = path
            .split(|c: char| !(is_word(c) || c == '*'))
            .filter(|name| !name.is_empty());
        if names.clone().any(is_a_way_in) {
            found.push(format!(
                "sqlx::{}",
                path.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    found
}

/// Every file outside `store/` with a way into sqlx's queries, with what
/// it is.
fn sql_outside_the_store(root: &Path) -> BTreeSet<(String, String)> {
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        sources.push(entry.path().join("src"));
    }
    let store = root.join("crates/seckill-core/src/store");
    let mut found = BTreeSet::new();
    for file in sources
        .iter()
        .filter(|dir| dir.is_dir())
        .flat_map(|dir| rust_files(dir))
    {
        if file.starts_with(&store) {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("a source file");
        let relative = file.strip_prefix(root).expect("under the root");
        for way in ways_into_sqlx(&source) {
            found.insert((relative.display().to_string(), way));
        }
    }
    found
}

#[test]
fn no_sql_outside_the_store() {
    let root = repo_root().canonicalize().expect("the repository");
    let found = sql_outside_the_store(&root);
    let allowed: BTreeSet<&str> = ALLOWED.iter().map(|(file, _)| *file).collect();
    let strays: Vec<_> = found
        .iter()
        .filter(|(file, _)| !allowed.contains(file.as_str()))
        .collect();
    assert!(
        strays.is_empty(),
        "sqlx queries outside crates/seckill-core/src/store/: {strays:#?}"
    );
    // An exception that no longer applies comes off the list.
    for (file, why) in ALLOWED {
        assert!(
            found.iter().any(|(f, _)| f == file),
            "{file} calls no sqlx query any more ({why}): remove it from ALLOWED"
        );
    }
}

/// The checker finds every way in, however the SQL is written, and none
/// in comments, strings or sqlx's other names.
#[test]
fn the_checker_finds_every_way_into_sqlx_and_nothing_else() {
    let found = |source: &str| ways_into_sqlx(source);
    for source in [
        r#"sqlx::query(&format!("DELETE FROM {T}")).execute(pool)"#,
        r#"sqlx::query(concat!("DELETE ", "FROM orders"))"#,
        "sqlx::query(\"-- why\\nDELETE FROM orders\")",
        r#"sqlx::query_as::<_, (i64,)>("SELECT 1")"#,
        r#"sqlx::query_scalar!("SELECT sold FROM sales")"#,
        r#"sqlx::raw_sql("TRUNCATE orders")"#,
        "use sqlx::{PgPool, query};",
        "use sqlx::{\n    postgres::PgRow,\n    query_as,\n};",
        "use sqlx::Executor as _;",
        "use sqlx::prelude::*;",
        "use sqlx as db;",
    ] {
        assert_eq!(
            found(source).len(),
            1,
            "not found in {source:?}: {:?}",
            found(source)
        );
    }
    for source in [
        r#"// sqlx::query("DELETE FROM orders")"#,
        r#"/* sqlx::query("x") */ let s = "sqlx::query(x)";"#,
        "fn f(e: &sqlx::Error) -> bool { matches!(e, sqlx::Error::PoolTimedOut) }",
        "use sqlx::PgPool;\nuse sqlx::Row;\nuse sqlx::postgres::PgConnection;",
        "let mysqlx::query = 1; my_sqlx::query();",
    ] {
        assert!(
            found(source).is_empty(),
            "found in {source:?}: {:?}",
            found(source)
        );
    }
}
