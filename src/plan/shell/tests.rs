//! What a Plan's reconcile does when the API server fails one of its writes: the reconcile's
//! result, and which writes were sent (in order) before and after the failure.

use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use super::*;
use crate::plan::api::{ContainerSpec, PlanSpec, RebootSpec};
use crate::runtime::ErrorKind::{
    self, conflict, gone, not_found, server, timeout, too_many_requests,
};
use crate::runtime::testing::{
    self, ALREADY_EXISTS, Answer, ApiServer, CONFLICT, GONE, NAMESPACE, NOT_FOUND, Row,
    SERVER_ERROR, Sent, TIMEOUT, TOO_MANY_REQUESTS,
};

/// Where the Plan stands when it is reconciled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scene {
    /// Just created: no finalizer yet.
    New,
    /// Starts its node: records its cordon on the node, then the status, then the Job.
    Start,
    /// A Plan without reboot whose Job completed: labels and uncordons the node, then the status.
    Finish,
    /// Its Job completed: the status says the node reboots, then its reboot pod is made.
    Reboot,
    /// Deleted while its node reboots: its Job and reboot pod go, the node is uncordoned, the
    /// finalizer goes.
    Delete,
}
use Scene::{Delete, Finish, New, Reboot, Start};

/// Each write: its name in the tables, method and path.
const WRITES: [(&str, &str, &str); 7] = [
    ("finalizer", "PATCH", "plans/p"),
    ("status", "PATCH", "plans/p/status"),
    ("node", "PATCH", "nodes/n1"),
    ("job", "POST", "namespaces/system-upgrade/jobs"),
    ("pod", "POST", "namespaces/system-upgrade/pods"),
    ("delete-job", "DELETE", "namespaces/system-upgrade/jobs/*"),
    ("delete-pod", "DELETE", "namespaces/system-upgrade/pods/*"),
];

fn name_of(sent: &Sent) -> Option<&'static str> {
    WRITES
        .iter()
        .find(|(_, m, p)| sent.is(m, p))
        .map(|(n, ..)| *n)
}

