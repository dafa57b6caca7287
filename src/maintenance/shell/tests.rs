//! What a NodeMaintenance's reconcile does when the API server fails one of its writes: the
//! reconcile's result, and which writes were sent (in order) before and after the failure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use serde_json::Value;

use super::*;
use crate::maintenance::api::{MaintenancePhase, NodeMaintenanceSpec};
use crate::runtime::ErrorKind::{
    self, conflict, gone, not_found, server, timeout, too_many_requests,
};
use crate::runtime::operation::{Driver, backoff, error_policy, reconcile};
use crate::runtime::testing::{
    self, ALREADY_EXISTS, Answer, ApiServer, CONFLICT, GONE, NOT_FOUND, Row, SERVER_ERROR, Sent,
    TIMEOUT, TOO_MANY_REQUESTS,
};

/// Where the maintenance stands when it is reconciled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scene {
    /// Just created: no finalizer yet.
    New,
    /// Has its finalizer: takes the node (cordon, owner reference, Lease, evictions).
    Start,
    /// Under way: the node is taken, its Lease is ours but stale.
    Renew,
    /// Under way, and another operator holds the Lease once too often: the node is given back.
    LeaseLost,
    /// Deleted: the node and the Lease are given back, then the finalizer goes.
    Delete,
}
use Scene::{Delete, LeaseLost, New, Renew, Start};

/// Each write: its name in the tables, method and path.
const WRITES: [(&str, &str, &str); 7] = [
    ("finalizer", "PATCH", "nodemaintenances/nm"),
    ("status", "PATCH", "nodemaintenances/nm/status"),
    ("node", "PATCH", "nodes/n1"),
    ("lease", "POST", "namespaces/medik8s-leases/leases"),
    ("renew", "PUT", "leases/node-n1"),
    ("release", "DELETE", "leases/node-n1"),
    ("evict", "POST", "namespaces/apps/pods/p1/eviction"),
];

/// The same PATCH adds the finalizer and the owner reference: told apart by their bodies.
fn name_of(sent: &Sent) -> Option<&'static str> {
    let (name, ..) = WRITES.iter().find(|(_, m, p)| sent.is(m, p))?;
    let owner = sent.body["metadata"].get("ownerReferences").is_some();
    Some(if *name == "finalizer" && owner {
        "owner"
    } else {
        name
    })
}

const ME: &str = "nodemaintenance/nm";

fn maintenance(scene: Scene) -> NodeMaintenance {
    let mut nm = NodeMaintenance::new(
        "nm",
        NodeMaintenanceSpec {
            node_name: "n1".into(),
            ..Default::default()
        },
    );
    nm.metadata.uid = Some("nm-uid".into());
    nm.metadata.resource_version = Some("1".into());
    if scene != New {
        nm.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    if !matches!(scene, New | Start) {
        nm.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "n1".into(),
            uid: "n1-uid".into(),
            ..Default::default()
        }]);
        nm.status = Some(NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Running),
            error_on_lease_count: Some(if scene == LeaseLost { 3 } else { 0 }),
            ..Default::default()
        });
    }
    if scene == Delete {
        nm.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    }
    nm
}

/// The node: taken by the maintenance unless it is just starting.
fn node(scene: Scene) -> Value {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "n1-uid", "resourceVersion": "7"},
        "spec": {},
    });
    if !matches!(scene, New | Start) {
        node["metadata"]["annotations"] = json!({CORDONED_BY: ME, EXCLUDED_BY: ME});
        node["metadata"]["labels"] = json!({EXCLUDE_LABEL: "true"});
        node["spec"] = json!({
            "unschedulable": true,
            "taints": [{"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"}],
        });
    }
    node
}

