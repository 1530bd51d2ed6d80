//! Start, name, kill and stop `seckill` processes: the one way to run a
//! deployment of several app instances and workers.
//!
//! The demo, `seckill-loadtest --spawn` and the integration tests all run
//! seckill the way an operator would: as separate `seckill serve` and
//! `seckill worker` processes sharing one Redis and one PostgreSQL. A
//! [`Deployment`] says where the servers are and what environment every
//! process gets; a [`Fleet`] starts processes of it, each under a name,
//! waits for an app's "listening on" line to learn its address and for a
//! worker's [`WORKER_READY`] line, and can
//! signal, kill or stop any one of them by name (the fault tests kill
//! workers with SIGKILL mid-batch).
//!
//! Every process is killed when its [`Fleet`] is dropped (tokio's
//! `kill_on_drop`), so an interrupted demo or a failed test leaves none
//! behind. [`Fleet::stop`] is the polite way: SIGTERM, then a wait for the
//! batch or requests in flight to finish.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::future::join_all;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use seckill_core::redis_pool::{self, RedisAt};

/// How long a started `seckill serve` may take to print its address, and
/// `seckill worker` its [`WORKER_READY`].
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stopped process may take to finish its work and exit.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// What `seckill serve` prints first; the address follows.
const LISTENING: &str = "seckill listening on ";
/// The one line `seckill worker` prints on stdout, once it reached its
/// servers and is about to take its first batch (its subscription to the
/// sales' stock changes, which wakes it between polls, may still be
/// connecting: until it is, a new order waits for the next poll).
pub const WORKER_READY: &str = "seckill worker ready";

/// Where the processes of a deployment find their servers, and the
/// environment they all share.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The program to run: `seckill`, or `seckill-loadtest` for the tests
    /// of the load generator.
    binary: PathBuf,
    /// `(name, value)` set on every process, after the servers' URLs.
    env: Vec<(String, String)>,
}

impl Deployment {
    /// Processes of `binary` on these servers, under this key prefix. They
    /// log errors only, unless [`Deployment::env`] sets `RUST_LOG`.
    pub fn new(
        binary: impl Into<PathBuf>,
        redis: &RedisAt,
        database_url: &str,
        prefix: &str,
    ) -> Self {
        Self {
            binary: binary.into(),
            env: Vec::new(),
        }
        .on_redis(redis)
        .env("SECKILL_DATABASE_URL", database_url)
        .env("SECKILL_REDIS_PREFIX", prefix)
        // Errors only: the oversell warnings of a naive run would drown
        // the demo's progress display and the tests' output.
        .env("RUST_LOG", "error")
    }

    /// Set an environment variable on every process (a later value wins).
    pub fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    /// The same deployment, on another Redis (a server or a cluster).
    pub fn on_redis(mut self, redis: &RedisAt) -> Self {
        self.env
            .retain(|(name, _)| !redis_pool::LOCATION_ENV.contains(&name.as_str()));
        for (name, value) in redis.env() {
            self = self.env(name, value);
        }
        self
    }

