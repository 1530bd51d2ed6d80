//! A command line's help made to be scanned, alike under every command.
//!
//! clap writes an option's environment variable and default after its
//! help (`[env: SECKILL_BIND] [default: 127.0.0.1:8080]`), but only a
//! default that is a value: `--duration`'s "no end" has to be written in
//! the help text, where clap would put it nowhere near the other. And
//! clap lays `--help` out in one of two ways, by what the command holds:
//! the long layout (each option's help on the lines under it, its notes
//! in a paragraph of their own) for a command with a multi-line help or
//! described choices, the compact one (help beside the option) for the
//! others. [`tidy_help`] writes every note itself, in one place and one
//! style, and gives every command's `--help` the long layout (`-h` stays
//! the compact summary).

use clap::{Arg, Command};

/// A command line's help made to be scanned: every option's notes in
/// one style (`[env: SECKILL_…]` without the value it has now, which may
/// be a secret, then `[default: …]`, including the defaults written by
/// hand at the end of a help text, as `[default: no end]`), the long
/// layout for every `--help`, and under each subcommand named by `path`,
/// the shared flags it does not use hidden from its help (they are still
/// accepted: a deployment sets them all in the environment, and one
/// script passes the same flags to every command).
pub fn tidy_help(command: Command, unused: &[(&[&str], &[&str])]) -> Command {
    let mut command = one_style(command);
    for (path, ids) in unused {
        // A subcommand that has an argument of a shared flag's name is not
        // given the shared one: it gets a hidden copy here, which reads the
        // same flag and environment variable.
        let hidden: Vec<Arg> = command
            .get_arguments()
            .filter(|arg| ids.contains(&arg.get_id().as_str()))
            .map(|arg| arg.clone().global(false).hide(true))
            .collect();
        command = add_in(command, path, hidden);
    }
    command
}

/// This command and every one under it in one style.
fn one_style(command: Command) -> Command {
    // A long description, even if it is the short one again, is what
    // makes clap use the long layout for `--help`.
    let command = match command.get_long_about().or(command.get_about()).cloned() {
        Some(about) => command.long_about(about),
        None => command,
    };
    command.mut_args(with_notes).mut_subcommands(one_style)
}

/// The option with its notes written into its help: `-h` has them after
/// the help on the same line, `--help` in a paragraph under it, one note
/// a line, as clap writes its own.
fn with_notes(arg: Arg) -> Arg {
    let short = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let long = arg.get_long_help().map(ToString::to_string);
    let (short, written) = without_default(&short);
    let long = long.map(|long| without_default(&long).0);
    let default = written.or_else(|| {
        let values = arg.get_default_values();
        let shown = arg.get_action().takes_values() && !arg.is_hide_default_value_set();
        (shown && !values.is_empty()).then(|| {
            values
                .iter()
                .map(|value| quoted(&value.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(" ")
        })
    });
    let notes: Vec<String> = arg
        .get_env()
        .filter(|_| !arg.is_hide_env_set())
        .map(|env| format!("[env: {}]", env.to_string_lossy()))
        .into_iter()
        .chain(default.map(|default| format!("[default: {default}]")))
        .collect();
    if notes.is_empty() {
        return arg;
    }
    let joined = |text: &str, separator: &str, between: &str| {
        let notes = notes.join(between);
        if text.is_empty() {
            notes
        } else {
            format!("{text}{separator}{notes}")
        }
    };
    let long = long.unwrap_or_else(|| short.clone());
    let takes_values = arg.get_action().takes_values();
    arg.help(joined(&short, " ", " "))
        .long_help(joined(&long, "\n\n", "\n"))
        .hide_env(true)
        // clap allows this only where it would show a default at all.
        .hide_default_value(takes_values)
}

/// A help text without the default written by hand at its end, and that
/// default: `"Seconds it stays open [default: no end]"` gives `"Seconds it
/// stays open"` and `"no end"`.
fn without_default(help: &str) -> (String, Option<String>) {
    let trimmed = help.trim_end();
    if let Some(open) = trimmed.rfind("[default: ")
        && let Some(default) = trimmed[open..]
            .strip_prefix("[default: ")
            .and_then(|rest| rest.strip_suffix(']'))
        && !default.contains(']')
    {
        return (
            trimmed[..open].trim_end().to_owned(),
            Some(default.to_owned()),
        );
    }
    (help.to_owned(), None)
}

/// A default value as clap would show it: quoted if empty or spaced.
fn quoted(value: &str) -> String {
    if value.is_empty() || value.contains(char::is_whitespace) {
        format!("{value:?}")
    } else {
        value.to_owned()
    }
}

fn add_in(command: Command, path: &[&str], args: Vec<Arg>) -> Command {
    match path.split_first() {
        None => command.args(args),
        Some((name, rest)) => command.mut_subcommand(*name, |sub| add_in(sub, rest, args)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_written_by_hand_is_taken_from_the_end_of_the_help() {
        assert_eq!(
            without_default("Seconds it stays open [default: no end]"),
            (
                "Seconds it stays open".to_owned(),
                Some("no end".to_owned())
            )
        );
        assert_eq!(
            without_default("Seconds; see [default: x] below"),
            ("Seconds; see [default: x] below".to_owned(), None)
        );
    }

    /// Every note, the clap-made and the hand-written alike, in one
    /// place: after the environment variable, under the help on `--help`.
    #[test]
    fn every_default_is_written_one_way() {
        let mut command = tidy_help(
            Command::new("t")
                .arg(
                    Arg::new("bind")
                        .long("bind")
                        .env("T_BIND")
                        .default_value("127.0.0.1:8080")
                        .help("Address to listen on."),
                )
                .arg(
                    Arg::new("duration")
                        .long("duration")
                        .help("Seconds it stays open. [default: no end]"),
                ),
            &[],
        );
        // Each line without its indent (clap indents the blank ones too).
        let long: String = command
            .render_long_help()
            .to_string()
            .lines()
            .map(|line| format!("{}\n", line.trim()))
            .collect();
        assert!(
            long.contains("Address to listen on.\n\n[env: T_BIND]\n[default: 127.0.0.1:8080]\n"),
            "{long}"
        );
        assert!(
            long.contains("Seconds it stays open.\n\n[default: no end]\n"),
            "{long}"
        );
        let short = command.render_help().to_string();
        assert!(
            short.contains("Address to listen on. [env: T_BIND] [default: 127.0.0.1:8080]"),
            "{short}"
        );
    }
}