/// The node's Lease: none yet, ours (renewed long ago), or another operator's (renewed now).
fn lease(scene: Scene) -> Answer {
    let (holder, renewed) = match scene {
        New | Start => return NOT_FOUND,
        LeaseLost => ("other-operator", Timestamp::now().to_string()),
        Renew | Delete => ("node-maintenance", "2020-01-01T00:00:00Z".to_string()),
    };
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "node-n1", "namespace": "medik8s-leases", "uid": "l-uid", "resourceVersion": "9"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, "renewTime": renewed},
    });
    Answer::Json(200, lease)
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
    let mut nm = serde_json::to_value(maintenance(scene)).expect("encodes");
    nm["metadata"]["resourceVersion"] = json!("2");
    let nm = Answer::Json(200, nm);
    api.on("GET", "nodes/n1", Answer::Json(200, node(scene)));
    api.on("GET", "leases/node-n1", lease(scene));
    api.on("GET", "v1/pods", Answer::list(vec![pod()]));
    api.on("GET", "namespaces/apps/pods/p1", Answer::Json(200, pod()));
    api.on("GET", "poddisruptionbudgets", Answer::list(vec![]));
    api.on("PATCH", "nodemaintenances/nm", nm.clone());
    api.on("PATCH", "nodemaintenances/nm/status", nm);
    api.on("PATCH", "nodes/n1", Answer::Json(200, node(scene)));
    api.on("POST", "leases", Answer::Echo(201));
    api.on("PUT", "leases/node-n1", Answer::Echo(200));
    api.on("DELETE", "leases/node-n1", Answer::deleted());
    api.on("POST", "pods/p1/eviction", Answer::Echo(201));
    api
}

