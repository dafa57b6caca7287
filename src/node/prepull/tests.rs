use super::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const HASH: &str = "h1";

fn images() -> Vec<Image> {
    vec![
        Image {
            image: "rancher/kubectl:v1.34".into(),
            pull_policy: Some("IfNotPresent".into()),
        },
        Image {
            image: "rancher/k3s-upgrade:v1.34.4-k3s1".into(),
            pull_policy: None,
        },
    ]
}

fn with_plan<T>(f: impl FnOnce(&PullPlan<'_>) -> T) -> T {
    let images = images();
    let labels = BTreeMap::from([(
        "upgrade.cattle.io/controller".to_string(),
        "suc".to_string(),
    )]);
    let secrets = vec!["regcred".to_string()];
    f(&PullPlan {
        owner: "k3s",
        hash: HASH,
        images: &images,
        namespace: "system-upgrade",
        service_account: Some("system-upgrade"),
        pull_secrets: &secrets,
        labels: &labels,
        owner_references: &[],
    })
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some(message.into()),
        }),
        ..Default::default()
    }
}

fn terminated(reason: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(reason.into()),
            exit_code: 128,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    }
}

/// The pull pod of `node` at `hash`, its containers in `states` (`None`: no status yet).
fn pod(node: &str, hash: &str, states: &[Option<(ContainerState, &str)>]) -> Pod {
    let mut pod = with_plan(|p| pull_pod(&PullPlan { hash, ..p.clone() }, node));
    let statuses = states
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let (state, image_id) = s.clone()?;
            Some(ContainerStatus {
                name: format!("pull-{i}"),
                state: Some(state),
                image_id: image_id.into(),
                ..Default::default()
            })
        })
        .collect();
    pod.status = Some(PodStatus {
        container_statuses: Some(statuses),
        ..Default::default()
    });
    pod
}

fn pulled(node: &str) -> Pod {
    pod(
        node,
        HASH,
        &[
            Some((terminated("StartError"), "sha256:a")),
            Some((terminated("StartError"), "sha256:b")),
        ],
    )
}

fn pulling(node: &str) -> Pod {
    pod(node, HASH, &[None, None])
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

#[test]
fn images_are_the_containers_of_the_job_each_once_init_first() {
    let c = |name: &str, image: &str| Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("Always".into()),
        ..Default::default()
    };
    let spec = PodSpec {
        init_containers: Some(vec![c("drain", "kubectl"), c("prepare", "k3s")]),
        containers: vec![c("upgrade", "k3s"), c("sentinel", "busybox")],
        ..Default::default()
    };
    let got: Vec<String> = images_of(&spec).into_iter().map(|i| i.image).collect();
    assert_eq!(got, ["kubectl", "k3s", "busybox"]);
}

#[test]
fn a_pod_reads_as_pulled_only_once_every_container_was_created() {
    assert_eq!(read_pod(&pulling("n1")), NodePull::Pulling);
    assert_eq!(read_pod(&pulled("n1")), NodePull::Pulled);
    let one_of_two = pod("n1", HASH, &[Some((running(), "sha256:a")), None]);
    assert_eq!(read_pod(&one_of_two), NodePull::Pulling);
    let creating = pod(
        "n1",
        HASH,
        &[
            Some((waiting("ContainerCreating", ""), "")),
            Some((running(), "sha256:b")),
        ],
    );
    assert_eq!(read_pod(&creating), NodePull::Pulling);
    // The kubelet says it could not start the command: the image is there.
    let start_error = pod(
        "n1",
        HASH,
        &[
            Some((waiting("RunContainerError", "no such file"), "sha256:a")),
            Some((running(), "sha256:b")),
        ],
    );
    assert_eq!(read_pod(&start_error), NodePull::Pulled);
}

#[test]
fn a_pull_error_fails_the_pod_naming_the_image_and_the_kubelets_reason() {
    for reason in PULL_ERRORS {
        let p = pod(
            "n1",
            HASH,
            &[
                Some((running(), "sha256:a")),
                Some((waiting(reason, "not found"), "")),
            ],
        );
        assert_eq!(
            read_pod(&p),
            NodePull::Failed {
                image: "rancher/k3s-upgrade:v1.34.4-k3s1".into(),
                reason: reason.into(),
                message: "not found".into(),
            }
        );
    }
}

