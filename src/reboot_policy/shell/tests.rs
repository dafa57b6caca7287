//! What a RebootPolicy's reconcile does when the API server fails one of its writes: the
//! reconcile's result, and which writes were sent (in order) before and after the failure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::watch::policy_view;
use super::*;
use crate::node::cordon::{self, CordonOwner};
use crate::node::handoff::Handoff;
use crate::reboot_policy::api::{RebootPolicySpec, RebootSignals};
use crate::reboot_policy::core::request::REBOOT_REQUIRED_ANNOTATION;
use crate::reboot_policy::core::{CONDITION_HANDLED, FLATCAR_PREFIX, REBOOT_NEEDED};
use crate::runtime::ErrorKind::{
    self, conflict, gone, not_found, server, timeout, too_many_requests,
};
use crate::runtime::testing::{
    self, ALREADY_EXISTS, Answer, ApiServer, CONFLICT, GONE, NOT_FOUND, Row, SERVER_ERROR, Sent,
    TIMEOUT, TOO_MANY_REQUESTS,
};
use crate::runtime::watch::changes;

/// Where the policy and its node stand when the policy is reconciled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scene {
    /// Just created: no finalizer yet.
    New,
    /// The node asks for a reboot (slipway agent): the status names it, then it is cordoned.
    Start,
    /// The node asks by a Node condition: the occurrence is recorded on the node, then the cordon.
    Mark,
    /// The node is draining: its pod is evicted.
    Drain,
    /// The node is drained: its reboot pod is created.
    Reboot,
    /// A Flatcar node is drained: it is granted `reboot-ok`.
    Grant,
    /// A Flatcar node is back with a new boot: the grant is withdrawn, the reboot pod deleted and
    /// the cordon given back, then the status forgets it.
    Finish,
    /// Deleted mid-reboot: the node is given back, then the finalizer goes.
    Delete,
}
use Scene::{Delete, Drain, Finish, Grant, Mark, New, Reboot, Start};

/// Each write: its name in the tables, method and path.
const WRITES: [(&str, &str, &str); 6] = [
    ("finalizer", "PATCH", "rebootpolicies/rp"),
    ("status", "PATCH", "rebootpolicies/rp/status"),
    ("node", "PATCH", "nodes/n1"),
    ("pod", "POST", "namespaces/system-upgrade/pods"),
    (
        "delete-pod",
        "DELETE",
        "namespaces/system-upgrade/pods/reboot-rp-on-n1",
    ),
    ("evict", "POST", "namespaces/apps/pods/p1/eviction"),
];

/// Node patches are told apart by their bodies.
fn name_of(sent: &Sent) -> Option<&'static str> {
    let (name, ..) = WRITES.iter().find(|(_, m, p)| sent.is(m, p))?;
    Some(if *name == "node" {
        node_patch(&sent.body)
    } else {
        name
    })
}

fn node_patch(body: &Value) -> &'static str {
    let annotations = &body["metadata"]["annotations"];
    let reboot_ok = &annotations[format!("{FLATCAR_PREFIX}{REBOOT_OK}")];
    if annotations.get(CONDITION_HANDLED).is_some() {
        "annotate"
    } else if reboot_ok == "true" {
        "grant"
    } else if reboot_ok == "false" {
        "withdraw"
    } else if body["spec"]["unschedulable"] == true {
        "cordon"
    } else {
        "uncordon"
    }
}

fn signal(scene: Scene) -> Signal {
    match scene {
        Mark => Signal::NodeCondition,
        Grant | Finish => Signal::Flatcar,
        _ => Signal::Agent,
    }
}

