//! The pod: on the node's host namespaces, pinned to its hostname, never beside another pod of
//! the Plan (or of any exclusive Plan) on the same node, and with `spec.reboot` ending in the
//! step that writes the reboot sentinel.

use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PodAffinityTerm, PodAntiAffinity, PodSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::plan::api::labels;
use crate::plan::core::config::JobConfig;
use crate::plan::core::reboot;

use super::containers::{init_containers, upgrade_container};
use super::volumes::pod_volumes;
use super::{RenderError, Target, non_empty_string};

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// The pod: on the node's host namespaces, pinned to its hostname, never beside another pod of
/// the Plan (or of any exclusive Plan) on the same node.
pub(super) fn pod_spec(
    t: &Target<'_>,
    config: &JobConfig,
    job_name: &str,
) -> Result<PodSpec, RenderError> {
    let spec = &t.plan.spec;
    let mut init = init_containers(t, config)?;
    let upgrade = upgrade_container(t, config);
    let mut volumes = pod_volumes(t.plan);
    // With `spec.reboot`, the upgrade becomes the last init container and the only main container
    // writes the sentinel, so the sentinel exists only if every step before it succeeded.
    let containers = match &t.settings.reboot {
        Some(policy) if !t.windows => {
            init.push(upgrade);
            volumes.push(reboot::sentinel_volume(policy));
            vec![Container {
                name: reboot::SENTINEL_NAME.to_string(),
                image: Some(policy.image.clone()),
                command: Some(reboot::sentinel_step_command(job_name)),
                image_pull_policy: Some(config.image_pull_policy.clone()),
                volume_mounts: Some(vec![reboot::sentinel_mount()]),
                ..Default::default()
            }]
        }
        _ => vec![upgrade],
    };
    let mut tolerations = vec![Toleration {
        key: Some(UNSCHEDULABLE_TAINT.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Default::default()
    }];
    tolerations.extend(spec.tolerations.iter().flatten().cloned());
    Ok(PodSpec {
        host_ipc: Some(true),
        host_pid: Some(true),
        host_network: Some(true),
        dns_policy: Some("ClusterFirstWithHostNet".to_string()),
        priority_class_name: non_empty_string(spec.priority_class_name.as_deref()),
        service_account_name: non_empty_string(spec.service_account_name.as_deref()),
        affinity: Some(affinity(t)),
        tolerations: Some(tolerations),
        restart_policy: Some("Never".to_string()),
        volumes: Some(volumes),
        image_pull_secrets: spec.image_pull_secrets.clone().filter(|s| !s.is_empty()),
        init_containers: (!init.is_empty()).then_some(init),
        containers,
        ..Default::default()
    })
}

fn affinity(t: &Target<'_>) -> Affinity {
    let (key, value) = if t.plan.spec.exclusive.unwrap_or(false) {
        (labels::EXCLUSIVE, "true")
    } else {
        (labels::PLAN, t.plan_name)
    };
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: labels::HOSTNAME.to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![t.node.hostname().to_string()]),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: key.to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![value.to_string()]),
                    }]),
                    ..Default::default()
                }),
                topology_key: labels::HOSTNAME.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::naming::job_name;
    use crate::plan::core::job::fixtures::*;
    use k8s_openapi::api::batch::v1::Job;

    fn anti_affinity(job: &Job) -> (String, Vec<String>, String) {
        let term = &pod(job)
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("anti-affinity")[..];
        assert_eq!(term.len(), 1);
        let expr = &term[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_expressions.as_ref())
            .expect("expressions")[..];
        assert_eq!(expr.len(), 1);
        assert_eq!(expr[0].operator, "In");
        (
            expr[0].key.clone(),
            expr[0].values.clone().unwrap_or_default(),
            term[0].topology_key.clone(),
        )
    }

    // --- scheduling ---

    #[test]
    fn anti_affinity_is_per_plan_or_exclusive() {
        let mut p = basic();
        let job = render(&p);
        assert_eq!(
            anti_affinity(&job),
            (
                labels::PLAN.to_string(),
                vec!["k3s-server".to_string()],
                labels::HOSTNAME.to_string()
            )
        );
        assert_eq!(
            job.metadata.labels.as_ref().expect("labels")[labels::EXCLUSIVE],
            "false"
        );

        p.spec.exclusive = Some(true);
        let job = render(&p);
        assert_eq!(
            anti_affinity(&job),
            (
                labels::EXCLUSIVE.to_string(),
                vec!["true".to_string()],
                labels::HOSTNAME.to_string()
            )
        );
        assert_eq!(
            job.metadata.labels.as_ref().expect("labels")[labels::EXCLUSIVE],
            "true"
        );
    }

    #[test]
    fn builtin_toleration_comes_first() {
        let p = plan(
            "upgrade:\n  image: u\ntolerations:\n- {key: CriticalAddonsOnly, operator: Exists}\n- {key: kubernetes.io/arch, operator: Equal, value: arm64, effect: NoSchedule}\n",
        );
        let tolerations = pod(&render(&p)).tolerations.clone().expect("tolerations");
        assert_eq!(tolerations.len(), 3);
        assert_eq!(
            tolerations[0],
            Toleration {
                key: Some("node.kubernetes.io/unschedulable".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }
        );
        assert_eq!(tolerations[1].key.as_deref(), Some("CriticalAddonsOnly"));
        assert_eq!(tolerations[2].value.as_deref(), Some("arm64"));
        assert_eq!(
            pod(&render(&basic())).tolerations.as_ref().map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn hostname_pins_the_pod_and_node_name_names_the_job() {
        let p = basic();
        let mut n = node("node-1.example.com");
        n.labels
            .insert(labels::HOSTNAME.into(), "Node-1-Host".into());
        let job = render_on(&p, &n, &JobConfig::default()).expect("renders");
        let required = pod(&job)
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("node affinity");
        assert_eq!(required.node_selector_terms.len(), 1);
        let expr = required.node_selector_terms[0]
            .match_expressions
            .as_ref()
            .expect("expressions");
        assert_eq!(
            expr,
            &vec![NodeSelectorRequirement {
                key: labels::HOSTNAME.into(),
                operator: "In".into(),
                values: Some(vec!["Node-1-Host".into()]),
            }]
        );
        assert_eq!(pod(&job).node_name, None);
        assert_eq!(
            job.metadata.name.as_deref(),
            Some(job_name("k3s-server", "node-1.example.com", HASH).as_str())
        );
        assert!(
            job.metadata
                .name
                .as_deref()
                .expect("name")
                .starts_with("apply-k3s-server-on-node-1-with-")
        );
        let l = job.metadata.labels.as_ref().expect("labels");
        assert_eq!(l[labels::NODE], "node-1.example.com");

        // Without a hostname label the node name is used.
        let mut bare = node("bare");
        bare.labels.clear();
        let job = render_on(&p, &bare, &JobConfig::default()).expect("renders");
        let values = pod(&job)
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .and_then(|s| s.node_selector_terms[0].match_expressions.as_ref())
            .and_then(|e| e[0].values.clone());
        assert_eq!(values, Some(vec!["bare".to_string()]));
    }
}