#[test]
fn pods_are_created_at_most_at_once_with_the_pulling_ones_counted() {
    let targets: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let first = with_plan(|p| step(p, &targets, &[]));
    assert_eq!(first.create.len(), AT_ONCE);
    assert_eq!(first.status.phase, PrePullPhase::Pulling);
    assert_eq!((first.status.nodes, first.status.pulled), (25, 0));
    // Three pulling, two pulled: seven more.
    let pods: Vec<Pod> = (0..3)
        .map(|i| pulling(targets[i]))
        .chain((3..5).map(|i| pulled(targets[i])))
        .collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let next = with_plan(|p| step(p, &targets, &refs));
    assert_eq!(next.create.len(), AT_ONCE - 3);
    let created: Vec<String> = next
        .create
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(created, targets[5..12]);
    assert_eq!(next.status.pulled, 2);
    assert!(next.delete.is_empty());
}

#[test]
fn once_every_node_has_the_images_every_pod_goes() {
    let pods = [pulled("n1"), pulled("n2")];
    let refs: Vec<&Pod> = pods.iter().collect();
    let s = with_plan(|p| step(p, &["n1", "n2"], &refs));
    assert!(s.pulled());
    assert_eq!(s.delete, names(&pods));
    assert!(s.create.is_empty());
    assert_eq!(
        s.status.message.as_deref(),
        Some("2 images pulled on 2 nodes")
    );
}

#[test]
fn a_node_that_cannot_pull_fails_the_pull_and_the_others_go_on() {
    let bad = pod(
        "n2",
        HASH,
        &[
            Some((waiting("ImagePullBackOff", "Back-off pulling image"), "")),
            None,
        ],
    );
    let pods = [pulled("n1"), bad];
    let refs: Vec<&Pod> = pods.iter().collect();
    let s = with_plan(|p| step(p, &["n1", "n2", "n3"], &refs));
    assert_eq!(s.status.phase, PrePullPhase::Failed);
    assert_eq!(
        s.status.message.as_deref(),
        Some(
            "node n2 cannot pull image rancher/kubectl:v1.34: ImagePullBackOff: Back-off pulling image"
        )
    );
    // The failed pod stays (the kubelet tries again); n3 is still pulled on.
    assert!(s.delete.is_empty());
    assert_eq!(names(&s.create), ["pre-pull-k3s-on-n3"]);
}

#[test]
fn pods_of_another_rollout_or_of_a_node_not_taken_are_deleted() {
    let old = pod("n1", "h0", &[None, None]);
    let elsewhere = pulling("n9");
    let mut going = pulling("n2");
    going.metadata.deletion_timestamp = Some(Time("2026-11-22T09:00:00Z".parse().expect("ts")));
    let mut foreign = pulling("n1");
    foreign
        .metadata
        .labels
        .as_mut()
        .map(|l| l.insert(PRE_PULL_LABEL.into(), "other".into()));
    let pods = [old, elsewhere, going, foreign];
    let refs: Vec<&Pod> = pods.iter().collect();
    let s = with_plan(|p| step(p, &["n1", "n2"], &refs));
    assert_eq!(s.delete, names(&pods[..2]));
    // Both nodes get a pod of this rollout; the one being deleted is not counted as one.
    assert_eq!(s.create.len(), 2);
    assert_eq!(leftovers("k3s", &refs), names(&pods[..2]));
}

#[test]
fn no_target_is_pulled_at_once() {
    let s = with_plan(|p| step(p, &[], &[]));
    assert!(s.pulled());
    assert_eq!(s.status.nodes, 0);
}

#[test]
fn a_pull_pod_is_pinned_tolerates_everything_and_runs_nothing() {
    let p = with_plan(|p| pull_pod(p, "node-1"));
    let spec = p.spec.expect("a spec");
    assert_eq!(spec.node_name.as_deref(), Some("node-1"));
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.service_account_name.as_deref(), Some("system-upgrade"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let secrets = spec.image_pull_secrets.unwrap_or_default();
    assert_eq!(secrets[0].name, "regcred");
    let tolerations = spec.tolerations.unwrap_or_default();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(tolerations[0].key, None);
    assert_eq!(spec.containers.len(), 2);
    for c in &spec.containers {
        assert_eq!(c.command.as_deref(), Some(&[NO_COMMAND.to_string()][..]));
        assert_eq!(c.args, None);
    }
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    let labels = p.metadata.labels.unwrap_or_default();
    assert_eq!(labels[PRE_PULL_LABEL], "k3s");
    assert_eq!(labels[PRE_PULL_HASH_LABEL], HASH);
    assert_eq!(labels["upgrade.cattle.io/controller"], "suc");
    assert_eq!(p.metadata.name.as_deref(), Some("pre-pull-k3s-on-node-1"));
}
