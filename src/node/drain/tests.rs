use super::*;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, PodStatus, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

fn now() -> Timestamp {
    "2026-11-22T10:00:00Z".parse().expect("a timestamp")
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn owned(mut p: Pod, kind: &str, owner: &str) -> Pod {
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: owner.into(),
        uid: format!("uid-{owner}"),
        controller: Some(true),
        ..Default::default()
    }]);
    p
}

fn phase(mut p: Pod, phase: &str) -> Pod {
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    p
}

fn with_empty_dir(mut p: Pod) -> Pod {
    p.spec = Some(PodSpec {
        volumes: Some(vec![Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    p
}

fn kubectl_defaults() -> DrainOptions {
    DrainOptions {
        ignore_daemonsets: false,
        delete_emptydir_data: false,
        force: false,
        grace_period_seconds: None,
        skip_wait_for_delete_timeout: None,
        pod_selector: None,
    }
}

fn names(refs: &[PodRef]) -> Vec<&str> {
    refs.iter().map(|r| r.name.as_str()).collect()
}

fn ds_exists(_: &str, name: &str) -> bool {
    name == "agent"
}

#[test]
fn nmo_options_evict_replicated_bare_and_emptydir_pods_and_skip_daemonsets_and_mirrors() {
    let mut mirror = pod("static");
    mirror.metadata.annotations = Some([(MIRROR_ANNOTATION.to_string(), "x".to_string())].into());
    let pods = [
        owned(pod("web"), "ReplicaSet", "web-1"),
        pod("bare"),
        with_empty_dir(owned(pod("cache"), "ReplicaSet", "cache-1")),
        owned(pod("agent-x"), "DaemonSet", "agent"),
        owned(pod("orphan"), "DaemonSet", "gone"),
        mirror,
    ];
    let plan = plan(&pods, ds_exists, &DrainOptions::default(), now());
    assert_eq!(names(&plan.evict), ["web", "bare", "cache", "orphan"]);
    let skipped: Vec<(&str, &Skip)> = plan
        .skipped
        .iter()
        .map(|(r, s)| (r.name.as_str(), s))
        .collect();
    assert_eq!(
        skipped,
        [("agent-x", &Skip::DaemonSet), ("static", &Skip::Mirror)]
    );
    assert!(!plan.is_blocked());
    assert_eq!(plan.warnings.len(), 3, "{:?}", plan.warnings);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.starts_with("pod shop/orphan: its DaemonSet is gone"))
    );
}

#[test]
fn kubectl_defaults_refuse_daemonset_emptydir_and_bare_pods() {
    let pods = [
        owned(pod("agent-x"), "DaemonSet", "agent"),
        with_empty_dir(owned(pod("cache"), "ReplicaSet", "c")),
        pod("bare"),
        owned(pod("web"), "ReplicaSet", "w"),
    ];
    let plan = plan(&pods, ds_exists, &kubectl_defaults(), now());
    let blocked: Vec<(&str, &Block)> = plan
        .blocked
        .iter()
        .map(|(r, b)| (r.name.as_str(), b))
        .collect();
    assert_eq!(
        blocked,
        [
            ("agent-x", &Block::DaemonSetManaged),
            ("cache", &Block::LocalStorage),
            ("bare", &Block::NoController)
        ]
    );
    assert!(plan.is_blocked());
    assert_eq!(names(&plan.evict), ["web"]);
    assert_eq!(
        Block::LocalStorage.to_string(),
        "has local storage (emptyDir) whose data would be lost"
    );
}

#[test]
fn finished_pods_are_left_alone_whatever_they_are() {
    let pods = [
        phase(pod("done"), "Succeeded"),
        phase(with_empty_dir(pod("failed")), "Failed"),
        phase(owned(pod("ds-done"), "DaemonSet", "agent"), "Succeeded"),
        owned(pod("web"), "ReplicaSet", "web"),
    ];
    let plan = plan(&pods, ds_exists, &kubectl_defaults(), now());
    // Nothing to wait for: they run nothing (no controller, emptyDir or DaemonSet blocks).
    assert_eq!(names(&plan.evict), ["web"]);
    assert!(!plan.is_blocked() && plan.warnings.is_empty());
    let skipped: Vec<&Skip> = plan.skipped.iter().map(|(_, s)| s).collect();
    assert_eq!(skipped, [&Skip::Finished; 3]);
}

fn labelled(mut p: Pod, key: &str, value: &str) -> Pod {
    p.metadata
        .labels
        .get_or_insert_default()
        .insert(key.into(), value.into());
    p
}

#[test]
fn the_controllers_own_pods_are_never_drained_whatever_else_they_are() {
    let controller = labelled(
        owned(pod("system-upgrade-controller-7d9"), "ReplicaSet", "suc"),
        crate::common::labels::CONTROLLER,
        "system-upgrade-controller",
    );
    // A Job's pod of another controller name, bare and with emptyDir: still not the drain's,
    // as a Plan's `kubectl drain --pod-selector '!upgrade.cattle.io/controller'` leaves it.
    let job_pod = labelled(
        with_empty_dir(pod("apply-k3s-on-n1")),
        crate::common::labels::CONTROLLER,
        "other",
    );
    let web = labelled(owned(pod("web"), "ReplicaSet", "web"), "app", "web");
    let pods = [controller.clone(), job_pod.clone(), web];
    for options in [DrainOptions::default(), kubectl_defaults()] {
        let plan = plan(&pods, ds_exists, &options, now());
        assert_eq!(names(&plan.evict), ["web"]);
        assert!(!plan.is_blocked(), "{:?}", plan.blocked);
        assert_eq!(
            plan.skipped,
            [
                (PodRef::of(&controller), Skip::Controller),
                (PodRef::of(&job_pod), Skip::Controller)
            ]
        );
    }
    // Nothing left to evict but the controller: the node counts as drained.
    let plan = plan(&[controller], ds_exists, &DrainOptions::default(), now());
    assert!(plan.evict.is_empty() && !plan.is_blocked());
}

#[test]
fn pods_deleted_longer_ago_than_the_limit_are_skipped() {
    let mut old = owned(pod("old"), "ReplicaSet", "r");
    old.metadata.deletion_timestamp = Some(Time("2026-11-22T09:00:00Z".parse().expect("ts")));
    let mut recent = owned(pod("recent"), "ReplicaSet", "r");
    recent.metadata.deletion_timestamp = Some(Time("2026-11-22T09:59:50Z".parse().expect("ts")));
    let options = DrainOptions {
        skip_wait_for_delete_timeout: Some(Duration::from_secs(60)),
        ..DrainOptions::default()
    };
    let plan = plan(&[old.clone(), recent.clone()], ds_exists, &options, now());
    assert_eq!(plan.skipped, [(PodRef::of(&old), Skip::DeletedLongAgo)]);
    assert_eq!(names(&plan.evict), ["recent"]);
    let plan = super::plan(&[old], ds_exists, &DrainOptions::default(), now());
    assert_eq!(names(&plan.evict), ["old"], "no limit: still waited for");
}

#[test]
fn a_pod_selector_leaves_the_pods_it_does_not_select_as_kubectl_does() {
    let selected = labelled(owned(pod("web"), "ReplicaSet", "r"), "drain", "yes");
    // Bare, with emptyDir data: it would refuse kubectl's defaults, but it is not the drain's.
    let other = with_empty_dir(pod("cache"));
    let wanted = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: Some([("drain".to_string(), "yes".to_string())].into()),
        ..Default::default()
    };
    let selector =
        crate::common::selector::Selector::from_label_selector(Some(&wanted)).expect("a selector");
    let options = DrainOptions {
        pod_selector: Some(selector),
        ..kubectl_defaults()
    };
    let plan = plan(&[selected, other.clone()], ds_exists, &options, now());
    assert_eq!(names(&plan.evict), ["web"]);
    assert_eq!(plan.skipped, [(PodRef::of(&other), Skip::NotSelected)]);
    assert!(!plan.is_blocked());
}

fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(message, reason)
            .with_code(code)
            .boxed(),
    )
}

