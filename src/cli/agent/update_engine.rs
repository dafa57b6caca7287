//! Flatcar's update engine over the host's system D-Bus (`slipway agent --update-engine`): its
//! status, kept in a watch channel for the agent's loop. What a status means is decided in
//! `slipway::reboot_policy::core::agent`.
//!
//! The agent subscribes to `StatusUpdate` first and then calls `GetStatus`, so no change falls
//! between the two. It calls `GetStatus` again whenever the owner of `com.coreos.update1` changes
//! (a restarted update engine comes back in its old state without a signal) and every period, in
//! case a change came without one (`ResetStatus` sends none). zbus's signal stream takes only
//! signals sent by the current owner of the name: on the system bus anyone may broadcast a
//! `StatusUpdate`, and a forged one must not reboot the node.

use std::time::Duration;

use futures::StreamExt;
use slipway::reboot_policy::core::agent::UpdateEngine;
use tokio::sync::watch;
use tracing::{info, warn};

/// How long connecting (and authenticating) and each call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait after the bus failed; doubled after each failure, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[zbus::proxy(
    interface = "com.coreos.update1.Manager",
    default_service = "com.coreos.update1",
    default_path = "/com/coreos/update1"
)]
trait Manager {
    /// `(last_checked_time, progress, current_operation, new_version, new_size)`.
    fn get_status(&self) -> zbus::Result<(i64, f64, String, String, i64)>;

    #[zbus(signal)]
    fn status_update(
        &self,
        last_checked_time: i64,
        progress: f64,
        current_operation: &str,
        new_version: &str,
        new_size: i64,
    ) -> zbus::Result<()>;
}

/// Follows the update engine at `address` in a task of its own, until the receiver is dropped.
/// Until it has read a status the channel holds an [`UpdateEngine::Unreadable`].
pub fn watch(address: String, period: Duration) -> watch::Receiver<UpdateEngine> {
    let (tx, rx) = watch::channel(UpdateEngine::Unreadable("not read yet".into()));
    tokio::spawn(async move {
        let mut backoff = FIRST_BACKOFF;
        while !tx.is_closed() {
            let why = follow(&address, period, &tx, &mut backoff).await;
            publish(&tx, UpdateEngine::Unreadable(why.clone()));
            warn!(
                address = %address,
                "cannot read the update engine: {why}; trying again in {backoff:?}"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    });
    rx
}

/// Reads the status once (`slipway agent --once`).
pub async fn read_once(address: &str) -> UpdateEngine {
    let proxy = match connect(address).await {
        Ok(proxy) => proxy,
        Err(why) => return UpdateEngine::Unreadable(why),
    };
    match get_status(&proxy).await {
        Ok(engine) => engine,
        Err(why) => UpdateEngine::Unreadable(why),
    }
}

async fn connect(address: &str) -> Result<ManagerProxy<'static>, String> {
    let connecting = async {
        let conn = zbus::connection::Builder::address(address)
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?;
        ManagerProxy::new(&conn).await
    };
    match tokio::time::timeout(CALL_TIMEOUT, connecting).await {
        Ok(Ok(proxy)) => Ok(proxy),
        Ok(Err(e)) => Err(format!("cannot connect to the bus {address}: {e}")),
        Err(_) => Err(format!(
            "the bus {address} did not answer in {CALL_TIMEOUT:?}"
        )),
    }
}

/// One connection: follows the engine until the connection fails; why it ended.
async fn follow(
    address: &str,
    period: Duration,
    tx: &watch::Sender<UpdateEngine>,
    backoff: &mut Duration,
) -> String {
    let proxy = match connect(address).await {
        Ok(proxy) => proxy,
        Err(why) => return why,
    };
    let streams = async {
        let updates = proxy.receive_status_update().await?;
        let owners = proxy.inner().receive_owner_changed().await?;
        zbus::Result::Ok((updates, owners))
    };
    let (mut updates, mut owners) = match streams.await {
        Ok(streams) => streams,
        Err(e) => return format!("cannot subscribe to the update engine's signals: {e}"),
    };
    info!(address = %address, "watching the update engine");
    *backoff = FIRST_BACKOFF;
    // A status from a signal stands while GetStatus is refused (a uid the bus policy does not
    // let call it still receives the signals); a new owner starts afresh.
    let mut signalled: Option<String> = None;
    let mut failed: Option<String> = None;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            update = updates.next() => {
                let Some(update) = update else {
                    return "the bus closed the connection".into();
                };
                match update.args() {
                    Ok(args) => {
                        let op = args.current_operation().to_string();
                        signalled = Some(op.clone());
                        publish(tx, UpdateEngine::Status(op));
                    }
                    Err(e) => warn!("a StatusUpdate that does not read: {e}"),
                }
            }
            owner = owners.next() => {
                if owner.is_none() {
                    return "the bus closed the connection".into();
                }
                signalled = None;
                refresh(&proxy, tx, signalled.as_deref(), &mut failed).await;
            }
            // The first tick is at once: the status right after subscribing.
            _ = tick.tick() => refresh(&proxy, tx, signalled.as_deref(), &mut failed).await,
        }
    }
}

/// Calls GetStatus and publishes what it says; a failure is logged when it is not the last one.
async fn refresh(
    proxy: &ManagerProxy<'_>,
    tx: &watch::Sender<UpdateEngine>,
    signalled: Option<&str>,
    failed: &mut Option<String>,
) {
    let engine = match get_status(proxy).await {
        Ok(engine) => {
            *failed = None;
            engine
        }
        Err(why) => {
            if failed.as_deref() != Some(&why) {
                warn!("{why}");
                *failed = Some(why.clone());
            }
            match signalled {
                Some(op) => UpdateEngine::Status(op.to_string()),
                None => UpdateEngine::Unreadable(why),
            }
        }
    };
    publish(tx, engine);
}

/// GetStatus; a bus that says nobody owns the name means no update engine runs.
async fn get_status(proxy: &ManagerProxy<'_>) -> Result<UpdateEngine, String> {
    match proxy.get_status().await {
        Ok((_, _, op, _, _)) => Ok(UpdateEngine::Status(op)),
        Err(zbus::Error::FDO(e))
            if matches!(
                *e,
                zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
            ) =>
        {
            Ok(UpdateEngine::NotRunning)
        }
        Err(zbus::Error::FDO(e)) if matches!(*e, zbus::fdo::Error::AccessDenied(_)) => {
            Err(format!(
                "GetStatus refused ({e}): the update engine's bus policy lets only root and the user \
             core (uid 500 on Flatcar) call it"
            ))
        }
        Err(e) => Err(format!("GetStatus failed: {e}")),
    }
}

/// Sets the channel's value, waking the agent only when it changed.
fn publish(tx: &watch::Sender<UpdateEngine>, engine: UpdateEngine) {
    tx.send_if_modified(|current| {
        if *current == engine {
            return false;
        }
        match &engine {
            UpdateEngine::Status(op) => info!(status = %op, "update engine"),
            UpdateEngine::NotRunning => info!("no update engine runs on the bus"),
            UpdateEngine::Unreadable(_) => {}
        }
        *current = engine;
        true
    });
}
