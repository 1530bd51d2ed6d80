//! The layers, kept true inside each crate, and the arrows between crates
//! that Cargo would let by.
//!
//! Across crates, Cargo keeps the arrows that point up: a crate can name
//! only the crates it depends on, and refuses a circle, so `seckill-core`
//! using `seckill-web` fails to compile. An arrow sideways makes no circle
//! (`seckill-web` on `seckill-devenv`, `seckill-loadtest` on
//! `seckill-core`): the `Cargo.toml`s are read for the ones
//! `ARCHITECTURE.md` forbids. Inside one crate the compiler lets any module use any other, so this
//! test reads the `crate::` and `super::` paths of every file of
//! `crates/*/src` and refuses:
//!
//! - a circle, between files (`admin.rs` uses `api.rs`, which uses
//!   `admin.rs`) or between the top-level modules of a crate (a module and
//!   the modules inside it are one room: `x` using `x::y`, or `x::y` using
//!   `x`, is no circle);
//! - in `seckill-core`, a reference that points up the layer table of
//!   `ARCHITECTURE.md`, or a module of its `lib.rs` missing from the table.
//!
//! Unit tests (everything after a file's first `#[cfg(test)]`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::helpers::repo_root;
use crate::helpers::source::{code_only, rust_files};

/// A module's path inside its crate: `[]` is the crate's root, `[a, b]` is
/// `a::b` (the file `a/b.rs` or `a/b/mod.rs`).
type Module = Vec<String>;

/// Module name -> layer, from the rows `| N | what | `a`, `b` |` of the
/// layer table in ARCHITECTURE.md.
fn core_layers() -> BTreeMap<String, u32> {
    let map = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md"))
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

/// The module of a file, relative to its crate's `src/`; `None` for the
/// extra binaries of `src/bin/`, which are crate roots of their own.
fn module_of(relative: &Path) -> Option<Module> {
    let mut path: Module = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|c| c.trim_end_matches(".rs").to_owned())
        .collect();
    if path.first().is_some_and(|first| first == "bin") {
        return None;
    }
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    Some(path)
}

/// The module paths a file names, each as written from the crate's root:
/// `crate::a::b`, `crate::{a, b::c}`, `super::x` (from `at`).
fn references(at: &Module, source: &str) -> Vec<Module> {
    let code = code_only(source.split("#[cfg(test)]").next().unwrap_or_default());
    let mut found = Vec::new();
    let words: Vec<(usize, &str)> = code
        .match_indices(|c: char| !(c.is_alphanumeric() || c == '_'))
        .scan(0, |start, (index, sep)| {
            let word = (*start, &code[*start..index]);
            *start = index + sep.len();
            Some(word)
        })
        .filter(|(_, word)| *word == "crate" || *word == "super")
        .collect();
    for (start, word) in words {
        // `super` continuing a path (`crate::x::super`) is not a root.
        if code[..start].ends_with("::") {
            continue;
        }
        let mut base: Module = if word == "crate" {
            Vec::new()
        } else {
            at.clone()
        };
        let mut rest = &code[start + word.len()..];
        if word == "super" {
            base.pop();
            while let Some(after) = rest.strip_prefix("::super") {
                base.pop();
                rest = after;
            }
        }
        let Some(rest) = rest.strip_prefix("::") else {
            continue;
        };
        for tail in path_tails(rest) {
            let mut module = base.clone();
            module.extend(tail);
            found.push(module);
        }
    }
    found
}

/// The paths that follow `crate::`: one (`a::b::C`), or one per item of a
/// group (`{a, b::{c, d}}`), each its names up to the first that is not a
/// module name (lower-case).
fn path_tails(rest: &str) -> Vec<Module> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        return group_items(group)
            .into_iter()
            .flat_map(path_tails)
            .collect();
    }
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() || name == "self" {
        return vec![Vec::new()];
    }
    let tails = match rest[name.len()..].strip_prefix("::") {
        Some(more) => path_tails(more),
        None => vec![Vec::new()],
    };
    tails
        .into_iter()
        .map(|tail| lower_case_prefix(&[vec![name.clone()], tail].concat()))
        .collect()
}