fn operation(api: &ApiServer) -> MaintenanceOperation {
    let shared = testing::shared(&api.client(), vec![]);
    MaintenanceOperation {
        metrics: shared.metrics().families(),
        shared,
        lease: LeaseSettings::default(),
        evictions: Mutex::default(),
        asking: Mutex::default(),
        failures: Mutex::default(),
        maintenances: kube::runtime::reflector::store().0,
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
    let result = testing::reconcile(&operation(&api), maintenance(scene)).await;
    assert!(api.unscripted().is_empty(), "{:?}", api.unscripted());
    (result, testing::named_writes(&api, name_of))
}

#[tokio::test]
async fn each_scene_writes_in_its_order() {
    for (scene, writes) in [
        (New, "finalizer status owner lease node evict"),
        (Start, "status owner lease node evict"),
        (Renew, "status renew evict"),
        (LeaseLost, "node status"),
        (Delete, "node release finalizer"),
    ] {
        let (result, sent) = reconcile_with(scene, testing::NO_WRITE, NOT_FOUND).await;
        assert_eq!((result, sent.as_str()), (Ok(()), writes), "{scene:?}");
    }
}

/// In a scene, a write answered so: the reconcile's outcome, and the writes sent, in order.
#[rustfmt::skip]
const ROWS: [Row<Scene>; 54] = [
    (New,       "finalizer", NOT_FOUND,         Ok(()),                 "finalizer"),
    (New,       "finalizer", CONFLICT,          Err(conflict),          "finalizer"),
    (New,       "finalizer", GONE,              Err(gone),              "finalizer"),
    (New,       "finalizer", TOO_MANY_REQUESTS, Err(too_many_requests), "finalizer"),
    (New,       "finalizer", SERVER_ERROR,      Err(server),            "finalizer"),
    (New,       "finalizer", TIMEOUT,           Err(timeout),           "finalizer"),
    // The status names the node before anything takes it; a refused status takes nothing.
    (Start,     "status",    CONFLICT,          Err(conflict),          "status"),
    (Start,     "status",    GONE,              Err(gone),              "status"),
    (Start,     "status",    TOO_MANY_REQUESTS, Err(too_many_requests), "status"),
    (Start,     "status",    SERVER_ERROR,      Err(server),            "status"),
    (Start,     "status",    TIMEOUT,           Err(timeout),           "status"),
    (Start,     "node",      NOT_FOUND,         Ok(()),                 "status owner lease node evict"),
    (Start,     "owner",     NOT_FOUND,         Ok(()),                 "status owner lease node evict"),
    (Start,     "owner",     CONFLICT,          Err(conflict),          "status owner"),
    (Start,     "owner",     GONE,              Err(gone),              "status owner"),
    (Start,     "owner",     TOO_MANY_REQUESTS, Err(too_many_requests), "status owner"),
    (Start,     "owner",     SERVER_ERROR,      Err(server),            "status owner"),
    (Start,     "owner",     TIMEOUT,           Err(timeout),           "status owner"),
    // An eviction's answer is the next decision's input, never the reconcile's error.
    (Start,     "evict",     NOT_FOUND,         Ok(()),                 "status owner lease node evict"),
    (Start,     "evict",     CONFLICT,          Ok(()),                 "status owner lease node evict"),
    (Start,     "evict",     GONE,              Ok(()),                 "status owner lease node evict"),
    (Start,     "evict",     TOO_MANY_REQUESTS, Ok(()),                 "status owner lease node evict"),
    (Start,     "evict",     SERVER_ERROR,      Ok(()),                 "status owner lease node evict"),
    (Start,     "evict",     TIMEOUT,           Ok(()),                 "status owner lease node evict"),
    // A Lease still ours that could not be renewed: the drain waits for the next reconcile.
    (Renew,     "renew",     NOT_FOUND,         Err(not_found),         "status renew"),
    (Renew,     "renew",     CONFLICT,          Err(conflict),          "status renew"),
    (Renew,     "renew",     GONE,              Err(gone),              "status renew"),
    (Renew,     "renew",     TOO_MANY_REQUESTS, Err(too_many_requests), "status renew"),
    (Renew,     "renew",     SERVER_ERROR,      Err(server),            "status renew"),
    (Renew,     "renew",     TIMEOUT,           Err(timeout),           "status renew"),
    // The node is given back before the status forgets it: a refused give-back writes no status.
    (LeaseLost, "node",      NOT_FOUND,         Ok(()),                 "node status"),
    (LeaseLost, "node",      CONFLICT,          Err(conflict),          "node"),
    (LeaseLost, "node",      GONE,              Err(gone),              "node"),
    (LeaseLost, "node",      TOO_MANY_REQUESTS, Err(too_many_requests), "node"),
    (LeaseLost, "node",      SERVER_ERROR,      Err(server),            "node"),
    (LeaseLost, "node",      TIMEOUT,           Err(timeout),           "node"),
    (LeaseLost, "status",    NOT_FOUND,         Ok(()),                 "node status"),
    (LeaseLost, "status",    CONFLICT,          Err(conflict),          "node status"),
    (LeaseLost, "status",    SERVER_ERROR,      Err(server),            "node status"),
    (LeaseLost, "status",    TIMEOUT,           Err(timeout),           "node status"),
    // Deleted: the finalizer stays until the node and the Lease are given back.
    (Delete,    "node",      NOT_FOUND,         Ok(()),                 "node release finalizer"),
    (Delete,    "node",      CONFLICT,          Err(conflict),          "node"),
    (Delete,    "node",      SERVER_ERROR,      Err(server),            "node"),
    (Delete,    "node",      TIMEOUT,           Err(timeout),           "node"),
    (Delete,    "release",   NOT_FOUND,         Ok(()),                 "node release finalizer"),
    (Delete,    "release",   CONFLICT,          Err(conflict),          "node release"),
    (Delete,    "release",   GONE,              Err(gone),              "node release"),
    (Delete,    "release",   TOO_MANY_REQUESTS, Err(too_many_requests), "node release"),
    (Delete,    "release",   SERVER_ERROR,      Err(server),            "node release"),
    (Delete,    "release",   TIMEOUT,           Err(timeout),           "node release"),
    (Delete,    "finalizer", NOT_FOUND,         Ok(()),                 "node release finalizer"),
    (Delete,    "finalizer", CONFLICT,          Err(conflict),          "node release finalizer"),
    (Delete,    "finalizer", SERVER_ERROR,      Err(server),            "node release finalizer"),
    (Delete,    "finalizer", TIMEOUT,           Err(timeout),           "node release finalizer"),
];

#[tokio::test]
async fn every_write_under_every_failure() {
    testing::check_rows(&ROWS, reconcile_with).await;
}

/// In a scene, a write answered so: the reconcile's outcome, and the writes it must not send.
#[rustfmt::skip]
const BUGS: [Row<Scene>; 13] = [
    // The status write says the maintenance is gone: nothing may take the node for it.
    (Start, "status", NOT_FOUND,         Ok(()),                 "node owner lease evict"),
    // No drain of a node that could not be cordoned...
    (Start, "node",   CONFLICT,          Err(conflict),          "evict"),
    (Start, "node",   GONE,              Err(gone),              "evict"),
    (Start, "node",   TOO_MANY_REQUESTS, Err(too_many_requests), "evict"),
    (Start, "node",   SERVER_ERROR,      Err(server),            "evict"),
    (Start, "node",   TIMEOUT,           Err(timeout),           "evict"),
    // ... nor of one whose Lease was not taken (an existing Lease is another holder's).
    (Start, "lease",  NOT_FOUND,         Err(not_found),         "evict"),
    (Start, "lease",  CONFLICT,          Err(conflict),          "evict"),
    (Start, "lease",  ALREADY_EXISTS,    Err(conflict),          "evict"),
    (Start, "lease",  GONE,              Err(gone),              "evict"),
    (Start, "lease",  TOO_MANY_REQUESTS, Err(too_many_requests), "evict"),
    (Start, "lease",  SERVER_ERROR,      Err(server),            "evict"),
    (Start, "lease",  TIMEOUT,           Err(timeout),           "evict"),
];

#[tokio::test]
async fn nothing_takes_the_node_after_a_write_that_failed() {
    testing::check_not_sent(&BUGS, reconcile_with).await;
}

#[tokio::test]
async fn the_status_write_names_the_version_the_finalizer_patch_returned() {
    for (scene, version) in [(New, "2"), (Start, "1")] {
        let api = cluster(scene);
        testing::reconcile(&operation(&api), maintenance(scene))
            .await
            .expect("reconciled");
        let status = (api.writes().into_iter())
            .find(|s| name_of(s) == Some("status"))
            .expect("a status write");
        assert_eq!(
            status.body["metadata"]["resourceVersion"], version,
            "{scene:?}"
        );
    }
}

/// The ReconcileError events posted. The error policy posts apart, so this waits until
/// `expected` are there (and a little longer when none is expected, for one that is late).
async fn reconcile_errors(api: &ApiServer, expected: usize) -> Vec<Value> {
    let errors = || -> Vec<Value> {
        (api.events().into_iter())
            .filter(|e| e.body["reason"] == "ReconcileError")
            .map(|e| e.body)
            .collect()
    };
    for _ in 0..100 {
        let posted = errors().len();
        if posted > expected || (expected > 0 && posted == expected) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    errors()
}

/// Reconciles `nm` as the controller does, and its error policy after a failure: how long it waits.
async fn look(
    driver: &Arc<Driver<MaintenanceOperation>>,
    nm: &Arc<NodeMaintenance>,
) -> Option<Action> {
    let error = reconcile(nm.clone(), driver.clone()).await.err()?;
    Some(error_policy(nm.clone(), &error, driver.clone()))
}

fn after(kind: ErrorKind, failures: u32) -> Option<Action> {
    Some(Action::requeue(backoff(kind, failures)))
}

#[tokio::test]
async fn a_failure_that_persists_reaches_the_maintenance_as_a_warning() {
    // The Lease namespace does not exist: every Lease create is answered 404.
    let api = cluster(Start);
    api.on("POST", "leases", NOT_FOUND);
    let driver = Arc::new(Driver::new(Arc::new(operation(&api))));
    let nm = Arc::new(maintenance(Start));
    assert_eq!(look(&driver, &nm).await, after(not_found, 1));
    assert_eq!(look(&driver, &nm).await, after(not_found, 2));
    assert!(
        reconcile_errors(&api, 0).await.is_empty(),
        "not after two failures"
    );
    assert_eq!(look(&driver, &nm).await, after(not_found, 3));
    let events = reconcile_errors(&api, 1).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "Warning");
    let note = events[0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("NotFound"), "names the error: {note}");
    assert_eq!(events[0]["regarding"]["name"], "nm");
}

#[tokio::test]
async fn a_success_in_between_starts_the_count_again() {
    let api = cluster(Start);
    api.on("POST", "leases", NOT_FOUND);
    let driver = Arc::new(Driver::new(Arc::new(operation(&api))));
    let nm = Arc::new(maintenance(Start));
    assert_eq!(look(&driver, &nm).await, after(not_found, 1));
    assert_eq!(look(&driver, &nm).await, after(not_found, 2));
    api.on("POST", "leases", Answer::Echo(201));
    assert_eq!(look(&driver, &nm).await, None, "succeeded");
    api.on("POST", "leases", NOT_FOUND);
    assert_eq!(look(&driver, &nm).await, after(not_found, 1));
    assert!(
        reconcile_errors(&api, 0).await.is_empty(),
        "one failure in a row"
    );
}

/// A reconcile that decided over `nodes` nodes and `wrote` or not.
fn decided(nodes: usize, wrote: bool) -> crate::runtime::operation::Pace {
    crate::runtime::operation::Pace {
        nodes: Some(nodes),
        wrote,
    }
}

#[tokio::test(start_paused = true)]
async fn the_interval_after_a_decision_grows_with_the_nodes_it_reads() {
    use crate::runtime::operation::interval_for;
    use std::time::Duration;
    let api = cluster(Start);
    let driver = Driver::new(Arc::new(operation(&api)));
    let nm = maintenance(Start);
    let read = |nodes| decided(nodes, false);
    assert_eq!(driver.too_soon(&nm), None);
    // One node: a second, as before any decision.
    driver.paced(&nm, read(1));
    tokio::time::advance(Duration::from_millis(600)).await;
    assert_eq!(driver.too_soon(&nm), Some(Duration::from_millis(400)));
    tokio::time::advance(Duration::from_millis(400)).await;
    assert_eq!(driver.too_soon(&nm), None, "the second is over");
    // A thousand nodes: two seconds; never more than five.
    driver.paced(&nm, read(1_000));
    tokio::time::advance(Duration::from_millis(1500)).await;
    assert_eq!(driver.too_soon(&nm), Some(Duration::from_millis(500)));
    for wrote in [false, true] {
        assert_eq!(interval_for(1_000, wrote), Duration::from_secs(2));
        assert_eq!(interval_for(2_000, wrote), Duration::from_secs(4));
        assert_eq!(interval_for(3_000, wrote), Duration::from_secs(5));
        assert_eq!(interval_for(100_000, wrote), Duration::from_secs(5));
    }
    assert_eq!(interval_for(0, false), Duration::from_secs(1));
    assert_eq!(interval_for(0, true), Duration::from_millis(100));
    assert_eq!(interval_for(250, false), Duration::from_secs(1));
    assert_eq!(interval_for(250, true), Duration::from_millis(500));
    assert_eq!(interval_for(500, true), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn after_a_reconcile_that_wrote_the_next_one_may_come_sooner_than_a_second() {
    use std::time::Duration;
    let api = cluster(Start);
    let driver = Driver::new(Arc::new(operation(&api)));
    let nm = maintenance(Start);
    assert_eq!(driver.too_soon(&nm), None);
    // It cordoned its node: the watch showing the cordon is looked at 0.1 s after the start.
    driver.paced(&nm, decided(1, true));
    tokio::time::advance(Duration::from_millis(40)).await;
    assert_eq!(driver.too_soon(&nm), Some(Duration::from_millis(60)));
    tokio::time::advance(Duration::from_millis(60)).await;
    assert_eq!(driver.too_soon(&nm), None, "0.1 s is over");
    // That one wrote nothing (its node is still draining): a second before the next.
    driver.paced(&nm, decided(1, false));
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(driver.too_soon(&nm), Some(Duration::from_millis(900)));
}

#[tokio::test(start_paused = true)]
async fn a_trigger_sooner_than_a_second_after_the_last_reconcile_waits_for_the_second_to_end() {
    let api = cluster(Start);
    let driver = Driver::new(Arc::new(operation(&api)));
    let nm = maintenance(Start);
    let mut other = maintenance(Start);
    other.metadata.name = Some("other".into());
    assert_eq!(driver.too_soon(&nm), None, "the first reconcile runs");
    tokio::time::advance(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        driver.too_soon(&nm),
        Some(std::time::Duration::from_millis(700))
    );
    assert_eq!(
        driver.too_soon(&other),
        None,
        "another object is not held back"
    );
    tokio::time::advance(std::time::Duration::from_millis(700)).await;
    assert_eq!(driver.too_soon(&nm), None, "the interval is over");
    assert!(driver.too_soon(&nm).is_some(), "and a new one starts");
}

/// A Plan of namespace `ns` whose status says it is applying `n1` (by hostname).
fn applying_plan() -> crate::plan::api::Plan {
    let mut plan = crate::plan::api::Plan::new("p", Default::default());
    plan.metadata.namespace = Some("ns".into());
    plan.status = Some(crate::plan::api::PlanStatus {
        applying: vec!["n1".into()],
        ..Default::default()
    });
    plan
}

fn n1() -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        uid: "n1-uid".into(),
        labels: [(crate::common::labels::HOSTNAME.to_string(), "n1".into())].into(),
        ready: true,
        ..Default::default()
    }
}

/// Right after a restart the process's claims are empty: a Plan's hold on a node is only its
/// record, named by hostname and found through the node index. While the node index or the
/// Plans are still being listed, a maintenance would find the node free and take it; it decides
/// only once both have listed, and then waits for the Plan.
#[tokio::test(start_paused = true)]
async fn a_maintenance_decides_only_once_the_nodes_and_the_plans_are_listed() {
    use kube::runtime::watcher::Event;
    for loading in ["nodes", "plans"] {
        let api = cluster(Start);
        let (plans, mut plan_writer) = kube::runtime::reflector::store();
        let shared = Arc::new(Shared::new(
            testing::chores(&api.client()),
            testing::CONTROLLER.into(),
            testing::NAMESPACE.into(),
            Arc::default(),
            vec![crate::plan::shell::hold_source(plans)],
            Arc::default(),
            None,
        ));
        let list_nodes = || *shared.nodes_mut() = testing::node_index(vec![n1()]);
        let mut list_plans = || {
            plan_writer.apply_watcher_event(&Event::Init);
            plan_writer.apply_watcher_event(&Event::InitApply(applying_plan()));
            plan_writer.apply_watcher_event(&Event::InitDone);
        };
        match loading {
            "nodes" => list_plans(),
            _ => list_nodes(),
        }
        let op = MaintenanceOperation {
            shared: shared.clone(),
            ..operation(&api)
        };
        let listed = async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            let sent = testing::named_writes(&api, name_of);
            assert_eq!(sent, "", "{loading} still listed: nothing is written");
            match loading {
                "nodes" => list_nodes(),
                _ => list_plans(),
            }
        };
        let (result, ()) = tokio::join!(testing::reconcile(&op, maintenance(Start)), listed);
        assert_eq!(result, Ok(()), "{loading}");
        let sent = testing::named_writes(&api, name_of);
        assert_eq!(
            sent, "status owner",
            "{loading}: waits for the Plan, takes nothing"
        );
        let status = (api.writes().into_iter())
            .find(|s| name_of(s) == Some("status"))
            .map(|s| s.body.to_string())
            .unwrap_or_default();
        assert!(status.contains("plan ns/p"), "{loading}: {status}");
    }
}

