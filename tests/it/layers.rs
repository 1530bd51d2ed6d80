//! The layers of `ARCHITECTURE.md`, kept true: every reference from one
//! module of `src/` to another (`use crate::x`, or a path `crate::x::...`)
//! points down the table, or across one layer without a cycle.
//!
//! The table is read from `ARCHITECTURE.md` itself, so the map and this
//! check cannot drift apart: a module added to `src/lib.rs` without a row
//! there fails here too. The binaries (`src/main.rs`, `src/bin/`) sit on top
//! of every layer and are not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Module name -> layer, from the rows `| N | what | `a`, `b` |` of the
/// layer table in ARCHITECTURE.md.
fn layers() -> BTreeMap<String, u32> {
    let map = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md"))
        .expect("reading ARCHITECTURE.md");
    let mut layers = BTreeMap::new();
    for row in map.lines() {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // A row is ["", layer, what, modules, ""].
        let Some(layer) = cells.get(1).and_then(|cell| cell.parse::<u32>().ok()) else {
            continue;
        };
        for module in cells[3].split(',').map(|m| m.trim().trim_matches('`')) {
            let earlier = layers.insert(module.to_owned(), layer);
            assert!(earlier.is_none(), "{module} is in two layers");
        }
    }
    assert!(!layers.is_empty(), "no layer table in ARCHITECTURE.md");
    layers
}

/// The top-level modules `src/lib.rs` declares, public or not.
fn declared_modules() -> BTreeSet<String> {
    let lib =
        std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).expect("reading src/lib.rs");
    strip_comments(&lib)
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("mod ").or_else(|| {
                let after_pub = line.strip_prefix("pub")?;
                let after_vis = match after_pub.strip_prefix('(') {
                    Some(inner) => inner.split_once(')')?.1,
                    None => after_pub,
                };
                after_vis.trim_start().strip_prefix("mod ")
            })?;
            Some(rest.trim_end_matches(';').trim().to_owned())
        })
        .collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("reading src/").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The module path of a file of `src/`: `src/x.rs` and `src/x/mod.rs` are
/// `[x]`, `src/x/y.rs` is `[x, y]`. Empty for the crate root and the
/// binaries, which are not checked.
fn module_path(file: &Path) -> Vec<String> {
    let Ok(relative) = file.strip_prefix(Path::new(ROOT).join("src")) else {
        return Vec::new();
    };
    let mut path: Vec<String> = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|c| c.trim_end_matches(".rs").to_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    match path.first().map(String::as_str) {
        None | Some("lib" | "main" | "bin") => Vec::new(),
        Some(_) => path,
    }
}