/// A Plan of one node that cordons it and, unless it finishes in the tests, reboots it.
fn plan(scene: Scene) -> Plan {
    let mut plan = Plan::new(
        "p",
        PlanSpec {
            concurrency: Some(1),
            version: Some("v1.30.1+k3s1".into()),
            service_account_name: Some("system-upgrade".into()),
            node_selector: Some(LabelSelector {
                match_labels: Some([("pool".to_string(), "a".to_string())].into()),
                ..Default::default()
            }),
            upgrade: ContainerSpec {
                image: "rancher/k3s-upgrade".into(),
                ..Default::default()
            },
            cordon: Some(true),
            reboot: (scene != Finish).then(|| RebootSpec {
                timeout: Some("10m".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    plan.metadata = ObjectMeta {
        name: Some("p".into()),
        namespace: Some(NAMESPACE.into()),
        uid: Some("plan-uid".into()),
        generation: Some(1),
        resource_version: Some("1".into()),
        finalizers: (scene != New).then(|| vec![deletion::FINALIZER.into()]),
        ..Default::default()
    };
    plan
}

fn node() -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        uid: "n1-uid".into(),
        labels: [
            (
                crate::plan::api::labels::HOSTNAME.to_string(),
                "n1".to_string(),
            ),
            (
                crate::plan::api::labels::OS.to_string(),
                "linux".to_string(),
            ),
            ("pool".to_string(), "a".to_string()),
        ]
        .into(),
        ready: true,
        boot_id: "boot-1".into(),
        ..Default::default()
    }
}

/// What a reconcile reads: the Plan, its node, its Jobs and reboot pods.
struct World {
    plan: Plan,
    node: NodeInfo,
    jobs: Vec<Job>,
    pods: Vec<Pod>,
}

/// An API server on which every write succeeds.
fn cluster(plan: &Plan) -> ApiServer {
    let api = ApiServer::new();
    let mut written = serde_json::to_value(plan).expect("encodes");
    written["metadata"]["resourceVersion"] = json!("2");
    let node = json!({"metadata": {"name": "n1"}});
    api.on("PATCH", "plans/p", Answer::Json(200, written.clone()));
    api.on("PATCH", "plans/p/status", Answer::Json(200, written));
    api.on("PATCH", "nodes/n1", Answer::Json(200, node));
    api.on("POST", "jobs", Answer::Echo(201));
    api.on("POST", "pods", Answer::Echo(201));
    api.on("DELETE", "jobs/*", Answer::deleted());
    api.on("DELETE", "pods/*", Answer::deleted());
    api
}

fn operation(api: &ApiServer, w: &World) -> PlanOperation {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        ChannelClient::new("cluster", &ChannelConfig::default()).expect("a channel client");
    let shared = testing::shared(&api.client(), vec![w.node.clone()]);
    PlanOperation {
        metrics: shared.metrics().families(),
        shared,
        plans: testing::listed(vec![w.plan.clone()]),
        jobs: JobCache::listed(w.jobs.clone()),
        secrets: testing::listed(vec![]),
        reboot_pods: testing::listed(w.pods.clone()),
        job_config: JobConfig::default(),
        channels: Arc::new(ChannelCache::new(client, RESYNC)),
        channel_answered: futures::channel::mpsc::unbounded().0,
        created_jobs: Default::default(),
        created_pods: Default::default(),
        templates: Default::default(),
        checks: crate::runtime::checks::CheckReader::new(
            api.client(),
            crate::runtime::checks::CheckAccount::in_namespace(testing::NAMESPACE),
        ),
        written: Default::default(),
        pruned: Default::default(),
        explaining: false,
    }
}

/// The bodies `api` received for `write`.
fn bodies(api: &ApiServer, write: &str) -> Vec<Value> {
    (api.writes().into_iter())
        .filter(|s| name_of(s) == Some(write))
        .map(|s| s.body)
        .collect()
}

fn decode<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("decodes")
}

/// The world of `scene`: for the scenes after the start, what a successful start wrote (its
/// status, its Job, its cordon record on the node), moved on; for a deletion, also what the
/// reboot after its Job wrote (the status, the reboot pod).
async fn world(scene: Scene) -> World {
    let mut w = World {
        plan: plan(scene),
        node: node(),
        jobs: vec![],
        pods: vec![],
    };
    if matches!(scene, New | Start) {
        return w;
    }
    let api = cluster(&w.plan);
    let started = testing::reconcile(&operation(&api, &w), w.plan.clone()).await;
    assert_eq!(started, Ok(()), "{:?}", api.sent());
    let status = testing::status_sent(&api).expect("a status");
    w.plan.status = Some(decode(status));
    w.jobs = bodies(&api, "job").into_iter().map(decode).collect();
    w.pods = bodies(&api, "pod").into_iter().map(decode).collect();
    let record = &bodies(&api, "node")[0]["metadata"]["annotations"];
    let record: BTreeMap<String, Option<String>> = decode(record.clone());
    w.node.annotations = (record.into_iter())
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
    w.node.unschedulable = true; // as the Job's drain does
    w.jobs[0].status = Some(completed());
    if scene == Delete {
        let api = cluster(&w.plan);
        let rebooting = testing::reconcile(&operation(&api, &w), w.plan.clone()).await;
        assert_eq!(rebooting, Ok(()), "{:?}", api.sent());
        // The status patch carries what changed.
        let mut status = serde_json::to_value(&w.plan.status).expect("encodes");
        merge(&mut status, testing::status_sent(&api).expect("a status"));
        w.plan.status = Some(decode(status));
        w.pods = bodies(&api, "pod").into_iter().map(decode).collect();
        assert_eq!(w.pods.len(), 1, "the reboot pod: {:?}", api.sent());
        w.plan.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    }
    w
}

/// RFC 7386: `patch` merged into `into`.
fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (k, v) in patch {
                match v {
                    Value::Null => {
                        into.remove(&k);
                    }
                    v => merge(into.entry(k).or_insert(Value::Null), v),
                }
            }
        }
        (into, patch) => *into = patch,
    }
}