/// A maintenance that waits for its node starts as soon as the holder lets go of it, not at its
/// next recheck: it reads its node in the index, and hears what concerns it there.
#[tokio::test(start_paused = true)]
async fn a_waiting_maintenance_is_woken_when_its_nodes_holder_lets_go() {
    use futures::StreamExt;
    let api = cluster(Start);
    let triggers = Arc::new(NodeTriggers::default());
    let mut triggered = triggers.concerned(|h| matches!(h, Holder::Maintenance { .. }));
    let shared = Arc::new(Shared::new(
        testing::chores(&api.client()),
        testing::CONTROLLER.into(),
        testing::NAMESPACE.into(),
        Arc::new(std::sync::RwLock::new(testing::node_index(vec![n1()]))),
        // The Plan exists (its claim is not forgotten); its record holds nothing.
        vec![crate::plan::shell::hold_source(testing::listed(vec![
            crate::plan::api::Plan {
                status: None,
                ..applying_plan()
            },
        ]))],
        triggers,
        None,
    ));
    let plan = Holder::Plan {
        namespace: "ns".into(),
        name: "p".into(),
    };
    let n1 = BTreeSet::from(["n1".to_string()]);
    let claimed = shared.decide_and_claim(&plan, false, |_| n1.clone(), |n| n);
    assert!(claimed.is_ok(), "the Plan holds n1");
    let op = MaintenanceOperation {
        shared: shared.clone(),
        ..operation(&api)
    };
    assert_eq!(testing::reconcile(&op, maintenance(Start)).await, Ok(()));
    let sent = testing::named_writes(&api, name_of);
    assert_eq!(sent, "status owner", "waits for the Plan");
    shared.release(&plan);
    shared.wake_readers(&plan, &n1);
    let heard = tokio::time::timeout(std::time::Duration::from_secs(5), triggered.next()).await;
    let woken_ref = heard.ok().flatten().and_then(woken);
    assert_eq!(woken_ref, Some(ObjectRef::new("nm")));
}

