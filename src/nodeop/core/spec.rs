//! A NodeOp's spec with kairos-operator's defaults applied, as the decision uses it.

use std::time::Duration;

use k8s_openapi::api::core::v1::LocalObjectReference;

use crate::common::selector::Selector;
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::{DrainOptions, OnDrainTimeout};
use crate::nodeop::api::{
    DEFAULT_BACKOFF_LIMIT, DEFAULT_HOST_MOUNT_PATH, DEFAULT_IMAGE, DEFAULT_PREFLIGHT_DEADLINE,
    NodeOpSpec,
};

/// How a NodeOp runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub selector: Selector,
    pub command: Vec<String>,
    pub image: String,
    pub pull_secrets: Vec<LocalObjectReference>,
    pub host_mount_path: String,
    pub backoff_limit: i32,
    pub cordon: bool,
    /// The drain before the Job (only with `cordon`, as kairos-operator), and how long it may take.
    pub drain: Option<Drain>,
    pub uncordon_on_failure: bool,
    pub reboot: bool,
    /// At most this many nodes at once; `None`: every node.
    pub concurrency: Option<usize>,
    pub stop_on_failure: bool,
    pub preflight: Option<Preflight>,
    /// The nodes that start next are tainted `PreferNoSchedule` (`spec.disruption`).
    pub taints_next: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Drain {
    pub options: DrainOptions,
    pub timeout: Option<Duration>,
    /// What the drain does once its timeout passed.
    pub on_timeout: OnDrainTimeout,
    /// The drain waits for the node's volumes to detach.
    pub volumes: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Preflight {
    pub command: Vec<String>,
    pub image: String,
    pub deadline_seconds: i64,
}

/// The spec with its defaults, or why it cannot run (the selector does not parse).
pub fn settings(spec: &NodeOpSpec) -> Result<Settings, String> {
    // kairos-operator: no selector selects every node.
    let selector = match &spec.node_selector {
        None => Selector::everything(),
        Some(s) => {
            Selector::from_label_selector(Some(s)).map_err(|e| format!("spec.nodeSelector: {e}"))?
        }
    };
    let image = spec
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let cordon = spec.cordon.unwrap_or(false);
    if let Some(disruption) = &spec.disruption {
        crate::node::disruption::validate(disruption, "spec.disruption")?;
    }
    let drain = spec
        .drain_options
        .as_ref()
        .filter(|d| cordon && d.enabled.unwrap_or(false))
        .map(|d| Drain {
            options: DrainOptions {
                ignore_daemonsets: d.ignore_daemon_sets.unwrap_or(true),
                delete_emptydir_data: d.delete_empty_dir_data.unwrap_or(false),
                force: d.force.unwrap_or(false),
                grace_period_seconds: d.grace_period_seconds.filter(|g| *g >= 0).map(i64::from),
                skip_wait_for_delete_timeout: None,
                pod_selector: None,
            },
            timeout: d
                .timeout_seconds
                .and_then(|t| u64::try_from(t).ok())
                .filter(|t| *t > 0)
                .map(Duration::from_secs),
            on_timeout: DisruptionSpec::on_drain_timeout(spec.disruption.as_ref()),
            volumes: DisruptionSpec::waits_for_volumes(spec.disruption.as_ref()),
        });
    let preflight = spec.preflight.as_ref().map(|p| Preflight {
        command: p.command.clone(),
        image: p
            .image
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| image.clone()),
        deadline_seconds: i64::from(
            p.active_deadline_seconds
                .filter(|d| *d > 0)
                .unwrap_or(DEFAULT_PREFLIGHT_DEADLINE),
        ),
    });
    Ok(Settings {
        selector,
        command: spec.command.clone(),
        pull_secrets: spec.image_pull_secrets.clone().unwrap_or_default(),
        host_mount_path: spec
            .host_mount_path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_HOST_MOUNT_PATH.to_string()),
        backoff_limit: spec
            .backoff_limit
            .filter(|b| *b >= 0)
            .unwrap_or(DEFAULT_BACKOFF_LIMIT),
        image,
        cordon,
        drain,
        uncordon_on_failure: spec.uncordon_on_failure.unwrap_or(false),
        reboot: spec.reboot_on_success.unwrap_or(false),
        concurrency: spec
            .concurrency
            .and_then(|c| usize::try_from(c).ok())
            .filter(|c| *c > 0),
        stop_on_failure: spec.stop_on_failure.unwrap_or(false),
        taints_next: DisruptionSpec::taints_next(spec.disruption.as_ref()),
        preflight,
    })
}
