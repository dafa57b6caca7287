//! A `slipway run` child process for end-to-end tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::Cluster;

/// A `slipway run` process for one test; killed when dropped.
pub struct ControllerProcess {
    child: Option<Child>,
    log: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl ControllerProcess {
    pub fn start(cluster: &Cluster, ns: &str, env: &[(&str, &str)]) -> Self {
        Self::start_replica(cluster.kubeconfig_path(), ns, None, env, &[])
    }

    /// One replica (`id` becomes its `POD_NAME` and names its log) with its own kubeconfig and
    /// extra arguments, such as `--leader-elect`.
    pub fn start_replica(
        kubeconfig: &std::path::Path,
        ns: &str,
        id: Option<&str>,
        env: &[(&str, &str)],
        extra_args: &[&str],
    ) -> Self {
        let log = match id {
            Some(id) => std::env::temp_dir().join(format!("slipway-{ns}-{id}.log")),
            None => std::env::temp_dir().join(format!("slipway-{ns}.log")),
        };
        let mut args = vec![
            "run".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--namespace".into(),
            ns.into(),
            "--name".into(),
            format!("slipway-{ns}"),
        ];
        args.extend(extra_args.iter().map(|a| a.to_string()));
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(id) = id {
            env.push(("POD_NAME".into(), id.into()));
        }
        let mut p = ControllerProcess {
            child: None,
            log,
            args,
            env,
        };
        p.spawn();
        p
    }

    /// Starts the process again if it has exited (as the kubelet restarts a container); true if
    /// it did.
    pub fn respawn_if_exited(&mut self) -> bool {
        let exited = match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
            None => false,
        };
        if exited {
            self.child = None;
            self.spawn();
        }
        exited
    }

    /// Starts the process; one that is still running is killed first, so that there is never
    /// more than one.
    pub fn spawn(&mut self) {
        self.kill();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("controller log file");
        let child = Command::new(env!("CARGO_BIN_EXE_slipway"))
            .args(&self.args)
            .envs(self.env.iter().cloned())
            .env("RUST_LOG", "info,slipway=debug")
            // Tests run side by side: no fixed port for the metrics server.
            .env("SLIPWAY_METRICS_ADDR", "127.0.0.1:0")
            .stdout(Stdio::from(file.try_clone().expect("log file")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("start slipway run");
        self.child = Some(child);
    }

    /// The process ID of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn log_tail(&self) -> String {
        super::log_tail(&self.log)
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- slipway log ({}) ---\n{}",
                self.log.display(),
                self.log_tail()
            );
        }
        self.kill();
    }
}
