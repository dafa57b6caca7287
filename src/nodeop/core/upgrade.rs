//! NodeOpUpgrade, as kairos-operator runs it: one NodeOp of the same name that cordons, drains,
//! runs `kairos-agent upgrade` from the image's root filesystem with the host's `/dev` and `/run`,
//! and reboots into the new system (when the active partition is upgraded); a preflight skips the
//! nodes that already run the image's version unless `force`. The NodeOp does the rest (control-
//! plane nodes first, the budget, the hand-off); the NodeOpUpgrade's status copies the NodeOp's.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::ObjectMeta;

use crate::common::condition::{Standing, set_standing};
use crate::common::decision::{Decision, Effect, Event};
use crate::node::holders::Holder;
use crate::nodeop::api::{
    DEFAULT_HOST_MOUNT_PATH, DrainOptions, NodeOp, NodeOpSpec, NodeOpUpgrade, NodeOpUpgradeSpec,
    NodeOpUpgradeStatus, PreflightSpec,
};

use super::words;

/// On the NodeOp: the NodeOpUpgrade that made it (kairos-operator's label).
pub const UPGRADE_LABEL: &str = "nodeopupgrade.kairos.io/name";
/// The paths every upgrade leaves as they are (kairos-operator's).
pub const ALWAYS_EXCLUDED: [&str; 2] = ["/etc/hostname", "/etc/hosts"];
/// The phase right after the NodeOp is created.
pub const INITIALIZING: &str = "Initializing";
/// The reason of `Stalled` when a NodeOp of the upgrade's name belongs to something else.
pub const NODEOP_NOT_OWNED: &str = "NodeOpNotOwned";

/// What the shell does for a NodeOpUpgrade.
#[derive(Debug, Clone, PartialEq)]
pub enum UpgradeEffect {
    /// Create the NodeOp (already there: nothing to do).
    CreateNodeOp(Box<NodeOp>),
}

impl Effect for UpgradeEffect {
    fn before_status(&self) -> bool {
        false
    }
}

pub type UpgradeDecision = Decision<NodeOpUpgradeStatus, UpgradeEffect>;

/// The holder of a NodeOpUpgrade: it never holds a node itself (its NodeOp does).
pub fn upgrade_holder(u: &NodeOpUpgrade) -> Holder {
    Holder::NodeOpUpgrade {
        namespace: u.metadata.namespace.clone().unwrap_or_default(),
        name: u.metadata.name.clone().unwrap_or_default(),
    }
}

/// Decides one reconcile of a NodeOpUpgrade: create its NodeOp, or copy the NodeOp's status.
pub fn decide_upgrade(
    u: &NodeOpUpgrade,
    nodeop: Option<&NodeOp>,
    now: Timestamp,
) -> UpgradeDecision {
    let previous = u.status.clone().unwrap_or_default();
    if u.metadata.deletion_timestamp.is_some() {
        // The NodeOp is owned by the upgrade: the garbage collector deletes it, and its own
        // finalizer gives its nodes back.
        return UpgradeDecision::keep(previous);
    }
    let name = u.metadata.name.clone().unwrap_or_default();
    let mut status = match nodeop {
        None => NodeOpUpgradeStatus {
            phase: Some(INITIALIZING.into()),
            node_op_name: Some(name.clone()),
            message: Some("NodeOp created".into()),
            ..previous.clone()
        },
        Some(op) if !owned_by(op, u) => NodeOpUpgradeStatus {
            phase: Some("Failed".into()),
            node_op_name: Some(name.clone()),
            message: Some(format!(
                "NodeOp {name} exists and does not belong to this NodeOpUpgrade; delete it or rename the upgrade"
            )),
            ..previous.clone()
        },
        Some(op) => copied(op, &name),
    };
    status.conditions = previous.conditions.clone();
    let foreign = nodeop.is_some_and(|op| !owned_by(op, u));
    standing(&mut status, foreign, u.metadata.generation, now);
    status.last_updated = previous.last_updated.clone();
    if status != previous {
        status.last_updated = Some(Time(now));
    }
    let mut decision = UpgradeDecision::keep(status);
    if nodeop.is_none() {
        decision
            .effects
            .push(UpgradeEffect::CreateNodeOp(Box::new(render_nodeop(u))));
        decision.events.push(Event::normal(
            "NodeOpCreated",
            format!("Created NodeOp {name} to upgrade to {}", u.spec.image),
        ));
    }
    decision
}