fn policy(scene: Scene) -> RebootPolicy {
    let signals = RebootSignals {
        flatcar: Some(true),
        node_conditions: vec!["KernelDeadlock".into()],
        ..Default::default()
    };
    let mut p = RebootPolicy::new(
        "rp",
        RebootPolicySpec {
            signals: Some(signals),
            ..Default::default()
        },
    );
    p.metadata.uid = Some("rp-uid".into());
    p.metadata.generation = Some(1);
    p.metadata.resource_version = Some("1".into());
    if scene != New {
        p.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    if scene == Delete {
        p.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    }
    let now = Timestamp::now();
    let (before, signal) = ("boot-1".to_string(), signal(scene));
    let state = match scene {
        New | Start | Mark => return p,
        Drain | Reboot | Grant => RebootState::Draining {
            signal,
            before,
            cordoned: false,
            since: now,
        },
        Finish | Delete => RebootState::Rebooting {
            signal,
            cordoned: false,
            handoff: Handoff::start(before, now),
        },
    };
    p.status = Some(RebootPolicyStatus {
        nodes: vec![state.to_status("n1", String::new())],
        ..Default::default()
    });
    p
}

/// The node, asking for a reboot by the scene's signal, or (from the drain on) cordoned by the
/// policy, or (once back) with a new boot.
fn node(scene: Scene) -> NodeInfo {
    let mut n = NodeInfo {
        name: "n1".into(),
        uid: "n1-uid".into(),
        ready: true,
        boot_id: "boot-1".into(),
        ..Default::default()
    };
    match signal(scene) {
        Signal::Agent => n
            .annotations
            .insert(REBOOT_REQUIRED_ANNOTATION.into(), "boot-1".into()),
        Signal::Flatcar => n
            .annotations
            .insert(format!("{FLATCAR_PREFIX}{REBOOT_NEEDED}"), "true".into()),
        _ => n
            .true_conditions
            .insert("KernelDeadlock".into(), "2026-01-01T00:00:00Z".into()),
    };
    if !matches!(scene, New | Start | Mark) {
        n.unschedulable = true;
        let record = cordon::record(&CordonOwner::Operation(core::holder(&policy(scene))));
        n.annotations
            .extend(record.into_iter().filter_map(|(k, v)| Some((k, v?))));
    }
    if matches!(scene, Finish | Delete) {
        n.boot_id = "boot-2".into();
    }
    n
}

fn pod() -> Value {
    let owner = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "apps", "uid": "p1-uid", "ownerReferences": [owner]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    })
}

/// An API server on which every read and write of `scene` succeeds.
fn cluster(scene: Scene) -> ApiServer {
    let api = ApiServer::new();
    let mut written = serde_json::to_value(policy(scene)).expect("encodes");
    written["metadata"]["resourceVersion"] = json!("2");
    let rp = Answer::Json(200, written);
    let node = json!({"metadata": {"name": "n1"}});
    let pods = if scene == Drain { vec![pod()] } else { vec![] };
    api.on("GET", "v1/pods", Answer::list(pods));
    api.on("GET", "namespaces/apps/pods/p1", Answer::Json(200, pod()));
    api.on("GET", "poddisruptionbudgets", Answer::list(vec![]));
    api.on("PATCH", "rebootpolicies/rp", rp.clone());
    api.on("PATCH", "rebootpolicies/rp/status", rp);
    api.on("PATCH", "nodes/n1", Answer::Json(200, node));
    api.on("POST", "pods", Answer::Echo(201));
    api.on("DELETE", "pods/*", Answer::deleted());
    api.on("POST", "pods/p1/eviction", Answer::Echo(201));
    api
}

fn operation(api: &ApiServer, scene: Scene) -> PolicyOperation {
    let shared = testing::shared(&api.client(), vec![node(scene)]);
    PolicyOperation {
        metrics: shared.metrics().families(),
        shared,
        policies: testing::listed(vec![policy(scene)]),
        default_image: "busybox".into(),
        http: None,
        checks: crate::runtime::checks::CheckReader::new(
            api.client(),
            crate::runtime::checks::CheckAccount::in_namespace(testing::NAMESPACE),
        ),
        pods: testing::listed(vec![]),
        kured: None,
        kured_unreadable: Default::default(),
        written: Default::default(),
    }
}

