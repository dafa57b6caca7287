//! What the Job and its pod carry besides their spec: SUC's labels, the Plan's own labels and
//! annotations, and a digest of the template, so that a changed template can be told without
//! comparing API-server-defaulted specs.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use sha2::{Digest, Sha256};

use super::Target;
use crate::common::naming::hex;
use crate::plan::api::{Plan, labels};

/// Job annotation with a digest of `spec.template`, written by slipway only.
pub const POD_TEMPLATE_HASH_ANNOTATION: &str = "slipway.dev/pod-template-hash";

/// The labels of the Job and its pod: SUC's, then the Plan's own except `*cattle.io/*`.
pub(super) fn job_labels(t: &Target<'_>, controller_name: &str) -> BTreeMap<String, String> {
    let exclusive = t.plan.spec.exclusive.unwrap_or(false);
    let mut job_labels = BTreeMap::from([
        (labels::CONTROLLER.to_string(), controller_name.to_string()),
        (labels::EXCLUSIVE.to_string(), exclusive.to_string()),
        (labels::NODE.to_string(), t.node.name.clone()),
        (labels::PLAN.to_string(), t.plan_name.to_string()),
        (labels::VERSION.to_string(), t.latest_version.to_string()),
        (
            labels::plan_node_label(t.plan_name),
            t.latest_hash.to_string(),
        ),
    ]);
    job_labels.extend(
        t.plan
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| !k.contains("cattle.io/"))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    job_labels
}

/// The Plan's annotations that Jobs and pods carry: all but `*cattle.io/*` and kubectl's.
pub(super) fn plan_annotations(plan: &Plan) -> BTreeMap<String, String> {
    plan.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !k.contains("cattle.io/") && !k.contains("kubectl.kubernetes.io/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The digest of a pod template that [`POD_TEMPLATE_HASH_ANNOTATION`] records: the first 16 hex
/// digits of the sha256 of its JSON (field order fixed by the types, maps sorted).
pub fn compute_pod_template_hash(template: &PodTemplateSpec) -> Result<String, serde_json::Error> {
    let json = serde_json::to_vec(template)?;
    let mut digest = hex(&Sha256::digest(&json));
    digest.truncate(16);
    Ok(digest)
}

/// The template digest a Job was rendered with, if slipway rendered it.
pub fn pod_template_hash(job: &Job) -> Option<&str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(POD_TEMPLATE_HASH_ANNOTATION)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::config::JobConfig;
    use crate::plan::core::job::fixtures::*;

    // --- SUC's job_suite_test.go ---

    #[test]
    fn labels_and_annotations_propagate_without_cattle_keys() {
        let mut p = basic();
        p.metadata.labels = Some(BTreeMap::from([
            ("foo".to_string(), "bar".to_string()),
            ("example.com/team".to_string(), "infra".to_string()),
            ("plan.cattle.io/x".to_string(), "dropped".to_string()),
            (
                "upgrade.cattle.io/controller".to_string(),
                "spoof".to_string(),
            ),
            ("management.cattle.io/y".to_string(), "dropped".to_string()),
        ]));
        p.metadata.annotations = Some(BTreeMap::from([
            ("note".to_string(), "kept".to_string()),
            ("plan.cattle.io/x".to_string(), "dropped".to_string()),
            (labels::DIGEST.to_string(), "spec.concurrency".to_string()),
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{}".to_string(),
            ),
        ]));
        let job = render(&p);
        let job_labels = job.metadata.labels.as_ref().expect("labels");
        let template = job
            .spec
            .as_ref()
            .expect("spec")
            .template
            .metadata
            .as_ref()
            .expect("meta");
        assert_eq!(template.labels.as_ref(), Some(job_labels));
        assert_eq!(job_labels["foo"], "bar");
        assert_eq!(job_labels["example.com/team"], "infra");
        assert!(!job_labels.contains_key("plan.cattle.io/x"));
        assert!(!job_labels.contains_key("management.cattle.io/y"));
        assert_eq!(job_labels[labels::CONTROLLER], "system-upgrade-controller");
        assert_eq!(job_labels.len(), 8);

        let job_annotations = job.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(job_annotations["note"], "kept");
        assert_eq!(job_annotations[labels::TTL_SECONDS_AFTER_FINISHED], "900");
        assert!(job_annotations.contains_key(POD_TEMPLATE_HASH_ANNOTATION));
        assert_eq!(job_annotations.len(), 3);
        assert_eq!(
            template.annotations,
            Some(BTreeMap::from([("note".to_string(), "kept".to_string())]))
        );
    }

    #[test]
    fn without_plan_annotations_the_pod_has_none() {
        let job = render(&basic());
        let template = job
            .spec
            .as_ref()
            .expect("spec")
            .template
            .metadata
            .as_ref()
            .expect("meta");
        assert_eq!(template.annotations, None);
    }

    // --- pod template hash ---

    #[test]
    fn pod_template_hash_tracks_the_template_only() {
        let job = render(&basic());
        let hash = pod_template_hash(&job).expect("hash").to_string();
        assert_eq!(hash.len(), 16);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            hash,
            compute_pod_template_hash(&job.spec.as_ref().expect("spec").template).expect("hash")
        );
        // Deterministic.
        assert_eq!(pod_template_hash(&render(&basic())), Some(hash.as_str()));
        // Not copied into the pod.
        let template_meta = job.spec.as_ref().expect("spec").template.metadata.clone();
        assert!(
            template_meta
                .and_then(|m| m.annotations)
                .is_none_or(|a| !a.contains_key(POD_TEMPLATE_HASH_ANNOTATION))
        );
        // Job-level settings do not change it; the template does.
        let config = JobConfig {
            backoff_limit: 7,
            ttl_seconds_after_finished: 60,
            active_deadline_seconds: 60,
            ..Default::default()
        };
        assert_eq!(
            pod_template_hash(&render_with(&basic(), &config)),
            Some(hash.as_str())
        );
        let mut changed = basic();
        changed.spec.upgrade.args = Some(vec!["exit 0".into()]);
        assert_ne!(pod_template_hash(&render(&changed)), Some(hash.as_str()));
        let mut relabelled = basic();
        relabelled.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert_ne!(pod_template_hash(&render(&relabelled)), Some(hash.as_str()));

        assert_eq!(pod_template_hash(&Job::default()), None);
    }
}