/// The items of a `{...}` group, from just after its `{`, split at the
/// commas outside inner groups.
fn group_items(group: &str) -> Vec<&str> {
    let (mut depth, mut from) = (0, 0);
    let mut items = Vec::new();
    for (index, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[from..index]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[from..index]);
                from = index + 1;
            }
            _ => {}
        }
    }
    items.retain(|item| !item.trim().is_empty());
    items
}

/// The leading names of a path that can be modules.
fn lower_case_prefix(path: &[String]) -> Vec<String> {
    path.iter()
        .take_while(|name| name.starts_with(|c: char| c.is_ascii_lowercase()))
        .cloned()
        .collect()
}

/// One crate's modules (every file's) and the arrows between them: each
/// reference ends at the deepest module it names, and a module's arrows to
/// the modules inside it or around it are left out.
struct Crate {
    name: String,
    modules: BTreeSet<Module>,
    arrows: BTreeMap<Module, BTreeSet<Module>>,
}

impl Crate {
    fn read(root: &Path) -> Self {
        let src = root.join("src");
        let mut sources = Vec::new();
        for file in rust_files(&src) {
            let relative = file.strip_prefix(&src).expect("a file under src/");
            if let Some(module) = module_of(relative) {
                let text = std::fs::read_to_string(&file).expect("reading a source file");
                sources.push((module, text));
            }
        }
        let modules: BTreeSet<Module> = sources.iter().map(|(m, _)| m.clone()).collect();
        Self::from_sources(root, modules, &sources)
    }