/// One reconcile in `scene`, `write` answered with `answer`: the result, and the writes sent.
async fn reconcile_with(
    scene: Scene,
    write: &'static str,
    answer: Answer,
) -> (Result<(), ErrorKind>, String) {
    let api = cluster(scene);
    api.on_matching(move |sent| name_of(sent) == Some(write), answer);
    let result = testing::reconcile(&operation(&api, scene), policy(scene)).await;
    assert!(api.unscripted().is_empty(), "{:?}", api.unscripted());
    (result, testing::named_writes(&api, name_of))
}

#[tokio::test]
async fn each_scene_writes_in_its_order() {
    for (scene, writes) in [
        (New, "finalizer status cordon"),
        (Start, "status cordon"),
        (Mark, "status annotate cordon"),
        (Drain, "status evict"),
        (Reboot, "status pod"),
        (Grant, "status grant"),
        (Finish, "withdraw delete-pod uncordon status"),
        (Delete, "delete-pod uncordon finalizer"),
    ] {
        let (result, sent) = reconcile_with(scene, testing::NO_WRITE, NOT_FOUND).await;
        assert_eq!((result, sent.as_str()), (Ok(()), writes), "{scene:?}");
    }
}

/// In a scene, a write answered so: the reconcile's outcome, and the writes sent, in order.
#[rustfmt::skip]
const ROWS: [Row<Scene>; 82] = [
    (New,    "finalizer",  NOT_FOUND,         Ok(()),                 "finalizer"),
    (New,    "finalizer",  CONFLICT,          Err(conflict),          "finalizer"),
    (New,    "finalizer",  GONE,              Err(gone),              "finalizer"),
    (New,    "finalizer",  TOO_MANY_REQUESTS, Err(too_many_requests), "finalizer"),
    (New,    "finalizer",  SERVER_ERROR,      Err(server),            "finalizer"),
    (New,    "finalizer",  TIMEOUT,           Err(timeout),           "finalizer"),
    // The status names the node before it is cordoned: refused, the node is not touched.
    (Start,  "status",     CONFLICT,          Err(conflict),          "status"),
    (Start,  "status",     GONE,              Err(gone),              "status"),
    (Start,  "status",     TOO_MANY_REQUESTS, Err(too_many_requests), "status"),
    (Start,  "status",     SERVER_ERROR,      Err(server),            "status"),
    (Start,  "status",     TIMEOUT,           Err(timeout),           "status"),
    (Start,  "cordon",     NOT_FOUND,         Ok(()),                 "status cordon"),
    (Start,  "cordon",     CONFLICT,          Err(conflict),          "status cordon"),
    (Start,  "cordon",     GONE,              Err(gone),              "status cordon"),
    (Start,  "cordon",     TOO_MANY_REQUESTS, Err(too_many_requests), "status cordon"),
    (Start,  "cordon",     SERVER_ERROR,      Err(server),            "status cordon"),
    (Start,  "cordon",     TIMEOUT,           Err(timeout),           "status cordon"),
    (Mark,   "annotate",   NOT_FOUND,         Ok(()),                 "status annotate cordon"),
    (Mark,   "annotate",   CONFLICT,          Err(conflict),          "status annotate"),
    (Mark,   "annotate",   GONE,              Err(gone),              "status annotate"),
    (Mark,   "annotate",   TOO_MANY_REQUESTS, Err(too_many_requests), "status annotate"),
    (Mark,   "annotate",   SERVER_ERROR,      Err(server),            "status annotate"),
    (Mark,   "annotate",   TIMEOUT,           Err(timeout),           "status annotate"),
    // An eviction's answer is the next look's business, never the reconcile's error.
    (Drain,  "evict",      NOT_FOUND,         Ok(()),                 "status evict"),
    (Drain,  "evict",      CONFLICT,          Ok(()),                 "status evict"),
    (Drain,  "evict",      GONE,              Ok(()),                 "status evict"),
    (Drain,  "evict",      TOO_MANY_REQUESTS, Ok(()),                 "status evict"),
    (Drain,  "evict",      SERVER_ERROR,      Ok(()),                 "status evict"),
    (Drain,  "evict",      TIMEOUT,           Ok(()),                 "status evict"),
    // The status says the node reboots before its reboot pod exists: refused, no pod.
    (Reboot, "status",     CONFLICT,          Err(conflict),          "status"),
    (Reboot, "status",     GONE,              Err(gone),              "status"),
    (Reboot, "status",     TOO_MANY_REQUESTS, Err(too_many_requests), "status"),
    (Reboot, "status",     SERVER_ERROR,      Err(server),            "status"),
    (Reboot, "status",     TIMEOUT,           Err(timeout),           "status"),
    (Reboot, "pod",        NOT_FOUND,         Err(not_found),         "status pod"),
    (Reboot, "pod",        CONFLICT,          Err(conflict),          "status pod"),
    (Reboot, "pod",        ALREADY_EXISTS,    Ok(()),                 "status pod"),
    (Reboot, "pod",        GONE,              Err(gone),              "status pod"),
    (Reboot, "pod",        TOO_MANY_REQUESTS, Err(too_many_requests), "status pod"),
    (Reboot, "pod",        SERVER_ERROR,      Err(server),            "status pod"),
    (Reboot, "pod",        TIMEOUT,           Err(timeout),           "status pod"),
    (Grant,  "grant",      NOT_FOUND,         Ok(()),                 "status grant"),
    (Grant,  "grant",      CONFLICT,          Err(conflict),          "status grant"),
    (Grant,  "grant",      GONE,              Err(gone),              "status grant"),
    (Grant,  "grant",      TOO_MANY_REQUESTS, Err(too_many_requests), "status grant"),
    (Grant,  "grant",      SERVER_ERROR,      Err(server),            "status grant"),
    (Grant,  "grant",      TIMEOUT,           Err(timeout),           "status grant"),
    // The node is given back before the status forgets it: a refused step stops the rest.
    (Finish, "withdraw",   NOT_FOUND,         Ok(()),                 "withdraw delete-pod uncordon status"),
    (Finish, "withdraw",   CONFLICT,          Err(conflict),          "withdraw"),
    (Finish, "withdraw",   GONE,              Err(gone),              "withdraw"),
    (Finish, "withdraw",   TOO_MANY_REQUESTS, Err(too_many_requests), "withdraw"),
    (Finish, "withdraw",   SERVER_ERROR,      Err(server),            "withdraw"),
    (Finish, "withdraw",   TIMEOUT,           Err(timeout),           "withdraw"),
    (Finish, "delete-pod", NOT_FOUND,         Ok(()),                 "withdraw delete-pod uncordon status"),
    (Finish, "delete-pod", CONFLICT,          Err(conflict),          "withdraw delete-pod"),
    (Finish, "delete-pod", GONE,              Err(gone),              "withdraw delete-pod"),
    (Finish, "delete-pod", TOO_MANY_REQUESTS, Err(too_many_requests), "withdraw delete-pod"),
    (Finish, "delete-pod", SERVER_ERROR,      Err(server),            "withdraw delete-pod"),
    (Finish, "delete-pod", TIMEOUT,           Err(timeout),           "withdraw delete-pod"),
    (Finish, "uncordon",   NOT_FOUND,         Ok(()),                 "withdraw delete-pod uncordon status"),
    (Finish, "uncordon",   CONFLICT,          Err(conflict),          "withdraw delete-pod uncordon"),
    (Finish, "uncordon",   GONE,              Err(gone),              "withdraw delete-pod uncordon"),
    (Finish, "uncordon",   TOO_MANY_REQUESTS, Err(too_many_requests), "withdraw delete-pod uncordon"),
    (Finish, "uncordon",   SERVER_ERROR,      Err(server),            "withdraw delete-pod uncordon"),
    (Finish, "uncordon",   TIMEOUT,           Err(timeout),           "withdraw delete-pod uncordon"),
    (Finish, "status",     NOT_FOUND,         Ok(()),                 "withdraw delete-pod uncordon status"),
    (Finish, "status",     CONFLICT,          Err(conflict),          "withdraw delete-pod uncordon status"),
    (Finish, "status",     GONE,              Err(gone),              "withdraw delete-pod uncordon status"),
    (Finish, "status",     TOO_MANY_REQUESTS, Err(too_many_requests), "withdraw delete-pod uncordon status"),
    (Finish, "status",     SERVER_ERROR,      Err(server),            "withdraw delete-pod uncordon status"),
    (Finish, "status",     TIMEOUT,           Err(timeout),           "withdraw delete-pod uncordon status"),
    // Deleted: the finalizer stays until the node is given back.
    (Delete, "delete-pod", NOT_FOUND,         Ok(()),                 "delete-pod uncordon finalizer"),
    (Delete, "delete-pod", SERVER_ERROR,      Err(server),            "delete-pod"),
    (Delete, "uncordon",   NOT_FOUND,         Ok(()),                 "delete-pod uncordon finalizer"),
    (Delete, "uncordon",   SERVER_ERROR,      Err(server),            "delete-pod uncordon"),
    (Delete, "uncordon",   TIMEOUT,           Err(timeout),           "delete-pod uncordon"),
    (Delete, "finalizer",  NOT_FOUND,         Ok(()),                 "delete-pod uncordon finalizer"),
    (Delete, "finalizer",  CONFLICT,          Err(conflict),          "delete-pod uncordon finalizer"),
    (Delete, "finalizer",  GONE,              Err(gone),              "delete-pod uncordon finalizer"),
    (Delete, "finalizer",  TOO_MANY_REQUESTS, Err(too_many_requests), "delete-pod uncordon finalizer"),
    (Delete, "finalizer",  SERVER_ERROR,      Err(server),            "delete-pod uncordon finalizer"),
    (Delete, "finalizer",  TIMEOUT,           Err(timeout),           "delete-pod uncordon finalizer"),
];

