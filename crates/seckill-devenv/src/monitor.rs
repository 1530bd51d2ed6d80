//! Redis' `MONITOR` feed, read: the server hands over every command it
//! runs, in order (the commands of scripts too), one line each. The lab's
//! lock watch (`seckill-tools`' `lab/watch.rs`) reads it to see a TTL that
//! lives less than a millisecond, and the tests read it to see commands that
//! leave nothing behind. Both read the lines the same way, here.

use std::fmt::Write;

/// `s` as `MONITOR` quotes it (Redis' `sdscatrepr`): `\\`, `\"`, `\n`,
/// `\r`, `\t`, `\a`, `\b`, printable ASCII as it is, any other byte as
/// `\xhh`.
pub fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for byte in s.bytes() {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            b' '..=b'~' => out.push(char::from(byte)),
            other => {
                let _ = write!(out, "\\x{other:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// The command and arguments of one `MONITOR` line, unquoted:
/// `1700000000.123456 [0 127.0.0.1:50312] "EXPIRE" "lock" "1764115200"`
/// gives `["EXPIRE", "lock", "1764115200"]`. Redis quotes each one and
/// escapes `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b` and other bytes as
/// `\xHH`.
pub fn arguments(line: &str) -> Vec<String> {
    let Some((_, quoted)) = line.split_once("] ") else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = Vec::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => arg.push(b'\n'),
                    Some('r') => arg.push(b'\r'),
                    Some('t') => arg.push(b'\t'),
                    Some('a') => arg.push(7),
                    Some('b') => arg.push(8),
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        arg.extend(u8::from_str_radix(&hex, 16).ok());
                    }
                    Some(other) => arg.extend(other.to_string().bytes()),
                    None => break,
                },
                other => arg.extend(other.to_string().bytes()),
            }
        }
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    args
}

/// Whether the command `args` is `ECHO marker`.
pub fn is_echo_of(args: &[String], marker: &str) -> bool {
    matches!(args, [command, echoed] if command.eq_ignore_ascii_case("ECHO") && echoed == marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &str) -> Vec<String> {
        arguments(&format!("1764115200.123456 [0 127.0.0.1:50312] {args}"))
    }

    #[test]
    fn a_monitor_line_is_read_back_into_its_arguments() {
        assert_eq!(
            line(r#""EXPIRE" "s:{sale:1}:lock" "1764115200""#),
            ["EXPIRE", "s:{sale:1}:lock", "1764115200"]
        );
        // A script's commands come from "lua", and Redis escapes what it quotes.
        assert_eq!(
            arguments(r#"1764115200.1 [0 lua] "SET" "a \"b\"\\c" "\x01\n" """#),
            ["SET", "a \"b\"\\c", "\u{1}\n", ""]
        );
        assert!(arguments("OK").is_empty());
        let echo = |args: &str| is_echo_of(&line(args), "m:1");
        assert!(echo(r#""ECHO" "m:1""#) && echo(r#""echo" "m:1""#));
        assert!(!echo(r#""GET" "m:1""#) && !echo(r#""ECHO" "m:12""#));
    }

    #[test]
    fn a_key_is_quoted_as_monitor_quotes_it_and_read_back() {
        assert_eq!(quoted("s:{sale:1}:lock"), r#""s:{sale:1}:lock""#);
        for key in ["a \"b\"\\c", "\u{1}\n\r\t\u{7}\u{8}", "caf\u{e9}", ""] {
            let line = format!("1764115200.1 [0 127.0.0.1:1] \"GET\" {}", quoted(key));
            assert_eq!(arguments(&line), ["GET", key], "{line}");
        }
    }
}