#[tokio::test]
async fn a_deleted_maintenance_leaves_nothing_in_the_loop() {
    let api = cluster(Delete);
    api.on("DELETE", "leases/node-n1", SERVER_ERROR);
    let op = Arc::new(operation(&api));
    let shared = op.shared.clone();
    let driver = Arc::new(Driver::new(op));
    let nm = Arc::new(maintenance(Delete));
    assert_eq!(driver.too_soon(&nm), None);
    assert_eq!(look(&driver, &nm).await, after(server, 1));
    assert_eq!(driver.tracked(), (1, 1), "a failure and a start");
    let gauge = |map: &str| {
        let line = format!("slipway_tracked_objects{{kind=\"nodemaintenance\",map=\"{map}\"}} ");
        let text = shared.metrics().render();
        (text.lines()).find_map(|l| l.strip_prefix(&line).map(str::to_string))
    };
    assert_eq!(gauge("starts").as_deref(), Some("1"), "the metric says so");
    api.on("DELETE", "leases/node-n1", Answer::deleted());
    assert_eq!(look(&driver, &nm).await, None, "cleaned up");
    assert_eq!(driver.tracked(), (0, 0), "nothing of it is kept");
    assert_eq!(gauge("starts").as_deref(), Some("0"));
    assert_eq!(gauge("failures").as_deref(), Some("0"));
}