#[tokio::test]
async fn every_write_under_every_failure() {
    testing::check_rows(&ROWS, reconcile_with).await;
}

/// In a scene, a write answered so: the reconcile's outcome, and the writes it must not send.
#[rustfmt::skip]
const BUGS: [Row<Scene>; 3] = [
    // The status write says the policy is gone: nothing may take or reboot the node for it.
    (Start,  "status", NOT_FOUND, Ok(()), "cordon"),
    (Reboot, "status", NOT_FOUND, Ok(()), "pod"),
    (Grant,  "status", NOT_FOUND, Ok(()), "grant"),
];

#[tokio::test]
async fn nothing_takes_the_node_for_a_policy_that_is_gone() {
    testing::check_not_sent(&BUGS, reconcile_with).await;
}

/// Reconciles `scene` with `write` failing, then again from the status the first reconcile wrote
/// (the node as it was: the write failed): the second reconcile's writes.
async fn after_a_failed(scene: Scene, write: &'static str) -> String {
    let api = cluster(scene);
    api.on_matching(move |sent| name_of(sent) == Some(write), SERVER_ERROR);
    let first = testing::reconcile(&operation(&api, scene), policy(scene)).await;
    assert_eq!(first, Err(server), "{scene:?}: {write} refused");
    let mut p = policy(scene);
    let written = testing::status_sent(&api).expect("a status write");
    p.status = Some(serde_json::from_value(written).expect("a status"));
    let api = cluster(scene);
    let second = testing::reconcile(&operation(&api, scene), p).await;
    assert_eq!(second, Ok(()));
    testing::named_writes(&api, name_of)
}