    fn from_sources(root: &Path, modules: BTreeSet<Module>, sources: &[(Module, String)]) -> Self {
        let mut arrows: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (from, text) in sources {
            for mut to in references(from, text) {
                while !modules.contains(&to) {
                    to.pop();
                }
                let nested = to.starts_with(from) || from.starts_with(&to);
                if !nested {
                    arrows.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        let name = root
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        Self {
            name,
            modules,
            arrows,
        }
    }

    /// The same arrows between top-level modules.
    fn top_level(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut arrows: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (from, tos) in &self.arrows {
            for to in tos {
                let (from, to) = (
                    from[..1.min(from.len())].to_vec(),
                    to[..1.min(to.len())].to_vec(),
                );
                if from != to && !from.is_empty() && !to.is_empty() {
                    arrows.entry(from).or_default().insert(to);
                }
            }
        }
        arrows
    }
}

/// A circle of `arrows`, if there is one, as the modules along it.
fn circle(arrows: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<String>> {
    fn visit(
        at: &Module,
        arrows: &BTreeMap<Module, BTreeSet<Module>>,
        path: &mut Vec<Module>,
        done: &mut BTreeSet<Module>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut names: Vec<String> = path[start..].iter().map(|m| m.join("::")).collect();
            names.push(at.join("::"));
            return Some(names);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.clone());
        for next in arrows.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, arrows, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.clone());
        None
    }
    let mut done = BTreeSet::new();
    arrows
        .keys()
        .find_map(|start| visit(start, arrows, &mut Vec::new(), &mut done))
}

fn crates() -> Vec<Crate> {
    let crates: Vec<Crate> = std::fs::read_dir(repo_root().join("crates"))
        .expect("reading crates/")
        .flatten()
        .map(|entry| Crate::read(&entry.path()))
        .collect();
    assert!(crates.len() >= 6, "the workspace's crates were not found");
    crates
}

#[test]
fn no_module_of_any_crate_uses_a_module_that_uses_it_back() {
    for krate in crates() {
        if let Some(found) = circle(&krate.arrows) {
            panic!(
                "{}: a circle between files: {}",
                krate.name,
                found.join(" -> ")
            );
        }
        if let Some(found) = circle(&krate.top_level()) {
            panic!(
                "{}: a circle between modules: {}",
                krate.name,
                found.join(" -> ")
            );
        }
    }
}

#[test]
fn every_module_of_the_core_has_a_layer_in_architecture_md() {
    let layers = core_layers();
    let core = Crate::read(&repo_root().join("crates/seckill-core"));
    let top: BTreeSet<String> = core
        .modules
        .iter()
        .filter_map(|m| m.first().cloned())
        .collect();
    let tabled: BTreeSet<String> = layers.keys().cloned().collect();
    assert_eq!(
        top, tabled,
        "crates/seckill-core/src/lib.rs against ARCHITECTURE.md's layer table"
    );
}

#[test]
fn no_module_of_the_core_uses_a_module_of_a_higher_layer() {
    let layers = core_layers();
    let core = Crate::read(&repo_root().join("crates/seckill-core"));
    let mut upward = Vec::new();
    for (from, tos) in core.top_level() {
        for to in tos {
            let (a, b) = (layers[&from[0]], layers[&to[0]]);
            if b > a {
                upward.push(format!("{} (layer {a}) -> {} (layer {b})", from[0], to[0]));
            }
        }
    }
    assert!(upward.is_empty(), "arrows pointing up: {upward:#?}");
}

#[test]
fn the_checker_sees_every_way_of_naming_a_module_and_skips_comments_and_strings() {
    let module = |path: &str| -> Module { path.split("::").map(str::to_owned).collect() };
    let sources = vec![
        (module("admin"), "use crate::api::SaleView;\n".to_owned()),
        (module("api"), "fn f() { super::admin::g() }\n".to_owned()),
        (
            module("pages"),
            "use crate::{error::{self, ApiError}, index};\n".to_owned(),
        ),
        (
            module("error"),
            "// crate::pages\nconst Q: char = '\"'; fn h() { crate::index::x(); }\n".to_owned(),
        ),
        (
            module("index"),
            "const S: &str = \"crate::pages\"; const R: &str = r#\"crate::pages\"#;\n".to_owned(),
        ),
        (
            module("lock"),
            "use crate::lock::wait::Waiter;\n".to_owned(),
        ),
        (module("lock::wait"), "use super::Lock;\n".to_owned()),
    ];
    let modules = sources.iter().map(|(m, _)| m.clone()).collect();
    let krate = Crate::from_sources(Path::new("x"), modules, &sources);
    let arrows = |from: &str| -> Vec<String> {
        krate
            .arrows
            .get(&module(from))
            .into_iter()
            .flatten()
            .map(|m| m.join("::"))
            .collect()
    };
    assert_eq!(arrows("admin"), ["api"]);
    assert_eq!(arrows("api"), ["admin"]);
    assert_eq!(arrows("pages"), ["error", "index"]);
    // The comment and the character before the call hide nothing, and
    // name nothing.
    assert_eq!(arrows("error"), ["index"]);
    assert!(arrows("index").is_empty(), "strings name no module");
    assert!(
        arrows("lock").is_empty() && arrows("lock::wait").is_empty(),
        "one room"
    );
    let found = circle(&krate.arrows).expect("admin -> api -> admin is a circle");
    assert!(
        found.contains(&"admin".to_owned()) && found.contains(&"api".to_owned()),
        "{found:?}"
    );
}

/// The arrows between crates that `ARCHITECTURE.md` says must never
/// exist, read from every section of each crate's `Cargo.toml` (its
/// dev-dependencies too): Cargo refuses only those that close a circle.
#[test]
fn no_crate_depends_on_a_crate_architecture_md_forbids() {
    let forbidden = |from: &str, to: &str| match (from, to) {
        // The sale knows no HTTP, no command line and no tools; the
        // verifier checks the app from outside.
        ("seckill-core" | "seckill-loadtest", _) => true,
        // Handlers know neither how the servers were found nor how the
        // process was started, and neither knows the handlers.
        ("seckill-web", "seckill-devenv" | "seckill-cli")
        | ("seckill-devenv" | "seckill-cli", "seckill-web") => true,
        // Only the binary reaches the tools.
        (_, "seckill-tools") => from != "seckill",
        _ => false,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("crates"))
        .expect("reading crates/")
        .flatten()
    {
        let from = entry.file_name().to_string_lossy().into_owned();
        let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml"))
            .unwrap_or_else(|_| panic!("{from}'s Cargo.toml"));
        for line in manifest.lines() {
            let name = line.split(['.', ' ', '=']).next().unwrap_or_default();
            if name.starts_with("seckill") && forbidden(&from, name) {
                found.push(format!("{from} -> {name}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "crates depending on crates ARCHITECTURE.md forbids them: {found:?}"
    );
}

/// The map stays a map: layers, owners, invariants and arrows, in at most
/// 2,000 words (`wc -w`); the file lists belong in docs/code-tour.md.
#[test]
fn architecture_md_stays_within_2000_words() {
    let map = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md"))
        .expect("reading ARCHITECTURE.md");
    let words = map.split_whitespace().count();
    assert!(words <= 2_000, "ARCHITECTURE.md has {words} words");
}
