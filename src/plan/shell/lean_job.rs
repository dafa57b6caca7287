//! A Job as the Plan's cache keeps it, decoded straight from the watch: without what
//! [`super::watch::prune_job`] would drop. A 1,000-node rollout's profile had a tenth of the
//! controller's CPU in decoding Jobs, half of it their `managedFields` (a JSON tree each) and
//! most of the rest their pod template, both thrown away right after; serde skips a field it
//! does not know without building anything.

use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus, PodFailurePolicy, SuccessPolicy};
use serde::{Deserialize, Deserializer};

use crate::runtime::lean::{LeanMeta, lean_resource};

/// A Job without its `managedFields`, pod template, selector and uncounted pods.
#[derive(Clone, Debug)]
pub struct LeanJob(pub Job);

lean_resource!(LeanJob, Job);

/// `JobSpec` but `template` and `selector`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    active_deadline_seconds: Option<i64>,
    backoff_limit: Option<i32>,
    backoff_limit_per_index: Option<i32>,
    completion_mode: Option<String>,
    completions: Option<i32>,
    managed_by: Option<String>,
    manual_selector: Option<bool>,
    max_failed_indexes: Option<i32>,
    parallelism: Option<i32>,
    pod_failure_policy: Option<PodFailurePolicy>,
    pod_replacement_policy: Option<String>,
    success_policy: Option<SuccessPolicy>,
    suspend: Option<bool>,
    ttl_seconds_after_finished: Option<i32>,
}

#[derive(Deserialize)]
struct Wire {
    metadata: Option<LeanMeta>,
    spec: Option<Spec>,
    status: Option<JobStatus>,
}

impl<'de> Deserialize<'de> for LeanJob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Wire {
            metadata,
            spec,
            status,
        } = Wire::deserialize(d)?;
        let metadata = LeanMeta::into_meta(metadata);
        let spec = spec.map(|s| JobSpec {
            active_deadline_seconds: s.active_deadline_seconds,
            backoff_limit: s.backoff_limit,
            backoff_limit_per_index: s.backoff_limit_per_index,
            completion_mode: s.completion_mode,
            completions: s.completions,
            managed_by: s.managed_by,
            manual_selector: s.manual_selector,
            max_failed_indexes: s.max_failed_indexes,
            parallelism: s.parallelism,
            pod_failure_policy: s.pod_failure_policy,
            pod_replacement_policy: s.pod_replacement_policy,
            selector: None,
            success_policy: s.success_policy,
            suspend: s.suspend,
            template: Default::default(),
            ttl_seconds_after_finished: s.ttl_seconds_after_finished,
        });
        let status = status.map(|s| JobStatus {
            uncounted_terminated_pods: None,
            ..s
        });
        Ok(LeanJob(Job {
            metadata,
            spec,
            status,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::shell::watch::prune_job;
    use serde_json::{Value, json};

    /// What the watch decodes, whole and then pruned as the cache kept it before.
    fn pruned(v: &Value) -> Job {
        let mut job: Job = serde_json::from_value(v.clone()).expect("a Job");
        prune_job(&mut job);
        job
    }

    fn lean(v: &Value) -> Job {
        serde_json::from_str::<LeanJob>(&v.to_string())
            .expect("a lean Job")
            .0
    }

    /// A Job as the API server sends it during a rollout: every field a decision might read,
    /// and those the cache drops.
    fn full_job() -> Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "apply-k3s-server-on-n1-with-abc",
                "namespace": "system-upgrade",
                "uid": "u-1",
                "resourceVersion": "4711",
                "generation": 2,
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "deletionTimestamp": "2026-11-27T10:05:00Z",
                "deletionGracePeriodSeconds": 0,
                "generateName": "apply-",
                "selfLink": "/apis/batch/v1/namespaces/system-upgrade/jobs/x",
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "labels": {"upgrade.cattle.io/plan": "k3s-server", "upgrade.cattle.io/node": "n1"},
                "annotations": {"upgrade.cattle.io/version": "v1.30.1+k3s1"},
                "ownerReferences": [{
                    "apiVersion": "upgrade.cattle.io/v1", "kind": "Plan", "name": "k3s-server",
                    "uid": "p-1", "controller": true, "blockOwnerDeletion": false
                }],
                "managedFields": [{
                    "manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "batch/v1", "time": "2026-11-27T10:01:00Z",
                    "fieldsType": "FieldsV1", "subresource": "status",
                    "fieldsV1": {"f:status": {"f:active": {}, "f:conditions": {".": {}}}}
                }]
            },
            "spec": {
                "activeDeadlineSeconds": 900,
                "backoffLimit": 2,
                "completionMode": "NonIndexed",
                "completions": 1,
                "manualSelector": false,
                "parallelism": 1,
                "podReplacementPolicy": "TerminatingOrFailed",
                "suspend": false,
                "ttlSecondsAfterFinished": 900,
                "podFailurePolicy": {"rules": [{
                    "action": "FailJob",
                    "onExitCodes": {"operator": "In", "values": [42]}
                }]},
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                "template": {
                    "metadata": {"labels": {"upgrade.cattle.io/plan": "k3s-server"}},
                    "spec": {
                        "nodeName": "n1",
                        "containers": [{
                            "name": "upgrade", "image": "rancher/k3s-upgrade:v1.30.1-k3s1",
                            "volumeMounts": [{"name": "host-root", "mountPath": "/host"}],
                            "env": [{"name": "SYSTEM_UPGRADE_NODE_NAME", "value": "n1"}]
                        }],
                        "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}]
                    }
                }
            },
            "status": {
                "active": 1,
                "ready": 1,
                "failed": 1,
                "startTime": "2026-11-27T10:00:01Z",
                "completionTime": "2026-11-27T10:04:00Z",
                "uncountedTerminatedPods": {"succeeded": ["pod-1"]},
                "conditions": [{
                    "type": "Complete", "status": "True",
                    "lastProbeTime": "2026-11-27T10:04:00Z",
                    "lastTransitionTime": "2026-11-27T10:04:00Z",
                    "reason": "CompletionsReached", "message": "done"
                }]
            }
        })
    }

    #[test]
    fn a_lean_job_is_the_job_the_cache_kept() {
        let full = full_job();
        let job = lean(&full);
        assert_eq!(job, pruned(&full));
        // Nothing a decision reads was lost on the way.
        assert_eq!(
            job.metadata.deletion_timestamp,
            pruned(&full).metadata.deletion_timestamp
        );
        assert_eq!(job.spec.as_ref().and_then(|s| s.parallelism), Some(1));
        assert!(job.metadata.managed_fields.is_none());
    }

    #[test]
    fn jobs_missing_parts_decode_as_the_cache_kept_them() {
        let full = full_job();
        let mut cases = vec![json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}})];
        for drop in ["spec", "status"] {
            let mut v = full.clone();
            v.as_object_mut().expect("an object").remove(drop);
            cases.push(v);
        }
        for field in ["labels", "annotations", "ownerReferences", "managedFields"] {
            let mut v = full.clone();
            v["metadata"][field] = Value::Null;
            cases.push(v);
        }
        let mut no_template = full.clone();
        no_template["spec"]
            .as_object_mut()
            .expect("a spec")
            .remove("template");
        cases.push(no_template);
        for case in cases {
            assert_eq!(lean(&case), pruned(&case), "{case}");
        }
    }

    #[test]
    fn the_golden_job_decodes_as_the_cache_kept_it() {
        let text = include_str!("../../../tests/golden/k3os-latest-job.json");
        let v: Value = serde_json::from_str(text).expect("the golden Job");
        assert_eq!(lean(&v), pruned(&v));
    }
}
