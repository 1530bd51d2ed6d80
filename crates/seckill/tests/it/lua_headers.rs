//! Every Redis script says what it is before it says anything else
//! (`ARCHITECTURE.md`: every read-then-write is a Lua file that opens with
//! its KEYS, ARGV and the race it prevents, and no script spans two
//! sales). The check reads `crates/seckill-core/src/lua/*.lua`: each
//! script opens with a comment block (its header) that
//!
//! - starts with `-- <file name>: <what it does>`;
//! - documents its KEYS and its ARGV, and every `KEYS[n]` and `ARGV[n]`
//!   its code reads by number is among those documented;
//! - names the race it prevents, in a sentence that opens with one of
//!   [`RACE_OPENERS`];
//! - if it takes more than one key, says whose keys they are and that they
//!   share one hash tag (a line `-- KEYS are one …` naming the hash tag).
//!   That the keys of one sale, one queue and one lock do share a tag is
//!   checked on the keys themselves by `keys.rs`'s unit tests; which keys a
//!   call passes is known only at run time, where the cluster tests would
//!   meet a `CROSSSLOT` refusal.

use std::collections::BTreeSet;

use crate::helpers::repo_root;

/// How the sentence naming a script's race opens. "No race" is allowed
/// only with its reason (a script that only reads).
const RACE_OPENERS: [&str; 4] = [
    "The race this prevents",
    "The races this prevents",
    "The article's bug this fixes",
    "No race to prevent:",
];

/// Files of `lua/` that are not scripts of their own, with why.
const LIBRARIES: [(&str, &str); 1] = [(
    "queue_lib.lua",
    "helpers put in front of the queue scripts (Redis scripts cannot call each other)",
)];

/// One script: its header (the comment block it opens with, each line
/// without its `--`) and its code (the rest, comments left out).
struct Script {
    name: String,
    header: Vec<String>,
    code: String,
}

