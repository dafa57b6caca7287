//! A real Alertmanager on loopback for the tests (the offline test includes this file too):
//! built from the Go module proxy by tests/tools/alertmanager/build.sh (cached), or
//! `SLIPWAY_ALERTMANAGER`; started with a minimal route, its own storage and no cluster.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// alertmanager: `SLIPWAY_ALERTMANAGER`, else what tests/tools/alertmanager/build.sh builds. Run
/// here rather than through the end-to-end scenes' `support::tool`: the offline tests include this
/// file too (the offline phase waits for the tools before it starts).
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLIPWAY_ALERTMANAGER") {
        return PathBuf::from(p);
    }
    let out = Command::new(repo().join("tests/tools/alertmanager/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/tools/alertmanager/build.sh");
    assert!(
        out.status.success(),
        "tests/tools/alertmanager/build.sh failed"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A running Alertmanager, killed when dropped.
pub struct Running {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const CONFIG: &str = "route:\n  receiver: none\nreceivers:\n  - name: none\n";

pub async fn start() -> Running {
    let bin = binary();
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("slipway-alertmanager-{pid}-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).expect("a temporary directory");
    std::fs::write(dir.join("alertmanager.yml"), CONFIG).expect("the config");
    // A free loopback port: taken, read, let go (alertmanager binds it next).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port")
        .port();
    let child = Command::new(bin)
        .arg(format!(
            "--config.file={}",
            dir.join("alertmanager.yml").display()
        ))
        .arg(format!("--storage.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).expect("a log file"))
        .spawn()
        .expect("start alertmanager");
    let running = Running {
        child,
        dir,
        url: format!("http://127.0.0.1:{port}"),
    };
    // Ready when it answers: asked a bounded number of times (it starts in well under a second).
    let http = reqwest::Client::new();
    let ready = format!("{}/-/ready", running.url);
    for _ in 0..300 {
        if let Ok(r) = http.get(&ready).send().await
            && r.status().is_success()
        {
            return running;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(running.dir.join("log")).unwrap_or_default();
    panic!("alertmanager did not become ready:\n{log}");
}