/// kstatus' conditions, as the NodeOp's follow its phase: done is `Ready`; a failed NodeOp, or a
/// NodeOp of the upgrade's name that is not its own, is `Stalled` (only a change by someone goes
/// on); anything else, the NodeOp just created included, is `Reconciling`.
fn standing(
    status: &mut NodeOpUpgradeStatus,
    foreign: bool,
    generation: Option<i64>,
    now: Timestamp,
) {
    let message = status.message.clone().unwrap_or_default();
    let standing = match status.phase.as_deref() {
        _ if foreign => Standing::Stalled(NODEOP_NOT_OWNED, &message),
        Some(words::COMPLETED) => Standing::Ready(words::COMPLETED, &message),
        Some(words::FAILED) => Standing::Stalled(words::FAILED, &message),
        Some(INITIALIZING) => Standing::Reconciling(INITIALIZING, &message),
        Some(words::PREFLIGHT) => Standing::Reconciling(words::PREFLIGHT, &message),
        Some(words::RUNNING) => Standing::Reconciling(words::RUNNING, &message),
        _ => Standing::Reconciling(words::PENDING, &message),
    };
    set_standing(&mut status.conditions, standing, generation, now);
    status.observed_generation = generation;
}

/// The NodeOp's status, as the upgrade shows it (kairos-operator's messages).
fn copied(op: &NodeOp, name: &str) -> NodeOpUpgradeStatus {
    let st = op.status.clone().unwrap_or_default();
    let message = match st.phase.as_deref() {
        Some("Running") => "Upgrade operation is running",
        Some("Completed") => "Upgrade operation completed successfully",
        Some("Failed") => "Upgrade operation failed",
        _ => "Upgrade operation is pending",
    };
    let message = match &st.message {
        Some(why) => format!("{message}; {why}"),
        None => message.to_string(),
    };
    NodeOpUpgradeStatus {
        phase: st.phase.clone(),
        node_op_name: Some(name.to_string()),
        node_statuses: st.node_statuses.clone(),
        message: Some(message),
        last_updated: None,
        observed_generation: None,
        conditions: Vec::new(),
    }
}

fn owned_by(op: &NodeOp, u: &NodeOpUpgrade) -> bool {
    let uid = u.metadata.uid.as_deref().unwrap_or_default();
    op.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid)
}

/// The NodeOp of an upgrade, as kairos-operator makes it.
pub fn render_nodeop(u: &NodeOpUpgrade) -> NodeOp {
    let name = u.metadata.name.clone().unwrap_or_default();
    let spec = &u.spec;
    NodeOp {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: u.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "nodeopupgrade-controller".to_string(),
                ),
                (UPGRADE_LABEL.to_string(), name.clone()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: "operator.kairos.io/v1alpha1".into(),
                kind: "NodeOpUpgrade".into(),
                name,
                uid: u.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: NodeOpSpec {
            node_selector: spec.node_selector.clone(),
            command: upgrade_command(spec),
            host_mount_path: Some(DEFAULT_HOST_MOUNT_PATH.into()),
            image: Some(spec.image.clone()),
            image_pull_secrets: spec.image_pull_secrets.clone(),
            cordon: Some(true),
            uncordon_on_failure: spec.uncordon_on_failure,
            drain_options: Some(DrainOptions {
                enabled: Some(true),
                ..Default::default()
            }),
            reboot_on_success: Some(spec.upgrade_active.unwrap_or(true)),
            backoff_limit: None,
            concurrency: spec.concurrency,
            stop_on_failure: spec.stop_on_failure,
            preflight: upgrade_preflight(spec),
            // kairos' NodeOpUpgrade has no such field; its NodeOp can be given one directly.
            disruption: None,
        },
        status: None,
    }
}

