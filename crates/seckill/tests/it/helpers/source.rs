//! Reading Rust sources as text, for the tests that check the code's shape
//! (`layers.rs`: which module uses which; `sql_owner.rs`: who calls
//! sqlx's queries). Not a parser: it tells code from comments, strings and
//! characters, which is all those checks need, so that a path written in a
//! comment or a string is not taken for a use.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, folders included.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The source with comments left out and every string and character
/// blanked: a string (`"…"` with its escapes, raw `r#"…"#`) becomes `""`,
/// a character (`'"'`, `'\n'`) a blank. A `'` that opens no character
/// names a lifetime (`'a`) and is kept.
pub fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        if rest.starts_with(&['/', '/']) {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if rest.starts_with(&['/', '*']) {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i..].starts_with(&['/', '*']) {
                    depth += 1;
                    i += 2;
                } else if chars[i..].starts_with(&['*', '/']) {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if chars[i] == 'r'
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
            && matches!(rest.get(1), Some('"' | '#'))
        {
            // A raw string: r"..." or r#"..."#.
            let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
            if rest.get(1 + hashes) != Some(&'"') {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            let close: Vec<char> = std::iter::once('"')
                .chain((0..hashes).map(|_| '#'))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if chars[i] == '\'' {
            if rest.get(1) == Some(&'\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if rest.get(2) == Some(&'\'') {
                i += 3;
            } else {
                out.push('\'');
                i += 1;
            }
            out.push(' ');
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}
