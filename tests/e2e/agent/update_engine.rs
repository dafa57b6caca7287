//! A stand-in for a Flatcar host's update engine: a private `dbus-daemon` (Debian package
//! `dbus-daemon`, which `./dev` installs) and a service of the test's own that owns
//! `com.coreos.update1` and speaks `com.coreos.update1.Manager` as update_engine does
//! (`GetStatus` and the `StatusUpdate` signal, same names and signature), whose status the test
//! sets.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zbus::object_server::SignalEmitter;

use crate::support;
use crate::support::process::{ChildProcess, OnDrop};

pub const NEED_REBOOT: &str = "UPDATE_STATUS_UPDATED_NEED_REBOOT";
pub const IDLE: &str = "UPDATE_STATUS_IDLE";
pub const DOWNLOADING: &str = "UPDATE_STATUS_DOWNLOADING";
pub const FINALIZING: &str = "UPDATE_STATUS_FINALIZING";

const NAME: &str = "com.coreos.update1";
const PATH: &str = "/com/coreos/update1";
const INTERFACE: &str = "com.coreos.update1.Manager";

/// A private message bus at a fixed socket path, so that its address is known before it runs
/// and stays the same across a restart. Anyone may connect, own any name and call anything.
pub struct Bus {
    dir: PathBuf,
    process: ChildProcess,
}

impl Bus {
    /// The bus, not started yet.
    pub fn new() -> Bus {
        let found = std::process::Command::new("dbus-daemon")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "dbus-daemon is not on PATH: install the Debian package dbus-daemon (./dev does)"
        );
        // Short: a unix socket's path has at most 107 bytes.
        let dir = PathBuf::from("/tmp").join(support::unique_name("sw-bus"));
        std::fs::create_dir_all(&dir).expect("the bus's directory");
        let config = dir.join("bus.conf");
        std::fs::write(&config, config_file(&dir)).expect("the bus's configuration");
        let process = ChildProcess::new("dbus-daemon", dir.join("dbus-daemon.log"))
            .args([
                &format!("--config-file={}", config.display()),
                "--nofork",
                "--nopidfile",
                "--nosyslog",
            ])
            .on_drop(OnDrop::Stop);
        Bus { dir, process }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("system_bus_socket")
    }

    /// The bus's address, as `--dbus-address` takes it.
    pub fn address(&self) -> String {
        format!("unix:path={}", self.socket().display())
    }

    /// Starts the daemon and waits until it accepts connections.
    pub async fn start(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        self.process.spawn();
        let address = self.address();
        support::wait_for("dbus-daemon to listen", Duration::from_secs(10), || {
            let address = address.clone();
            async move {
                zbus::connection::Builder::address(address.as_str())
                    .build()
                    .await
                    .map(drop)
            }
        })
        .await;
    }

    /// Stops the daemon (SIGTERM): every connection to it ends.
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.process.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config_file(dir: &std::path::Path) -> String {
    // An XML comment may not hold two hyphens in a row, or dbus-daemon refuses the file.
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={}/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
        dir.display()
    )
}

/// The object the stand-in serves: update_engine's interface, with a status the test sets.
struct Manager {
    status: Arc<Mutex<String>>,
}

#[zbus::interface(name = "com.coreos.update1.Manager")]
impl Manager {
    #[zbus(out_args(
        "last_checked_time",
        "progress",
        "current_operation",
        "new_version",
        "new_size"
    ))]
    async fn get_status(&self) -> (i64, f64, String, String, i64) {
        let op = self.status.lock().expect("status").clone();
        (1_700_000_000, 0.0, op, "9999.9.9".into(), 0)
    }

    #[zbus(signal)]
    async fn status_update(
        emitter: &SignalEmitter<'_>,
        last_checked_time: i64,
        progress: f64,
        current_operation: &str,
        new_version: &str,
        new_size: i64,
    ) -> zbus::Result<()>;
}

/// The stand-in update engine: owns `com.coreos.update1` on the bus while it lives.
pub struct Engine {
    conn: zbus::Connection,
    status: Arc<Mutex<String>>,
    address: String,
}

impl Engine {
    /// Serves the interface at update_engine's path and name, starting at `status`.
    pub async fn serve(address: &str, status: &str) -> Engine {
        Engine::serve_on(address, status, None)
            .await
            .expect("serve the stand-in update engine")
    }

    /// [`Engine::serve`] on a bus reached over TCP, which knows no Unix credentials: it
    /// authenticates as ANONYMOUS (the bus must allow it).
    pub async fn serve_anonymously(address: &str, status: &str) -> zbus::Result<Engine> {
        let anonymous = zbus::connection::AuthMechanism::Anonymous;
        Engine::serve_on(address, status, Some(anonymous)).await
    }

    async fn serve_on(
        address: &str,
        status: &str,
        auth: Option<zbus::connection::AuthMechanism>,
    ) -> zbus::Result<Engine> {
        let status = Arc::new(Mutex::new(status.to_string()));
        let manager = Manager {
            status: status.clone(),
        };
        let mut builder = zbus::connection::Builder::address(address);
        if let Some(auth) = auth {
            builder = builder.auth_mechanism(auth);
        }
        let conn = builder.name(NAME).serve_at(PATH, manager).build().await?;
        Ok(Engine {
            conn,
            status,
            address: address.to_string(),
        })
    }

    /// Changes the status GetStatus answers, without a signal (as `ResetStatus` does).
    pub fn set_quietly(&self, op: &str) {
        *self.status.lock().expect("status") = op.to_string();
    }

    /// Changes the status and broadcasts it, as update_engine does on every change.
    pub async fn announce(&self, op: &str) {
        self.set_quietly(op);
        let emitter = SignalEmitter::new(&self.conn, PATH).expect("the engine's path");
        Manager::status_update(&emitter, 1_700_000_100, 1.0, op, "9999.9.9", 42)
            .await
            .expect("emit StatusUpdate");
    }

    /// Stops and starts again at `status`: a new owner of the name, and no signal (update_engine
    /// comes back in its last state after a restart and says nothing until it changes).
    pub async fn restart(self, status: &str) -> Engine {
        self.conn
            .close()
            .await
            .expect("close the engine's connection");
        Engine::serve(&self.address, status).await
    }
}

/// Broadcasts a `StatusUpdate` saying `op` from a connection of its own, as anyone on a system
/// bus may: not the update engine, so the agent must not believe it.
pub async fn forge(address: &str, op: &str) {
    let conn = zbus::connection::Builder::address(address)
        .build()
        .await
        .expect("connect to the bus");
    conn.emit_signal(
        None::<&str>,
        PATH,
        INTERFACE,
        "StatusUpdate",
        &(1_700_000_200_i64, 1.0_f64, op, "6666.6.6", 1_i64),
    )
    .await
    .expect("emit a forged StatusUpdate");
}