/// `source` with its comments left out (string literals kept whole, so a
/// `//` inside one does not cut a line short). A doc comment may name a
/// module above its own: that is a pointer for the reader, not an arrow.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push(c);
                while let Some(c) = chars.next() {
                    out.push(c);
                    if c == '\\' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if c == '"' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The top-level modules a file refers to, from its module path `at`:
/// `crate::x`, `use crate::{x, y::{z}}` over any number of lines, and
/// `super::` paths that climb out of the file's top-level module.
fn references_from(at: &[String], source: &str) -> BTreeSet<String> {
    let code = strip_comments(source);
    let mut found = BTreeSet::new();
    for (start, _) in code.char_indices() {
        let rest = &code[start..];
        // A path starts a word: `my_crate::x` is no `crate::` path.
        let starts_word = !code[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if !starts_word {
            continue;
        }
        if let Some(path) = rest.strip_prefix("crate::") {
            found.extend(tree_heads(path));
        } else if rest.starts_with("super::") {
            let (mut climbed, mut path) = (0, rest);
            while let Some(next) = path.strip_prefix("super::") {
                climbed += 1;
                path = next;
            }
            // Out of the top-level module: the next name is a top-level one.
            if climbed >= at.len() {
                found.extend(tree_heads(path));
            }
        }
    }
    found
}

/// The first names of a use tree: `x::y` gives `x`; `{a, b::{c, d}}` gives
/// `a` and `b`.
fn tree_heads(tree: &str) -> Vec<String> {
    let tree = tree.trim_start();
    let Some(group) = tree.strip_prefix('{') else {
        return first_name(tree).into_iter().collect();
    };
    let mut heads = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.extend(first_name(item.trim()));
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    heads.extend(first_name(item.trim()));
    heads
}

fn first_name(path: &str) -> Option<String> {
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Arrows between top-level modules: from -> the modules it refers to.
fn arrows() -> BTreeMap<String, BTreeSet<String>> {
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&Path::new(ROOT).join("src")) {
        let at = module_path(&file);
        let Some(from) = at.first().cloned() else {
            continue;
        };
        let source = std::fs::read_to_string(&file).expect("reading a source file");
        let mut to = references_from(&at, &source);
        to.remove(&from);
        arrows.entry(from).or_default().extend(to);
    }
    arrows
}

#[test]
fn every_module_of_the_crate_has_a_layer_in_architecture_md() {
    let layers = layers();
    let declared = declared_modules();
    let missing: Vec<_> = declared
        .iter()
        .filter(|m| !layers.contains_key(*m))
        .collect();
    let stale: Vec<_> = layers.keys().filter(|m| !declared.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "modules with no layer in ARCHITECTURE.md: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md lists modules that do not exist: {stale:?}"
    );
}

#[test]
fn no_module_refers_to_a_module_of_a_higher_layer() {
    let layers = layers();
    let mut upward = Vec::new();
    for (from, targets) in arrows() {
        for to in targets {
            let (Some(low), Some(high)) = (layers.get(&from), layers.get(&to)) else {
                continue;
            };
            if high > low {
                upward.push(format!("{from} (layer {low}) -> {to} (layer {high})"));
            }
        }
    }
    assert!(upward.is_empty(), "arrows pointing up: {upward:#?}");
}

#[test]
fn modules_of_one_layer_refer_to_each_other_without_a_circle() {
    let arrows = arrows();
    // Depth-first search from every module; a module met again while it is
    // still on the path closes a circle.
    fn visit(
        module: &str,
        arrows: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut circle = path[start..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if !done.insert(module.to_owned()) {
            return None;
        }
        path.push(module.to_owned());
        for next in arrows.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, arrows, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in arrows.keys() {
        let circle = visit(module, &arrows, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "a circle: {}",
            circle.unwrap().join(" -> ")
        );
    }
}

#[test]
fn the_checker_sees_every_way_of_naming_a_module_and_skips_comments() {
    let check = |path: &[&str], source: &str| -> Vec<String> {
        let at: Vec<String> = path.iter().map(|p| p.to_string()).collect();
        references_from(&at, source).into_iter().collect()
    };
    let none: Vec<String> = Vec::new();
    // Grouped, nested, over several lines, and inline paths.
    assert_eq!(
        check(
            &["demo"],
            "use crate::{\n    keys,\n    store::{self, Store},\n    web,\n};"
        ),
        ["keys", "store", "web"]
    );
    assert_eq!(
        check(&["demo"], "let x = crate::backoff::after(1);"),
        ["backoff"]
    );
    // Comments are pointers for the reader, not arrows; a `//` inside a
    // string literal is not a comment.
    assert_eq!(
        check(&["demo"], "//! see [`crate::web`]\n/* crate::cli */"),
        none
    );
    assert_eq!(
        check(
            &["demo"],
            "let u = \"redis://x\"; let y = crate::probe::ping;"
        ),
        ["probe"]
    );
    // `super::` from a top-level file names a top-level module; from a
    // nested file it stays home unless it climbs out.
    assert_eq!(check(&["store"], "use super::web;"), ["web"]);
    assert_eq!(check(&["store", "orders"], "use super::Store;"), none);
    assert_eq!(
        check(&["store", "orders"], "use super::super::web::X;"),
        ["web"]
    );
    // A name that merely ends in "crate" is no path.
    assert_eq!(check(&["demo"], "let x = my_crate::web;"), none);
}