#[tokio::test]
async fn a_failed_cordon_or_record_is_asked_again_before_the_node_goes_on() {
    for (scene, write) in [(Start, "cordon"), (Mark, "cordon"), (Mark, "annotate")] {
        let writes = after_a_failed(scene, write).await;
        let again: Vec<&str> = writes.split(' ').collect();
        assert!(
            again.contains(&write),
            "{scene:?}: {write} failed; the next look sent {writes}"
        );
    }
}

/// A node that has not rebooted yet gets its reboot pod again only when the pod is not there:
/// the controller does not ask a node going down again and again.
#[tokio::test]
async fn a_reboot_already_asked_for_is_not_asked_again() {
    let mut p = policy(Start);
    p.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let state = RebootState::Rebooting {
        signal: Signal::Agent,
        cordoned: false,
        handoff: Handoff::start("boot-1".to_string(), Timestamp::now()),
    };
    p.status = Some(RebootPolicyStatus {
        nodes: vec![state.to_status("n1", String::new())],
        ..Default::default()
    });
    let mut n = node(Start);
    n.ready = false;
    let reboot_pod = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(json!({
        "metadata": {"name": policy_reboot_pod_name("rp", "n1"), "namespace": testing::NAMESPACE}
    }))
    .expect("a pod");
    for (cached, writes) in [(vec![], "status pod"), (vec![reboot_pod], "status")] {
        let api = cluster(Start);
        let shared = testing::shared(&api.client(), vec![n.clone()]);
        let op = PolicyOperation {
            metrics: shared.metrics().families(),
            shared,
            policies: testing::listed(vec![p.clone()]),
            pods: testing::listed(cached),
            ..operation(&api, Start)
        };
        let result = testing::reconcile(&op, p.clone()).await;
        let sent = testing::named_writes(&api, name_of);
        assert_eq!((result, sent.as_str()), (Ok(()), writes));
    }
}