    /// The same deployment, running another program (the integration
    /// tests' `seckill-loadtest`).
    #[cfg(feature = "test-support")]
    pub fn with_binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = binary.into();
        self
    }

    /// `binary <args>` with this deployment's environment; no input, output
    /// piped, killed when dropped. For one-shot commands (`migrate`,
    /// `sale create`) as much as for the processes of a [`Fleet`].
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        // Ours says where Redis is; one inherited from the user would clash.
        for name in redis_pool::LOCATION_ENV {
            command.env_remove(name);
        }
        command
            .args(args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            // It stops by itself if this process dies without stopping it.
            .env(
                seckill_cli::process::PARENT_PID_ENV,
                std::process::id().to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
}

/// One running process of a cluster.
#[derive(Debug)]
struct Member {
    /// What the cluster calls it: also the app's `--instance-id`.
    name: String,
    /// `http://host:port` of an app instance; `None` for a worker.
    url: Option<String>,
    child: Child,
}

/// Named `seckill` processes of one [`Deployment`]. Dropping it kills them;
/// [`Fleet::stop`] stops them gracefully.
#[derive(Debug)]
pub struct Fleet {
    deployment: Deployment,
    /// In the order they were started.
    members: Vec<Member>,
}

impl Fleet {
    /// An empty cluster; start processes with [`Fleet::start_app`] and
    /// [`Fleet::start_worker`].
    pub fn new(deployment: Deployment) -> Self {
        Self {
            deployment,
            members: Vec::new(),
        }
    }

    /// The usual shape: `instances` app instances named `{label}-1`,
    /// `{label}-2`, ... that run no worker, and one worker, `{label}-worker`.
    pub async fn start(
        deployment: Deployment,
        label: &str,
        instances: u32,
    ) -> anyhow::Result<Self> {
        Self::start_each(deployment, label, instances, |_| Vec::new()).await
    }

    /// [`Fleet::start`], with `flags(i)` added to the command line of
    /// instance `i` (from 1): the lab's fault knobs, some of which only
    /// one instance has (a clock that runs ahead).
    pub async fn start_each(
        deployment: Deployment,
        label: &str,
        instances: u32,
        flags: impl Fn(u32) -> Vec<String>,
    ) -> anyhow::Result<Self> {
        let mut cluster = Self::new(deployment);
        for i in 1..=instances {
            let flags = flags(i);
            let mut args = vec!["--no-worker"];
            args.extend(flags.iter().map(String::as_str));
            cluster.start_app(&format!("{label}-{i}"), &args).await?;
        }
        cluster
            .start_worker(&format!("{label}-worker"), &[])
            .await?;
        Ok(cluster)
    }

    /// Start `seckill serve` on a free port as `name` (its instance id),
    /// with `args` added, and wait until it prints its address. Returns the
    /// address as a base URL.
    pub async fn start_app(&mut self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        self.start_app_at(name, "127.0.0.1:0", args).await
    }

    /// Kill app instance `name` at once (SIGKILL), as a crash would, and
    /// start it again on the same address with `args` added: clients that
    /// knew it find it again. Returns its base URL.
    pub async fn restart_app(&mut self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let url = self.url(name)?;
        let bind = url
            .strip_prefix("http://")
            .with_context(|| format!("{name}'s address {url} is not http://host:port"))?
            .to_owned();
        self.kill(name).await?;
        self.start_app_at(name, &bind, args).await
    }

    /// The names of the running processes, app instances first.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<(bool, String)> = self
            .members
            .iter()
            .map(|m| (m.url.is_none(), m.name.clone()))
            .collect();
        names.sort();
        names.into_iter().map(|(_, name)| name).collect()
    }

    async fn start_app_at(
        &mut self,
        name: &str,
        bind: &str,
        args: &[&str],
    ) -> anyhow::Result<String> {
        let mut all = vec!["serve", "--bind", bind, "--instance-id", name];
        all.extend_from_slice(args);
        let line = self.spawn(name, &all).await?;
        let url = listening_url(&line)
            .with_context(|| format!("unexpected first line from {name}: {line:?}"))?
            .to_owned();
        self.members.last_mut().expect("just pushed").url = Some(url.clone());
        Ok(url)
    }

    /// Start `seckill worker` as `name`, with `args` added, and wait until
    /// it says it is ready: a worker that cannot start (a bad flag, a
    /// server it cannot reach) fails here, with its errors above, not as
    /// orders that are never written.
    pub async fn start_worker(&mut self, name: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut all = vec!["worker"];
        all.extend_from_slice(args);
        let line = self.spawn(name, &all).await?;
        anyhow::ensure!(
            line == WORKER_READY,
            "unexpected first line from {name}: {line:?}"
        );
        Ok(())
    }

    /// Start `args` as member `name` (kept, so that a failure below still
    /// kills it on drop), its errors where ours go, and read the first
    /// line it prints on stdout.
    async fn spawn(&mut self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut command = self.deployment.command(args);
        // A long-running process: its errors go where ours go.
        command.stderr(Stdio::inherit());
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name} ({})", self.deployment.binary.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        self.members.push(Member {
            name: name.to_owned(),
            url: None,
            child,
        });
        tokio::time::timeout(START_TIMEOUT, BufReader::new(stdout).lines().next_line())
            .await
            .with_context(|| format!("{name} did not start within {START_TIMEOUT:?}"))?
            .with_context(|| format!("reading the first line of {name}"))?
            .with_context(|| format!("{name} exited before it was ready (its errors are above)"))
    }

    /// The base URLs of the running app instances, in the order they started.
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().filter_map(|m| m.url.clone()).collect()
    }

    /// The base URL of the app instance `name`.
    pub fn url(&self, name: &str) -> anyhow::Result<String> {
        self.member(name)?
            .url
            .clone()
            .with_context(|| format!("{name} is not an app instance"))
    }

    /// Send `signal` to `name` (SIGSTOP and SIGCONT pause and resume it).
    pub fn signal(&self, name: &str, signal: Signal) -> anyhow::Result<()> {
        kill(self.pid(name)?, signal).with_context(|| format!("sending {signal} to {name}"))
    }

    /// The memory `name` holds now, in bytes: see [`resident_bytes`].
    pub fn resident_bytes(&self, name: &str) -> anyhow::Result<u64> {
        resident_bytes(self.pid(name)?).with_context(|| format!("{name}'s memory"))
    }

    /// The CPU time `name` has used so far: see [`ProcessCpu`].
    pub fn cpu_time(&self, name: &str) -> anyhow::Result<Duration> {
        let pid = self.pid(name)?.as_raw();
        Ok(ProcessCpu::read(pid)
            .with_context(|| format!("{name}'s CPU time"))?
            .cpu)
    }

    fn pid(&self, name: &str) -> anyhow::Result<Pid> {
        let pid = self
            .member(name)?
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .with_context(|| format!("{name} has exited"))?;
        Ok(Pid::from_raw(pid))
    }

    /// Wait up to `limit` for `name` to exit, and forget it. Returns how it ended.
    pub async fn wait(&mut self, name: &str, limit: Duration) -> anyhow::Result<ExitStatus> {
        let index = self.index(name)?;
        let status = tokio::time::timeout(limit, self.members[index].child.wait())
            .await
            .with_context(|| format!("{name} did not exit within {limit:?}"))?
            .with_context(|| format!("waiting for {name}"))?;
        self.members.remove(index);
        Ok(status)
    }

    /// The processes that have exited by themselves, with how they ended;
    /// they are forgotten.
    pub fn exited(&mut self) -> anyhow::Result<Vec<(String, ExitStatus)>> {
        let mut exited = Vec::new();
        let mut index = 0;
        while index < self.members.len() {
            let member = &mut self.members[index];
            match member
                .child
                .try_wait()
                .with_context(|| format!("asking after {}", member.name))?
            {
                Some(status) => exited.push((self.members.remove(index).name, status)),
                None => index += 1,
            }
        }
        Ok(exited)
    }

    /// Kill `name` at once (SIGKILL), as a crash would, and forget it.
    pub async fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        self.signal(name, Signal::SIGKILL)?;
        self.wait(name, STOP_TIMEOUT).await?;
        Ok(())
    }

    /// SIGTERM every process and wait for each to finish its work; kill
    /// whichever takes longer than [`STOP_TIMEOUT`], and say so.
    pub async fn stop(mut self) {
        for member in &self.members {
            if let Some(pid) = member.child.id().and_then(|id| i32::try_from(id).ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        // Waited for together, not one after another: they all stop at
        // once, so a lab's fourteen processes take the slowest one's time
        // after Ctrl-C, not up to fourteen timeouts.
        join_all(self.members.iter_mut().map(|member| async move {
            if tokio::time::timeout(STOP_TIMEOUT, member.child.wait())
                .await
                .is_err()
            {
                tracing::warn!(
                    process = %member.name,
                    timeout_s = STOP_TIMEOUT.as_secs(),
                    "did not stop after SIGTERM; killed"
                );
                let _ = member.child.kill().await;
            }
        }))
        .await;
    }

    fn index(&self, name: &str) -> anyhow::Result<usize> {
        match self.members.iter().position(|m| m.name == name) {
            Some(index) => Ok(index),
            None => bail!("no process named {name} in the cluster"),
        }
    }

    fn member(&self, name: &str) -> anyhow::Result<&Member> {
        Ok(&self.members[self.index(name)?])
    }
}

/// The base URL in `seckill serve`'s first line of output, if `line` is
/// that line.
pub fn listening_url(line: &str) -> Option<&str> {
    line.strip_prefix(LISTENING)
}

/// The `seckill` binary: this program, or the one beside it (when this is
/// `seckill-loadtest`).
pub fn seckill_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program")?;
    if me.file_stem().is_some_and(|stem| stem == "seckill") {
        return Ok(me);
    }
    let sibling = me.with_file_name(format!("seckill{}", std::env::consts::EXE_SUFFIX));
    if !sibling.exists() {
        bail!(
            "{} not found; build both binaries first (`cargo build --release`)",
            sibling.display()
        );
    }
    Ok(sibling)
}

