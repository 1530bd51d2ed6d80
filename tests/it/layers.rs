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

/// The top-level modules `src/lib.rs` declares.
fn declared_modules() -> BTreeSet<String> {
    std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs"))
        .expect("reading src/lib.rs")
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';').to_owned())
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

/// The top-level module a file of `src/` belongs to: `src/x.rs` and
/// `src/x/...` are `x`. `None` for the crate root and the binaries.
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(Path::new(ROOT).join("src")).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" | "bin" => None,
        name => Some(name.trim_end_matches(".rs").to_owned()),
    }
}

/// The modules a file's code refers to through `crate::`, comments left out
/// (a doc comment may name a module above it: that is a pointer for the
/// reader, not an arrow).
fn references(source: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}`: every name at the group's top.
                let inner = group.split('}').next().unwrap_or_default();
                found.extend(inner.split(',').filter_map(|item| first_name(item.trim())));
            } else if let Some(name) = first_name(rest) {
                found.insert(name);
            }
        }
    }
    found
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
        let Some(from) = module_of(&file) else {
            continue;
        };
        let source = std::fs::read_to_string(&file).expect("reading a source file");
        let mut to = references(&source);
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
fn the_checker_sees_grouped_and_inline_references_and_skips_comments() {
    let source = "use crate::{keys, store::Store};\n\
                  let x = crate::backoff::after(1);\n\
                  //! see [`crate::demo`]\n\
                  let y = 1; // crate::web";
    let found: Vec<_> = references(source).into_iter().collect();
    assert_eq!(found, ["backoff", "keys", "store"]);
}