#[tokio::test(start_paused = true)]
async fn starts_that_are_over_are_pruned_as_objects_come_and_go() {
    let api = cluster(Start);
    let driver = Driver::new(Arc::new(operation(&api)));
    let named = |name: String| {
        let mut nm = maintenance(Start);
        nm.metadata.name = Some(name);
        nm
    };
    for i in 0..1000 {
        assert_eq!(driver.too_soon(&named(format!("old-{i}"))), None);
    }
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    for i in 0..1000 {
        assert_eq!(driver.too_soon(&named(format!("new-{i}"))), None);
    }
    assert_eq!(driver.tracked().1, 1000, "the new starts, none of the old");
}

#[tokio::test]
async fn failures_of_objects_gone_from_the_cache_are_pruned() {
    use kube::runtime::{reflector::store::Writer, watcher};
    let api = ApiServer::new();
    api.on_matching(|_| true, SERVER_ERROR);
    let named = |name: String| {
        let mut nm = maintenance(Start);
        nm.metadata.name = Some(name);
        Arc::new(nm)
    };
    let mut cache = Writer::<NodeMaintenance>::default();
    let kept: Vec<_> = (0..10).map(|i| named(format!("kept-{i}"))).collect();
    for nm in &kept {
        cache.apply_watcher_event(&watcher::Event::Apply(nm.as_ref().clone()));
    }
    let driver = Arc::new(Driver::new(Arc::new(operation(&api))).with_cache(cache.as_reader()));
    for nm in &kept {
        assert_eq!(look(&driver, nm).await, after(server, 1));
    }
    // Deleted by someone else (finalizer and all) while their reconciles failed.
    for i in 0..200 {
        look(&driver, &named(format!("gone-{i}"))).await;
    }
    let (failures, _) = driver.tracked();
    assert!(failures < 64, "{failures} failures kept");
    for nm in &kept {
        assert_eq!(look(&driver, nm).await, after(server, 2), "still counted");
    }
}

