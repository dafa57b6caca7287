//! A child process of a test (a controller, an agent, system-upgrade-controller) with its output
//! in a log file: start, kill (SIGKILL) or stop (SIGTERM), restart, read the log. The process is
//! stopped when dropped, and a test that panics prints the end of its log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `Command` for the slipway binary under test, with no standard input; for a short command
/// whose output the test reads (`slipway agent --once`, `slipway run --help`).
pub fn slipway() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slipway"));
    cmd.stdin(Stdio::null());
    cmd
}

/// Sends `sig` (a name such as `TERM` or `STOP`) to `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?
        .success();
    if ok {
        Ok(())
    } else {
        Err(anyhow::anyhow!("kill -{sig} {pid} failed"))
    }
}

/// How a dropped [`ChildProcess`] is ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDrop {
    /// SIGKILL, as a crash would.
    Kill,
    /// SIGTERM, then SIGKILL after 10 s: as a pod is stopped (a leader releases its Lease).
    Stop,
}

/// A child process writing its stdout and stderr to a log file. Configure it with the builder
/// methods, then [`ChildProcess::spawn`] it (or use [`ChildProcess::started`]).
pub struct ChildProcess {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    /// Start from an empty environment (as a container does), not the test's.
    clear_env: bool,
    child: Option<Child>,
    spawned: bool,
    on_drop: OnDrop,
}

impl ChildProcess {
    /// A process of `program` logging to `log`, not started yet.
    pub fn new(program: impl Into<PathBuf>, log: impl Into<PathBuf>) -> Self {
        ChildProcess {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            log: log.into(),
            clear_env: false,
            child: None,
            spawned: false,
            on_drop: OnDrop::Kill,
        }
    }

    /// A process of the slipway binary under test, logging to `log`, not started yet.
    pub fn slipway(log: impl Into<PathBuf>) -> Self {
        Self::new(env!("CARGO_BIN_EXE_slipway"), log)
    }

    pub fn arg(mut self, arg: impl AsRef<str>) -> Self {
        self.args.push(arg.as_ref().to_string());
        self
    }

    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    pub fn env(mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        self.env
            .push((key.as_ref().to_string(), value.as_ref().to_string()));
        self
    }

    pub fn envs<K: AsRef<str>, V: AsRef<str>>(
        mut self,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (k, v) in env {
            self = self.env(k, v);
        }
        self
    }

    /// Gives the process only the variables set with [`ChildProcess::env`], none of the test's.
    pub fn env_clear(mut self) -> Self {
        self.clear_env = true;
        self
    }

    /// How the process is ended when dropped ([`OnDrop::Kill`] unless told).
    pub fn on_drop(mut self, on_drop: OnDrop) -> Self {
        self.on_drop = on_drop;
        self
    }

    /// Spawns the process and returns it.
    pub fn started(mut self) -> Self {
        self.spawn();
        self
    }

    /// Starts the process; one that is still running is killed first, so that there is never
    /// more than one. The first start truncates the log, later ones append to it.
    pub fn spawn(&mut self) {
        self.kill();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(self.spawned)
            .truncate(!self.spawned)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("log file {}: {e}", self.log.display()));
        let mut command = Command::new(&self.program);
        if self.clear_env {
            command.env_clear();
        }
        let child = command
            .args(&self.args)
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone().expect("log file")))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("start {} {:?}: {e}", self.program.display(), self.args));
        self.child = Some(child);
        self.spawned = true;
    }

    /// The process ID, while it runs (or has exited unnoticed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash would; waits for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and returns at once (see [`ChildProcess::wait_exit`]).
    pub fn sigterm(&self) {
        let pid = self.pid().expect("the process was started");
        signal(pid, "TERM").expect("kill -TERM");
    }

    /// Waits up to `timeout` for the process to exit, and returns how it did.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// SIGTERM, and SIGKILL if the process has not exited 10 s later (blocking: usable in
    /// `Drop`).
    pub fn stop(&mut self) {
        let Some(pid) = self.pid() else { return };
        let _ = signal(pid, "TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.try_wait().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
    }

    /// SIGKILL and start again, as a crash and the kubelet would.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Starts the process again if it has exited (as the kubelet restarts a container); true if
    /// it did.
    pub fn respawn_if_exited(&mut self) -> bool {
        let exited = self.try_wait().is_some();
        if exited {
            self.spawn();
        }
        exited
    }

    /// Peak resident memory (VmHWM) so far, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last few KiB of the log (for failure messages).
    pub fn log_tail(&self) -> String {
        super::log_tail(&self.log)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- log of {} ({}) ---\n{}",
                self.program.display(),
                self.log.display(),
                self.log_tail()
            );
        }
        match self.on_drop {
            OnDrop::Kill => self.kill(),
            OnDrop::Stop => self.stop(),
        }
    }
}