/// A reconcile that runs before the watch shows the previous one's writes (a node event came
/// first) decides on the policy as it was written: no second finalizer, and its status write
/// names the written resourceVersion instead of being refused as a conflict.
#[tokio::test]
async fn a_stale_copy_is_decided_on_as_this_process_wrote_it() {
    let api = cluster(New);
    let mut finalized = serde_json::to_value(policy(New)).expect("encodes");
    finalized["metadata"]["finalizers"] = json!([FINALIZER]);
    finalized["metadata"]["resourceVersion"] = json!("2");
    let mut with_status = finalized.clone();
    with_status["metadata"]["resourceVersion"] = json!("3");
    api.on("PATCH", "rebootpolicies/rp", Answer::Json(200, finalized));
    api.on(
        "PATCH",
        "rebootpolicies/rp/status",
        Answer::Json(200, with_status),
    );
    let op = operation(&api, New);
    for _ in 0..2 {
        assert_eq!(testing::reconcile(&op, policy(New)).await, Ok(()));
    }
    let policy_writes: Vec<(String, Value)> = api
        .writes()
        .into_iter()
        .filter_map(|s| {
            let name = name_of(&s)?;
            (name == "finalizer" || name == "status").then(|| (name.to_string(), s.body))
        })
        .collect();
    let names: Vec<&str> = policy_writes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["finalizer", "status", "status"]);
    assert_eq!(policy_writes[2].1["metadata"]["resourceVersion"], "3");
}

