//! One owner per table: no SQL on the app's tables outside
//! `crates/seckill-core/src/store/` (`ARCHITECTURE.md`, "Arrows that must
//! never exist"). The check reads the sources: every string literal of
//! every crate that opens with a SQL statement and names a table the
//! migrations create is SQL on that table. The exceptions
//! `ARCHITECTURE.md` allows are listed below, each with its reason.
//! (Tests, which set up and read their own databases, are not checked.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::helpers::repo_root;

/// Files outside `store/` that may speak SQL naming the app's tables.
const ALLOWED: [(&str, &str); 2] = [
    (
        "crates/seckill-tools/src/bench/baseline.rs",
        "the bench's baseline writes a temporary copy of orders, rolled back",
    ),
    (
        "crates/seckill-loadtest/src/verify.rs",
        "the load test's verifier reads PostgreSQL from outside the app, by table name",
    ),
];

/// The statements a literal of SQL opens with.
const STATEMENTS: [&str; 10] = [
    "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "CREATE", "ALTER", "DROP", "TRUNCATE", "COPY",
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The tables the migrations create.
fn app_tables() -> BTreeSet<String> {
    let dir = repo_root().join("crates/seckill-core/migrations");
    let mut tables = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("the migrations").flatten() {
        let sql = std::fs::read_to_string(entry.path()).expect("a migration");
        for rest in sql.split("CREATE TABLE ").skip(1) {
            let name = rest.trim_start_matches("IF NOT EXISTS ");
            let name: String = name.chars().take_while(|c| is_word(*c)).collect();
            tables.insert(name);
        }
    }
    assert!(tables.contains("orders"), "no tables found: {tables:?}");
    tables
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The string literals of a Rust source, comments skipped: `"…"` with its
/// escapes, raw strings `r#"…"#`, and not the `"` of a character
/// literal (`'"'`).
fn string_literals(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let (mut literals, mut i) = (Vec::new(), 0);
    while i < chars.len() {
        let rest = &chars[i..];
        let after_word = i > 0 && is_word(chars[i - 1]);
        if rest.starts_with(&['/', '/']) {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if rest.starts_with(&['/', '*']) {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i..].starts_with(&['/', '*']) {
                    (depth, i) = (depth + 1, i + 2);
                } else if chars[i..].starts_with(&['*', '/']) {
                    (depth, i) = (depth - 1, i + 2);
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if chars[i] == '\'' {
            // A character ('"', '\n', '\u{1F600}') or a lifetime ('a).
            if rest.get(1) == Some(&'\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if rest.get(2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if chars[i] == 'r' && !after_word && matches!(rest.get(1), Some('"' | '#')) {
            let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
            if rest.get(1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain((0..hashes).map(|_| '#'))
                .collect();
            let start = i + 2 + hashes;
            i = start;
            while i < chars.len() && !chars[i..].starts_with(&close) {
                i += 1;
            }
            literals.push(chars[start..i.min(chars.len())].iter().collect());
            i += close.len();
        } else if chars[i] == '"' {
            let mut literal = String::new();
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    literal.push(c);
                }
                i += 1;
            }
            literals.push(literal);
            i += 1;
        } else {
            i += 1;
        }
    }
    literals
}

/// The app's table a literal of SQL names, if it is one.
fn sql_on<'t>(literal: &str, tables: &'t BTreeSet<String>) -> Option<&'t str> {
    let first: String = literal
        .trim_start()
        .chars()
        .take_while(|c| is_word(*c))
        .collect();
    if !STATEMENTS.contains(&first.to_ascii_uppercase().as_str()) {
        return None;
    }
    let words: BTreeSet<String> = literal
        .split(|c: char| !is_word(c))
        .map(str::to_ascii_lowercase)
        .collect();
    tables
        .iter()
        .find(|t| words.contains(*t))
        .map(String::as_str)
}

/// Every file with SQL naming one of the app's tables, outside `store/`,
/// with what it names.
fn sql_outside_the_store(root: &Path) -> BTreeSet<(String, String)> {
    let tables = app_tables();
    let mut sources = vec![root.join("crates/seckill-loadtest/src")];
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
        for literal in string_literals(&source) {
            if let Some(table) = sql_on(&literal, &tables) {
                found.insert((
                    relative.display().to_string(),
                    format!("{table}: {literal}"),
                ));
            }
        }
    }
    found
}

#[test]
fn no_sql_on_the_apps_tables_outside_the_store() {
    let root = repo_root().canonicalize().expect("the repository");
    let found = sql_outside_the_store(&root);
    let allowed: BTreeSet<&str> = ALLOWED.iter().map(|(file, _)| *file).collect();
    let strays: Vec<_> = found
        .iter()
        .filter(|(file, _)| !allowed.contains(file.as_str()))
        .collect();
    assert!(
        strays.is_empty(),
        "SQL on the app's tables outside crates/seckill-core/src/store/: {strays:#?}"
    );
    // An exception that no longer applies comes off the list.
    for (file, why) in ALLOWED {
        assert!(
            found.iter().any(|(f, _)| f == file),
            "{file} has no SQL on the app's tables any more ({why}): remove it from ALLOWED"
        );
    }
}

/// The checker sees SQL in every kind of literal, and none in comments.
#[test]
fn the_checker_finds_sql_in_literals_and_not_in_comments() {
    let tables: BTreeSet<String> = ["orders".to_owned(), "sales".to_owned()].into();
    let source = r###"
        // sqlx::query("SELECT * FROM orders")
        /* "UPDATE sales SET sold = 0" */
        const Q: char = '"'; let a = "DELETE FROM orders WHERE id = $1";
        let b = r#"
            SELECT sold FROM sales"#;
        let c = "a conditional UPDATE on orders, in words";
        let d = "SELECT 1";
    "###;
    let found: Vec<&str> = string_literals(source)
        .iter()
        .filter_map(|literal| sql_on(literal, &tables))
        .collect();
    assert_eq!(found, ["orders", "sales"]);
}