#[test]
fn eviction_answers_are_read_as_kubectl_reads_them() {
    assert_eq!(EvictionOutcome::of(Ok(())), EvictionOutcome::Evicted);
    assert_eq!(
        EvictionOutcome::of(Err(&api_error(404, "NotFound", "gone"))),
        EvictionOutcome::Gone
    );
    assert_eq!(
        EvictionOutcome::of(Err(&api_error(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget."
        ))),
        EvictionOutcome::Disrupted {
            message: "Cannot evict pod as it would violate the pod's disruption budget.".into()
        }
    );
    assert_eq!(
        EvictionOutcome::of(Err(&api_error(403, "NamespaceTerminating", "terminating"))),
        EvictionOutcome::Terminating
    );
    assert!(matches!(
        EvictionOutcome::of(Err(&api_error(500, "InternalError", "This pod has more than one PodDisruptionBudget"))),
        EvictionOutcome::Failed(m) if m.contains("more than one")
    ));
    assert!(matches!(
        EvictionOutcome::of(Err(&api_error(403, "Forbidden", "no"))),
        EvictionOutcome::Failed(_)
    ));
}

#[test]
fn the_eviction_body_carries_the_grace_period_and_the_uid() {
    let r = PodRef::of(&pod("web"));
    let v = serde_json::to_value(eviction(&r, Some(7))).unwrap_or_default();
    assert_eq!(v["deleteOptions"]["gracePeriodSeconds"], 7);
    assert_eq!(v["deleteOptions"]["preconditions"]["uid"], "uid-web");
    assert_eq!(v["metadata"]["name"], "web");
    assert_eq!(v["apiVersion"], "policy/v1");
    let v = serde_json::to_value(eviction(&r, None)).unwrap_or_default();
    assert!(
        v["deleteOptions"].get("gracePeriodSeconds").is_none(),
        "the pod's own"
    );
}

