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
        let log = std::env::temp_dir().join(format!("slipway-{ns}.log"));
        let args = vec![
            "run".to_string(),
            "--kubeconfig".into(),
            cluster.kubeconfig_path().display().to_string(),
            "--namespace".into(),
            ns.into(),
            "--name".into(),
            format!("slipway-{ns}"),
        ];
        let mut p = ControllerProcess {
            child: None,
            log,
            args,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        p.spawn();
        p
    }

    pub fn spawn(&mut self) {
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