/// What a decision reads of a policy triggers its reconcile: a reset of its failures is acted on
/// at once (a drain that timed out starts again), not at the policy's next recheck; its own
/// status write triggers nothing.
#[tokio::test]
async fn a_reset_of_the_failures_triggers_the_policy_and_its_status_does_not() {
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    let before = policy(Drain);
    let mut reset = before.clone();
    reset
        .annotations_mut()
        .insert(crate::common::labels::RESET_FAILURES.into(), "1".into());
    let mut written = reset.clone();
    if let Some(status) = written.status.as_mut() {
        status.failures_reset = Some("1".into());
    }
    let mut again = written.clone();
    again
        .annotations_mut()
        .insert(crate::common::labels::RESET_FAILURES.into(), "2".into());
    let events = [&before, &reset, &written, &again].map(|p| Ok(Event::Apply(p.clone())));
    let triggered: Vec<RebootPolicy> = changes(futures::stream::iter(events), policy_view)
        .collect()
        .await;
    let resets: Vec<Option<&String>> = (triggered.iter())
        .map(|p| p.annotations().get(crate::common::labels::RESET_FAILURES))
        .collect();
    assert_eq!(resets, [None, Some(&"1".into()), Some(&"2".into())]);
}

#[tokio::test]
async fn deleted_policies_leave_nothing_behind() {
    // Deleted before their finalizer was added.
    let named = |i: usize| {
        let mut p = policy(New);
        p.metadata.name = Some(format!("rp-{i}"));
        p.metadata.uid = Some(format!("uid-{i}"));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        p
    };
    let policies: Vec<RebootPolicy> = (0..100).map(named).collect();
    let api = cluster(New);
    let store = testing::listed(policies.clone());
    let holds = vec![hold_source(store.clone())];
    let shared = testing::shared_with(&api.client(), vec![node(New)], holds);
    let op = PolicyOperation {
        metrics: shared.metrics().families(),
        shared,
        policies: store,
        ..operation(&api, New)
    };
    let interest = || crate::node::index::Interest {
        selector: crate::common::selector::Selector::everything(),
        label: None,
        conditions: true,
    };
    for p in &policies {
        (op.shared.nodes_mut()).candidates(&core::holder(p), "uid", Some(1), interest);
        let report = core::PolicyReport {
            wanting: 1,
            rebooting: 1,
        };
        op.applied(p, &report);
    }
    let kept = |op: &PolicyOperation| {
        let series = (op.shared.metrics().render().lines())
            .filter(|l| l.contains("policy=\"rp-"))
            .count();
        (op.shared.nodes().readers().count(), series > 0)
    };
    assert_eq!(kept(&op), (100, true));
    for p in &policies {
        assert_eq!(testing::reconcile(&op, p.clone()).await, Ok(()));
    }
    assert_eq!(kept(&op), (0, false));
}

/// kured's lock is read from its DaemonSet on every look: the nodes it names, `Gone` once the
/// DaemonSet is, and a refusal said as what it is (never read as "kured holds nothing").
#[tokio::test]
async fn kureds_lock_is_read_from_its_daemonset_and_a_refusal_is_not_an_empty_lock() {
    let lock = r#"{"nodeID":"n1","metadata":{"unschedulable":false},"created":"2026-01-01T00:00:00Z","TTL":0}"#;
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kured", "namespace": "kube-system",
            "annotations": {"weave.works/kured-node-lock": lock}},
    });
    let holds = KuredView::Holds([("n1".to_string(), false)].into());
    for (answer, want) in [
        (Answer::Json(200, ds), Some(holds)),
        (NOT_FOUND, Some(KuredView::Gone)),
        (Answer::Fail(403, "Forbidden"), None),
    ] {
        let api = cluster(Start);
        api.on(
            "GET",
            "namespaces/kube-system/daemonsets/kured",
            answer.clone(),
        );
        let mut op = operation(&api, Start);
        op.kured = Some(KuredLock::default());
        let seen = op
            .observe(&policy(Start), Timestamp::now())
            .await
            .expect("observed");
        match want {
            Some(view) => assert_eq!(seen.kured, view, "{answer:?}"),
            None => assert!(
                matches!(&seen.kured, KuredView::Unreadable(why) if why.contains("kube-system/kured")),
                "{:?}",
                seen.kured
            ),
        }
        assert!(api.unscripted().is_empty(), "{:?}", api.unscripted());
    }
}