fn completed() -> JobStatus {
    JobStatus {
        conditions: Some(vec![JobCondition {
            type_: "Complete".into(),
            status: "True".into(),
            last_transition_time: Some(Time(Timestamp::now())),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// One reconcile in `scene`, `write` answered with `answer`: the result, and the writes sent.
async fn reconcile_with(
    scene: Scene,
    write: &'static str,
    answer: Answer,
) -> (Result<(), ErrorKind>, String) {
    let w = world(scene).await;
    let api = cluster(&w.plan);
    api.on_matching(move |sent| name_of(sent) == Some(write), answer);
    let result = testing::reconcile(&operation(&api, &w), w.plan.clone()).await;
    assert!(api.unscripted().is_empty(), "{:?}", api.unscripted());
    (result, testing::named_writes(&api, name_of))
}

#[tokio::test]
async fn each_scene_writes_in_its_order() {
    for (scene, writes) in [
        (New, "finalizer node status job"),
        (Start, "node status job"),
        (Finish, "node status finalizer"),
        (Reboot, "status pod"),
        (Delete, "delete-job delete-pod node finalizer"),
    ] {
        let (result, sent) = reconcile_with(scene, testing::NO_WRITE, NOT_FOUND).await;
        assert_eq!((result, sent.as_str()), (Ok(()), writes), "{scene:?}");
    }
}

/// In a scene, a write answered so: the reconcile's outcome, and the writes sent, in order.
#[rustfmt::skip]
const ROWS: [Row<Scene>; 73] = [
    (New,    "finalizer",  NOT_FOUND,         Ok(()),                 "finalizer"),
    (New,    "finalizer",  CONFLICT,          Err(conflict),          "finalizer"),
    (New,    "finalizer",  GONE,              Err(gone),              "finalizer"),
    (New,    "finalizer",  TOO_MANY_REQUESTS, Err(too_many_requests), "finalizer"),
    (New,    "finalizer",  SERVER_ERROR,      Err(server),            "finalizer"),
    (New,    "finalizer",  TIMEOUT,           Err(timeout),           "finalizer"),
    // The cordon record precedes the status: refused, nothing else is written.
    (Start,  "node",       NOT_FOUND,         Ok(()),                 "node status job"),
    (Start,  "node",       CONFLICT,          Err(conflict),          "node"),
    (Start,  "node",       GONE,              Err(gone),              "node"),
    (Start,  "node",       TOO_MANY_REQUESTS, Err(too_many_requests), "node"),
    (Start,  "node",       SERVER_ERROR,      Err(server),            "node"),
    (Start,  "node",       TIMEOUT,           Err(timeout),           "node"),
    // The status names the node before its Job exists: refused, no Job is made.
    (Start,  "status",     CONFLICT,          Err(conflict),          "node status"),
    (Start,  "status",     GONE,              Err(gone),              "node status"),
    (Start,  "status",     TOO_MANY_REQUESTS, Err(too_many_requests), "node status"),
    (Start,  "status",     SERVER_ERROR,      Err(server),            "node status"),
    (Start,  "status",     TIMEOUT,           Err(timeout),           "node status"),
    (Start,  "job",        NOT_FOUND,         Err(not_found),         "node status job"),
    (Start,  "job",        CONFLICT,          Err(conflict),          "node status job"),
    (Start,  "job",        ALREADY_EXISTS,    Ok(()),                 "node status job"),
    (Start,  "job",        GONE,              Err(gone),              "node status job"),
    (Start,  "job",        TOO_MANY_REQUESTS, Err(too_many_requests), "node status job"),
    (Start,  "job",        SERVER_ERROR,      Err(server),            "node status job"),
    (Start,  "job",        TIMEOUT,           Err(timeout),           "node status job"),
    // The node is labelled and uncordoned before the status forgets it: refused, no status.
    (Finish, "node",       NOT_FOUND,         Ok(()),                 "node status finalizer"),
    (Finish, "node",       CONFLICT,          Err(conflict),          "node"),
    (Finish, "node",       GONE,              Err(gone),              "node"),
    (Finish, "node",       TOO_MANY_REQUESTS, Err(too_many_requests), "node"),
    (Finish, "node",       SERVER_ERROR,      Err(server),            "node"),
    (Finish, "node",       TIMEOUT,           Err(timeout),           "node"),
    (Finish, "status",     NOT_FOUND,         Ok(()),                 "node status finalizer"),
    (Finish, "status",     CONFLICT,          Err(conflict),          "node status"),
    (Finish, "status",     GONE,              Err(gone),              "node status"),
    (Finish, "status",     TOO_MANY_REQUESTS, Err(too_many_requests), "node status"),
    (Finish, "status",     SERVER_ERROR,      Err(server),            "node status"),
    (Finish, "status",     TIMEOUT,           Err(timeout),           "node status"),
    // The node given back, nothing is held: the finalizer goes, after the status says so.
    (Finish, "finalizer",  NOT_FOUND,         Ok(()),                 "node status finalizer"),
    (Finish, "finalizer",  CONFLICT,          Err(conflict),          "node status finalizer"),
    (Finish, "finalizer",  SERVER_ERROR,      Err(server),            "node status finalizer"),
    // The status says the node reboots before its reboot pod exists: refused, no pod is made.
    (Reboot, "status",     CONFLICT,          Err(conflict),          "status"),
    (Reboot, "status",     GONE,              Err(gone),              "status"),
    (Reboot, "status",     TOO_MANY_REQUESTS, Err(too_many_requests), "status"),
    (Reboot, "status",     SERVER_ERROR,      Err(server),            "status"),
    (Reboot, "status",     TIMEOUT,           Err(timeout),           "status"),
    (Reboot, "pod",        ALREADY_EXISTS,    Ok(()),                 "status pod"),
    (Reboot, "pod",        CONFLICT,          Err(conflict),          "status pod"),
    (Reboot, "pod",        SERVER_ERROR,      Err(server),            "status pod"),
    (Reboot, "pod",        TIMEOUT,           Err(timeout),           "status pod"),
    (Reboot, "pod",        GONE,              Err(gone),              "status pod"),
    // Deleted: the cleanup stops at its first failure, and the finalizer stays until it is done.
    (Delete, "delete-job", NOT_FOUND,         Ok(()),                 "delete-job delete-pod node finalizer"),
    (Delete, "delete-job", CONFLICT,          Err(conflict),          "delete-job"),
    (Delete, "delete-job", GONE,              Err(gone),              "delete-job"),
    (Delete, "delete-job", TOO_MANY_REQUESTS, Err(too_many_requests), "delete-job"),
    (Delete, "delete-job", SERVER_ERROR,      Err(server),            "delete-job"),
    (Delete, "delete-job", TIMEOUT,           Err(timeout),           "delete-job"),
    (Delete, "delete-pod", NOT_FOUND,         Ok(()),                 "delete-job delete-pod node finalizer"),
    (Delete, "delete-pod", CONFLICT,          Err(conflict),          "delete-job delete-pod"),
    (Delete, "delete-pod", GONE,              Err(gone),              "delete-job delete-pod"),
    (Delete, "delete-pod", TOO_MANY_REQUESTS, Err(too_many_requests), "delete-job delete-pod"),
    (Delete, "delete-pod", SERVER_ERROR,      Err(server),            "delete-job delete-pod"),
    (Delete, "delete-pod", TIMEOUT,           Err(timeout),           "delete-job delete-pod"),
    (Delete, "node",       NOT_FOUND,         Ok(()),                 "delete-job delete-pod node finalizer"),
    (Delete, "node",       CONFLICT,          Err(conflict),          "delete-job delete-pod node"),
    (Delete, "node",       GONE,              Err(gone),              "delete-job delete-pod node"),
    (Delete, "node",       TOO_MANY_REQUESTS, Err(too_many_requests), "delete-job delete-pod node"),
    (Delete, "node",       SERVER_ERROR,      Err(server),            "delete-job delete-pod node"),
    (Delete, "node",       TIMEOUT,           Err(timeout),           "delete-job delete-pod node"),
    (Delete, "finalizer",  NOT_FOUND,         Ok(()),                 "delete-job delete-pod node finalizer"),
    (Delete, "finalizer",  CONFLICT,          Err(conflict),          "delete-job delete-pod node finalizer"),
    (Delete, "finalizer",  GONE,              Err(gone),              "delete-job delete-pod node finalizer"),
    (Delete, "finalizer",  TOO_MANY_REQUESTS, Err(too_many_requests), "delete-job delete-pod node finalizer"),
    (Delete, "finalizer",  SERVER_ERROR,      Err(server),            "delete-job delete-pod node finalizer"),
    (Delete, "finalizer",  TIMEOUT,           Err(timeout),           "delete-job delete-pod node finalizer"),
];

#[tokio::test]
async fn every_write_under_every_failure() {
    testing::check_rows(&ROWS, reconcile_with).await;
}

/// In a scene, a write answered so: the reconcile's outcome, and the writes it must not send.
#[rustfmt::skip]
const BUGS: [Row<Scene>; 2] = [
    // No Job for a Plan the status write found gone...
    (Start,  "status", NOT_FOUND, Ok(()), "pod job"),
    // ... and no reboot pod either.
    (Reboot, "status", NOT_FOUND, Ok(()), "pod"),
];

#[tokio::test]
async fn nothing_is_made_for_a_plan_that_is_gone() {
    testing::check_not_sent(&BUGS, reconcile_with).await;
}

/// A Job slipway created counts as there while the cache has not shown it (the cache may only
/// be late), for a while at most. If it was deleted before the watch showed it, no watch event
/// may come after that while: the Plan must look again then, or its node waits with no Job
/// until some other change (at worst the resync, minutes later).
#[tokio::test]
async fn a_created_job_the_cache_never_shows_is_looked_for_again_when_patience_ends() {
    let w = world(Start).await;
    let api = cluster(&w.plan);
    let op = operation(&api, &w);
    let decided = |plan: Plan| {
        let op = &op;
        async move {
            let now = Timestamp::now();
            let observed = op.observe(&plan, now).await.expect("observed");
            let budget = op.shared.budget_for(&core::holder(&plan));
            let decision = op.decide(&plan, &observed, &budget, now);
            (observed.jobs.len(), decision)
        }
    };
    let (_, start) = decided(w.plan.clone()).await;
    assert!(
        start
            .effects
            .iter()
            .any(|e| matches!(e, PlanEffect::CreateJob(_))),
        "{:?}",
        start.effects
    );
    assert!(
        start.requeue.is_some_and(|r| r <= written::LOOK_AGAIN),
        "the decision that creates the Job: {:?}",
        start.requeue
    );
    let started = testing::reconcile(&op, w.plan.clone()).await;
    assert_eq!(started, Ok(()), "{:?}", api.sent());
    let mut plan = w.plan.clone();
    plan.status = Some(decode(testing::status_sent(&api).expect("a status")));
    // The Job is deleted before the watch shows it: the cache never has it.
    let (jobs, waiting) = decided(plan).await;
    assert_eq!(jobs, 1, "the created Job still counts");
    assert!(
        waiting.effects.is_empty(),
        "nothing to do meanwhile: {:?}",
        waiting.effects
    );
    assert!(
        waiting.requeue.is_some_and(|r| r <= written::LOOK_AGAIN),
        "looks again when the Job stops counting: {:?}",
        waiting.requeue
    );
}

#[tokio::test]
async fn deleted_plans_leave_nothing_behind() {
    // Each reads a channel of its own, and is deleted before its finalizer was added.
    let named = |i: usize| {
        let mut p = plan(New);
        p.metadata.name = Some(format!("p-{i}"));
        p.metadata.uid = Some(format!("uid-{i}"));
        p.spec.version = None;
        p.spec.channel = Some(format!("http://127.0.0.1:1/channels/{i}"));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        p
    };
    let plans: Vec<Plan> = (0..100).map(named).collect();
    let w = world(New).await;
    let api = cluster(&w.plan);
    let store = testing::listed(plans.clone());
    let holds = vec![watch::hold_source(store.clone())];
    let shared = testing::shared_with(&api.client(), vec![node()], holds);
    let op = PlanOperation {
        metrics: shared.metrics().families(),
        shared,
        plans: store,
        ..operation(&api, &w)
    };
    for p in &plans {
        op.candidates(p);
        op.applied(p, &PlanSummary::default());
        op.channels
            .resolve(p.spec.channel.as_deref().unwrap_or_default(), "")
            .await;
        let mut job = Job::default();
        job.metadata.name = Some(format!("job-{}", p.name_any()));
        job.metadata.labels = Some([(labels::PLAN.to_string(), p.name_any())].into());
        op.created_jobs.created(job);
    }
    let kept = |op: &PlanOperation| {
        let series = (op.shared.metrics().render().lines())
            .filter(|l| l.contains("plan=\"p-"))
            .count();
        let jobs: usize = (plans.iter())
            .map(|p| {
                (op.created_jobs)
                    .over(vec![], owned::plan_job(&p.name_any()), |_| false)
                    .len()
            })
            .sum();
        let readers = op.shared.nodes().readers().count();
        (readers, series > 0, op.channels.url_count(), jobs)
    };
    assert_eq!(kept(&op), (100, true, 100, 100));
    for p in &plans {
        assert_eq!(testing::reconcile(&op, p.clone()).await, Ok(()));
    }
    assert_eq!(kept(&op), (0, false, 0, 0));
}

#[tokio::test]
async fn channels_no_plan_reads_any_more_are_forgotten() {
    let mut p = plan(Start);
    p.spec.version = None;
    p.spec.channel = Some("http://127.0.0.1:1/channels/now".into());
    let w = world(Start).await;
    let api = cluster(&w.plan);
    let op = PlanOperation {
        plans: testing::listed(vec![p.clone()]),
        ..operation(&api, &w)
    };
    // The channels it read before, and those of Plans gone without a deletion seen.
    for i in 0..100 {
        let url = format!("http://127.0.0.1:1/channels/{i}");
        op.channels.resolve(&url, "").await;
    }
    op.channels
        .resolve("http://127.0.0.1:1/channels/now", "")
        .await;
    assert_eq!(op.channels.url_count(), 101);
    assert!(op.prepare(Arc::new(p)).await.is_ok());
    assert_eq!(op.channels.urls(), ["http://127.0.0.1:1/channels/now"]);
}

/// A reconcile reads the nodes not yet at the Plan's hash and those its records name; the nodes
/// at the hash are counted, and the decision is the one made over every node.
#[tokio::test]
async fn nodes_at_the_hash_are_counted_not_read() {
    let mut w = world(Finish).await;
    let hash = (w.plan.status.as_ref())
        .and_then(|s| s.latest_hash.clone())
        .expect("a hash");
    let key = labels::plan_node_label("p");
    let other = |name: &str, at: Option<&str>| {
        let mut n = node();
        n.name = name.into();
        n.uid = format!("{name}-uid");
        n.labels.insert(labels::HOSTNAME.into(), name.into());
        if let Some(at) = at {
            n.labels.insert(key.clone(), at.into());
        }
        n
    };
    // n1 is at the hash too, but its Job and the status name it.
    let mut n1 = w.node.clone();
    n1.labels.insert(key.clone(), hash.clone());
    let nodes = vec![
        n1,
        other("n2", Some(&hash)),
        other("n3", Some(&hash)),
        other("n4", Some("older")),
    ];
    // Completed Jobs at the Plan's version: n2's (settled) is not read, n4's is.
    let done_on = |node: &str| {
        let mut j = w.jobs[0].clone();
        j.metadata.name = Some(format!("done-on-{node}"));
        (j.metadata.labels.get_or_insert_default()).insert(labels::NODE.into(), node.into());
        j
    };
    let (on_n2, on_n4) = (done_on("n2"), done_on("n4"));
    w.jobs.extend([on_n2, on_n4]);
    let api = cluster(&w.plan);
    let shared = testing::shared(&api.client(), nodes);
    let op = PlanOperation {
        metrics: shared.metrics().families(),
        shared,
        ..operation(&api, &w)
    };
    let now = Timestamp::now();
    let observed = op.observe(&w.plan, now).await.expect("observed");
    let read: Vec<&str> = observed.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(read, ["n1", "n4"]);
    let jobs_read = |o: &PlanObserved| {
        let mut names: Vec<String> = o.jobs.iter().map(|j| j.name_any()).collect();
        names.sort();
        names
    };
    let n1_job = w.jobs[0].name_any();
    assert_eq!(jobs_read(&observed), [n1_job.clone(), "done-on-n4".into()]);
    assert_eq!(observed.settled.as_ref().map(|s| s.count), Some(2));
    assert_eq!(op.size(&observed), 4, "the interval is the Plan's size's");
    let budget = op.shared.budget_for(&core::holder(&w.plan));
    let counted = op.decide(&w.plan, &observed, &budget, now);
    let explaining = op.explaining();
    let every = explaining.observe(&w.plan, now).await.expect("observed");
    assert_eq!(every.nodes.len(), 4);
    assert!(every.settled.is_none(), "explaining lists every node");
    assert_eq!(every.jobs.len(), 3, "and reads every Job");
    let read_all = explaining.decide(&w.plan, &every, &budget, now);
    assert_eq!(counted.status, read_all.status);
    assert_eq!(counted.effects, read_all.effects);
    assert_eq!(counted.report, read_all.report);
    assert_eq!((counted.report.targeted, counted.report.upgraded), (4, 3));
}