/// What the operation keeps of maintenances: (evictions, failures, index entries, gauge series).
fn kept(op: &MaintenanceOperation) -> (usize, usize, usize, usize) {
    let series = (op.shared.metrics().render().lines())
        .filter(|l| l.contains("nodemaintenance=\""))
        .count();
    (
        lock(&op.evictions).len(),
        lock(&op.failures).len(),
        op.shared.nodes().readers().count(),
        series,
    )
}

#[tokio::test]
async fn deleted_maintenances_leave_nothing_behind() {
    let api = cluster(Delete);
    let patched = serde_json::to_value(maintenance(Delete)).expect("encodes");
    api.on("PATCH", "nodemaintenances/*", Answer::Json(200, patched));
    // Half had their finalizer; half were deleted before it was added.
    let named = |i: usize| {
        let mut nm = maintenance(Delete);
        nm.metadata.name = Some(format!("nm-{i}"));
        nm.metadata.uid = Some(format!("uid-{i}"));
        if i % 2 == 1 {
            nm.metadata.finalizers = None;
        }
        nm
    };
    // The cache still shows each while its deletion is done (the finalizer goes after).
    let store = testing::listed((0..100).map(named).collect());
    let shared = testing::shared_with(&api.client(), vec![], vec![hold_source(store.clone())]);
    let op = MaintenanceOperation {
        metrics: shared.metrics().families(),
        shared,
        maintenances: store,
        ..operation(&api)
    };
    for i in 0..100 {
        let nm = named(i);
        op.follow_node(&nm);
        op.applied(&nm, &Stage::NodeMissing);
        lock(&op.failures).insert(nm.name_any(), "cannot evict: mock".into());
        lock(&op.evictions).insert(nm.name_any(), EvictionRound::default());
    }
    assert_eq!(kept(&op), (100, 100, 100, 100));
    for i in 0..100 {
        assert_eq!(testing::reconcile(&op, named(i)).await, Ok(()), "nm-{i}");
    }
    assert_eq!(kept(&op), (0, 0, 0, 0));
}

#[tokio::test]
async fn maintenances_gone_from_the_cache_leave_nothing_behind() {
    let api = cluster(Start);
    let kept = maintenance(Start);
    let op = MaintenanceOperation {
        maintenances: testing::listed(vec![kept.clone()]),
        ..operation(&api)
    };
    // Their finalizers removed by someone else: never reconciled deleted.
    for i in 0..100 {
        let name = format!("gone-{i}");
        lock(&op.failures).insert(name.clone(), "cannot evict: mock".into());
        lock(&op.evictions).insert(name, EvictionRound::default());
    }
    lock(&op.evictions).insert(kept.name_any(), EvictionRound::default());
    assert!(op.prepare(Arc::new(kept)).await.is_ok());
    assert_eq!(
        (lock(&op.evictions).len(), lock(&op.failures).len()),
        (1, 0)
    );
}