impl Script {
    fn parse(name: &str, text: &str) -> Self {
        let mut lines = text.lines().peekable();
        let mut header = Vec::new();
        while let Some(line) = lines.next_if(|line| line.starts_with("--")) {
            header.push(line.trim_start_matches("--").trim().to_owned());
        }
        let code = lines
            .map(|line| line.split("--").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        Self {
            name: name.to_owned(),
            header,
            code,
        }
    }

    /// What is wrong with the header, if anything.
    fn faults(&self) -> Vec<String> {
        let mut faults = Vec::new();
        let opening = format!("{}: ", self.name);
        if !self
            .header
            .first()
            .is_some_and(|first| first.starts_with(&opening) && first.len() > opening.len())
        {
            faults.push(format!("does not open with `-- {opening}<what it does>`"));
        }
        for (array, documented) in [
            ("KEYS", self.documented("KEYS")),
            ("ARGV", self.documented("ARGV")),
        ] {
            let Some(documented) = documented else {
                faults.push(format!("documents no {array}"));
                continue;
            };
            for used in indices(&self.code, array) {
                if !documented.covers(used) {
                    faults.push(format!(
                        "reads {array}[{used}], which its header does not document"
                    ));
                }
            }
        }
        let prose = self.header.join(" ");
        if !RACE_OPENERS.iter().any(|opener| prose.contains(opener)) {
            faults.push(format!(
                "names no race: no sentence opens with one of {RACE_OPENERS:?}"
            ));
        }
        let keys = self.documented("KEYS").map_or(0, |keys| keys.count);
        let scoped = self
            .header
            .iter()
            .any(|line| line.starts_with("KEYS are one ") && line.contains("hash tag"));
        if keys > 1 && !scoped {
            faults.push(format!(
                "takes {keys} keys and does not say they are one owner's under one hash tag \
                 (`-- KEYS are one sale's, under its hash tag …`)"
            ));
        }
        faults
    }

    /// The entries of `array` the header documents: `KEYS[1]`, `ARGV[2]`
    /// (several on a line too), a list `KEYS     due, inflight, …`, or an
    /// open end (`ARGV[4..]`, `ARGV[2k]`).
    fn documented(&self, array: &str) -> Option<Documented> {
        let mut found = Documented::default();
        let mut any = false;
        for line in &self.header {
            if let Some(list) = line
                .strip_prefix(array)
                .filter(|rest| rest.starts_with("  "))
            {
                any = true;
                found.count += list.split(',').count();
                found.numbers.extend(1..=found.count);
            }
            let mut rest = line.as_str();
            while let Some(at) = rest.find(&format!("{array}[")) {
                any = true;
                let inside: String = rest[at + array.len() + 1..]
                    .chars()
                    .take_while(|c| *c != ']')
                    .collect();
                match inside.parse::<usize>() {
                    Ok(n) => {
                        found.numbers.insert(n);
                    }
                    // `ARGV[2k]`: pairs or triples from the first on.
                    Err(_) if inside.contains('k') => found.open_from = Some(1),
                    // `ARGV[4..]`: every one from the fourth on.
                    Err(_) => {
                        let from: String =
                            inside.chars().take_while(char::is_ascii_digit).collect();
                        let from = from.parse().unwrap_or(1);
                        found.open_from = Some(found.open_from.map_or(from, |f| f.min(from)));
                    }
                }
                rest = &rest[at + array.len() + 1..];
            }
        }
        found.count = found.count.max(found.numbers.len());
        if found.open_from.is_some() {
            found.count = found.count.max(2);
        }
        any.then_some(found)
    }
}

/// The entries of KEYS or ARGV a header documents.
#[derive(Default)]
struct Documented {
    numbers: BTreeSet<usize>,
    /// The first entry of an open end (`ARGV[4..]`: 4; `ARGV[2k]`: 1).
    open_from: Option<usize>,
    count: usize,
}

impl Documented {
    fn covers(&self, n: usize) -> bool {
        self.numbers.contains(&n) || self.open_from.is_some_and(|from| n >= from)
    }
}

/// The numbers `code` reads `array` at: `KEYS[3]` gives 3.
fn indices(code: &str, array: &str) -> BTreeSet<usize> {
    code.match_indices(&format!("{array}["))
        .filter_map(|(at, open)| {
            let digits: String = code[at + open.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let closed = code[at + open.len() + digits.len()..].starts_with(']');
            digits.parse().ok().filter(|_| closed)
        })
        .collect()
}

#[test]
fn every_lua_script_opens_with_its_keys_argv_race_and_one_hash_tag() {
    let dir = repo_root().join("crates/seckill-core/src/lua");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the scripts")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".lua"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "no scripts found in {}", dir.display());
    let mut faults = Vec::new();
    for name in &names {
        let text = std::fs::read_to_string(dir.join(name)).expect("a script");
        if let Some((_, why)) = LIBRARIES.iter().find(|(library, _)| library == name) {
            assert!(
                text.contains("Not a script of its own"),
                "{name} is listed as a library ({why}) and does not say so"
            );
            continue;
        }
        for fault in Script::parse(name, &text).faults() {
            faults.push(format!("{name}: {fault}"));
        }
    }
    assert!(
        faults.is_empty(),
        "scripts whose header is short of the convention: {faults:#?}"
    );
}

/// The check finds each omission, and passes a header that has it all.
#[test]
fn the_header_check_finds_what_is_missing() {
    let whole = "-- x.lua: take a unit.\n\
                 --\n\
                 -- KEYS are one sale's, under its hash tag {sale:ID}:\n\
                 -- KEYS[1]  the stock      KEYS[2]  the buyers\n\
                 -- ARGV[1]  the buyer\n\
                 -- ARGV[2..] more\n\
                 --\n\
                 -- The race this prevents: two buyers take the last unit.\n\
                 local n = redis.call('GET', KEYS[1]) -- KEYS[9] in a comment\n\
                 redis.call('SADD', KEYS[2], ARGV[1], ARGV[7])\n";
    assert!(Script::parse("x.lua", whole).faults().is_empty());
    let faults = |text: &str| Script::parse("x.lua", text).faults().join("\n");
    assert!(
        faults(&whole.replace("-- x.lua: take a unit.", "-- take a unit.")).contains("open with")
    );
    assert!(faults(&whole.replace("KEYS[2]  the buyers", "")).contains("reads KEYS[2]"));
    assert!(
        faults(
            &whole
                .replace("-- ARGV[1]  the buyer\n", "")
                .replace("-- ARGV[2..] more\n", "")
        )
        .contains("documents no ARGV")
    );
    assert!(faults(&whole.replace("The race this prevents", "Why")).contains("names no race"));
    assert!(faults(&whole.replace("KEYS are one sale's", "Keys")).contains("one hash tag"));
}