#[test]
fn the_budgets_that_select_a_pod_are_named_with_what_they_allow() {
    let mut p = pod("web-1");
    p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    let budget = |name: &str, ns: &str, app: &str, allowed: i32| -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}
        }))
        .expect("a pdb")
    };
    let pdbs = [
        budget("web", "shop", "web", 0),
        budget("db", "shop", "db", 0),
        budget("web", "other", "web", 0),
    ];
    assert_eq!(
        describe_blocking(&p, &pdbs).as_deref(),
        Some("PodDisruptionBudget shop/web allows 0 disruption(s) now (1 healthy, 1 needed)")
    );
    assert_eq!(describe_blocking(&p, &pdbs[1..2]), None);
}

#[test]
fn the_attachments_of_a_node_are_named_with_their_volume() {
    use k8s_openapi::api::storage::v1::{
        VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
    };
    let attachment = |name: &str, node: &str, pv: Option<&str>| VolumeAttachment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: "ebs.csi.aws.com".into(),
            node_name: node.into(),
            source: VolumeAttachmentSource {
                persistent_volume_name: pv.map(str::to_string),
                ..Default::default()
            },
        },
        status: None,
    };
    let all = [
        attachment("csi-b", "n1", Some("pv-b")),
        attachment("csi-x", "n2", Some("pv-x")),
        attachment("csi-a", "n1", None),
    ];
    assert_eq!(attached_to(&all, "n1"), ["csi-a", "csi-b (pv-b)"]);
    assert!(attached_to(&all, "n3").is_empty());
    let mut view = PodsView::default();
    assert!(view.is_drained() && view.volumes_message().is_none());
    view.attached = attached_to(&all, "n1");
    assert!(!view.is_drained());
    assert_eq!(
        view.volumes_message().as_deref(),
        Some("waiting for 2 volume attachments to detach: csi-a and 1 more")
    );
}
