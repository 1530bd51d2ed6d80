//! The `seckill serve` and `seckill worker` processes running on this
//! machine on one database and key prefix, found in their own record:
//! `/proc/<pid>/cmdline` and `/proc/<pid>/environ` (Linux; elsewhere
//! none is found). `seckill reset` refuses while one runs, since a running
//! process keeps what it read of the sales it would delete.
//!
//! A process is on the same deployment when it was told the same key
//! prefix and the same PostgreSQL URL, by flag or environment variable, as
//! the caller was told or found (or neither was told one): the demo and the
//! lab tell their processes the URL they found, where `seckill reset`
//! finds it again. A process on another machine, or in a
//! container whose processes this one cannot see, is not found: a real
//! system would keep a record in the servers themselves.

/// One running `seckill` server process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    /// `serve` or `worker` (its other arguments are not repeated: a URL
    /// among them may hold a password).
    pub command: String,
}

/// The `seckill serve` and `seckill worker` processes, other than this
/// one, on the caller's deployment: `given`, the database URL the caller
/// was told (`None`: none), `found`, the one it uses (told, or found on
/// this machine), and `prefix`.
pub fn servers_on(given: Option<&str>, found: &str, prefix: &str) -> Vec<Running> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id();
    let mut found: Vec<Running> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != own)
        .filter_map(|pid| {
            let args = nul_separated(&std::fs::read(format!("/proc/{pid}/cmdline")).ok()?);
            let program = args.first()?.rsplit('/').next()?.to_owned();
            let command = args
                .iter()
                .skip(1)
                .find(|arg| *arg == "serve" || *arg == "worker")?
                .clone();
            if program != "seckill" {
                return None;
            }
            // A process whose environment cannot be read is judged by its
            // flags alone.
            let env = std::fs::read(format!("/proc/{pid}/environ"))
                .map(|raw| nul_separated(&raw))
                .unwrap_or_default();
            let its_database = told(&args, &env, "--database-url", "SECKILL_DATABASE_URL");
            let its_prefix = told(&args, &env, "--redis-prefix", "SECKILL_REDIS_PREFIX")
                .unwrap_or_else(|| "seckill".to_owned());
            (its_prefix == prefix && same_database(its_database.as_deref(), given, found))
                .then_some(Running { pid, command })
        })
        .collect();
    found.sort_by_key(|running| running.pid);
    found
}

/// Whether a process told `its` (`None`: none) uses the caller's
/// database: told the same as the caller, told the one the caller found,
/// or, like the caller, told none (both find the same local server).
fn same_database(its: Option<&str>, given: Option<&str>, found: &str) -> bool {
    its == given || its == Some(found)
}

fn nul_separated(raw: &[u8]) -> Vec<String> {
    raw.split(|byte| *byte == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect()
}

/// What a process was told for `flag` (`--flag value` or `--flag=value`)
/// or, without the flag, by the variable `var`; flags win, as clap reads them.
fn told(args: &[String], env: &[String], flag: &str, var: &str) -> Option<String> {
    let by_flag = args.iter().enumerate().find_map(|(i, arg)| {
        if arg == flag {
            args.get(i + 1).cloned()
        } else {
            arg.strip_prefix(flag)?.strip_prefix('=').map(str::to_owned)
        }
    });
    by_flag.or_else(|| {
        env.iter().find_map(|entry| {
            entry
                .strip_prefix(var)?
                .strip_prefix('=')
                .map(str::to_owned)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{same_database, told};

    /// The demo's processes are told the URL the demo found; `reset`, told
    /// nothing, finds the same one: the same database (the walk found
    /// `reset` blind to a running demo).
    #[test]
    fn a_process_told_the_url_the_caller_found_is_on_its_database() {
        let local = "postgres://postgres@127.0.0.1:5432/seckill";
        assert!(same_database(Some(local), None, local));
        assert!(same_database(None, None, local));
        assert!(same_database(Some(local), Some(local), local));
        assert!(!same_database(
            Some("postgres://postgres@127.0.0.1:5432/other"),
            None,
            local
        ));
        assert!(!same_database(None, Some(local), local));
    }

    #[test]
    fn a_flag_wins_over_the_environment() {
        let args = ["seckill", "serve", "--redis-prefix", "flagged"].map(String::from);
        let env = ["SECKILL_REDIS_PREFIX=envd".to_owned()];
        assert_eq!(
            told(&args, &env, "--redis-prefix", "SECKILL_REDIS_PREFIX").as_deref(),
            Some("flagged")
        );
        assert_eq!(
            told(&args[..2], &env, "--redis-prefix", "SECKILL_REDIS_PREFIX").as_deref(),
            Some("envd")
        );
        let joined = ["seckill", "worker", "--redis-prefix=j"].map(String::from);
        assert_eq!(
            told(&joined, &[], "--redis-prefix", "SECKILL_REDIS_PREFIX").as_deref(),
            Some("j")
        );
    }
}