/// `'text'` for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The version line a release file gives: `KAIROS_VERSION-<prefix><software version>`, empty when
/// the file or its `KAIROS_VERSION` is missing. Shared by the preflight and the upgrade.
const VERSION_OF: &str = r#"version_of() {
  [ -f "$1" ] || return 0
  (
    KAIROS_VERSION="" KAIROS_SOFTWARE_VERSION_PREFIX="" KAIROS_SOFTWARE_VERSION=""
    . "$1"
    if [ -n "$KAIROS_VERSION" ]; then
      echo "$KAIROS_VERSION-$KAIROS_SOFTWARE_VERSION_PREFIX$KAIROS_SOFTWARE_VERSION"
    fi
  )
}
release_version() { v=$(version_of "$1/etc/kairos-release"); [ -n "$v" ] || v=$(version_of "$1/etc/os-release"); echo "$v"; }
"#;

/// The upgrade's command: unless `force`, stop at once when the host already runs the image's
/// version; then the host's `/dev` and `/run` in the container, and `kairos-agent upgrade` from
/// the container's own root, the recovery partition and/or the active one.
pub fn upgrade_command(spec: &NodeOpUpgradeSpec) -> Vec<String> {
    let host = DEFAULT_HOST_MOUNT_PATH;
    let mut script = String::from("set -ex\n");
    if !spec.force.unwrap_or(false) {
        script += VERSION_OF;
        script += &format!(
            r#"target=$(release_version "")
current=$(release_version {host})
if [ -n "$target" ] && [ "$target" = "$current" ]; then
  echo "already at $target: nothing to upgrade"
  exit 0
fi
"#
        );
    }
    script += &format!("mount --rbind {host}/dev /dev\nmount --rbind {host}/run /run\n");
    let excluded: String = ALWAYS_EXCLUDED
        .iter()
        .map(|p| p.to_string())
        .chain(spec.exclude_paths.iter().flatten().cloned())
        .map(|p| format!(" --exclude-path {}", quoted(&p)))
        .collect();
    let agent = match spec.debug.unwrap_or(false) {
        true => "kairos-agent --debug",
        false => "kairos-agent",
    };
    let recovery = spec.upgrade_recovery.unwrap_or(false);
    let active = spec.upgrade_active.unwrap_or(true);
    if recovery {
        script += &format!("{agent} upgrade --recovery --source dir:/{excluded}\n");
    }
    if active || !recovery {
        script += &format!("{agent} upgrade --source dir:/{excluded}\n");
    }
    vec!["/bin/sh".into(), "-c".into(), script]
}

/// The preflight that skips a node already at the image's version (none with `force`): the
/// image's release files against the host's, a reason in the termination log to skip.
pub fn upgrade_preflight(spec: &NodeOpUpgradeSpec) -> Option<PreflightSpec> {
    if spec.force.unwrap_or(false) {
        return None;
    }
    let host = DEFAULT_HOST_MOUNT_PATH;
    let script = format!(
        r#"set -e
{VERSION_OF}target=$(release_version "")
current=$(release_version {host})
echo "host: ${{current:-unknown}}, image: ${{target:-unknown}}"
if [ -n "$target" ] && [ "$target" = "$current" ]; then
  echo "node is already at $target" > /dev/termination-log
fi
"#
    );
    Some(PreflightSpec {
        command: vec!["/bin/sh".into(), "-c".into(), script],
        image: None,
        active_deadline_seconds: Some(120),
    })
}

#[cfg(test)]
mod tests;