/// The memory process `pid` holds now (its resident set, `VmRSS` in
/// `/proc/<pid>/status`), in bytes.
pub fn resident_bytes(pid: Pid) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// Clock ticks per second of the times in `/proc/<pid>/stat` (the kernel's
/// `USER_HZ`, which it keeps at 100 for user space on every architecture
/// seckill runs on, whatever the kernel's own tick).
const USER_HZ: u64 = 100;

/// What `/proc/<pid>/stat` says of a process's use of the CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessCpu {
    /// Its command name (`comm`): `postgres` for every process of a
    /// PostgreSQL server, whatever its title says.
    pub comm: String,
    /// When it started, in clock ticks after boot: with the pid, it names
    /// the process even once the pid is reused.
    pub started: u64,
    /// The CPU time of all its threads so far, in user mode and in the
    /// kernel (`utime` + `stime`), in steps of 10 ms.
    pub cpu: Duration,
}

impl ProcessCpu {
    /// Read `/proc/<pid>/stat`.
    pub fn read(pid: i32) -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        Self::parse(&stat).with_context(|| format!("an unexpected /proc/{pid}/stat: {stat:?}"))
    }

    /// `pid (comm) state ppid ...`: the name may hold spaces and
    /// parentheses, so the fields are counted from its last `)`. After it,
    /// field 3 (the state) comes first: `utime` is field 14, `stime` 15,
    /// `starttime` 22 (proc(5)).
    fn parse(stat: &str) -> Option<Self> {
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let comm = stat.get(open + 1..close)?.to_owned();
        let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let ticks = field(14)? + field(15)?;
        Some(Self {
            comm,
            started: field(22)?,
            cpu: Duration::from_millis(ticks * 1000 / USER_HZ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_the_name_and_the_cpu_time_whatever_the_name_holds() {
        let stat = "4278 (postgres) S 2226 2226 2226 0 -1 4194560 1503 0 0 0 \
                    250 130 0 0 20 0 1 0 51234 226566144 3000 18446744073709551615";
        let cpu = ProcessCpu::parse(stat).expect("parsed");
        assert_eq!(cpu.comm, "postgres");
        assert_eq!(cpu.cpu, Duration::from_millis(3_800));
        assert_eq!(cpu.started, 51_234);
        let odd = stat.replace("(postgres)", "(a (b) c)");
        assert_eq!(ProcessCpu::parse(&odd).expect("parsed").comm, "a (b) c");
    }

    #[test]
    fn a_process_reads_its_own_stat() {
        let me = ProcessCpu::read(i32::try_from(std::process::id()).expect("a pid fits"))
            .expect("our own stat");
        assert!(me.started > 0);
    }
}
