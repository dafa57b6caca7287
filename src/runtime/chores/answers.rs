//! Every chore under every answer of the API server: what a success, a 404, a 409 (a conflict or
//! an existing object), a 410, a 429, a 500 and a timeout come back as, and what each request
//! carries.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta};
use serde_json::{Value, json};

use super::*;
use crate::common::decision::Event;
use crate::runtime::ErrorKind::{
    self, conflict, gone, not_found, server, timeout, too_many_requests,
};
use crate::runtime::testing::{
    self, Answer, ApiServer, FAILURES, Sample, SampleSpec, SampleStatus,
};

/// What a chore came back as.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// `Ok(Some(_))`, `Ok(true)`.
    Done,
    /// `Ok(None)`, `Ok(false)`: nothing left to do (the object is gone, or already there).
    Nothing,
    Failed(ErrorKind),
}
use Outcome::{Done, Failed, Nothing};

#[derive(Debug, Clone, Copy)]
enum Chore {
    SetFinalizer,
    Patch,
    WriteStatus,
    PatchNode,
    Create,
    Delete,
}

/// What each chore comes back as: after a success, then after each of [`FAILURES`] (404, 409
/// Conflict, 409 AlreadyExists, 410, 429, 500, timeout).
#[rustfmt::skip]
const TABLE: [(Chore, [Outcome; 8]); 6] = [
    //                     200   404                409 Conflict      409 AlreadyExists 410           429                        500             timeout
    (Chore::SetFinalizer, [Done, Nothing,           Failed(conflict), Failed(conflict), Failed(gone), Failed(too_many_requests), Failed(server), Failed(timeout)]),
    (Chore::Patch,        [Done, Nothing,           Failed(conflict), Failed(conflict), Failed(gone), Failed(too_many_requests), Failed(server), Failed(timeout)]),
    (Chore::WriteStatus,  [Done, Nothing,           Failed(conflict), Failed(conflict), Failed(gone), Failed(too_many_requests), Failed(server), Failed(timeout)]),
    (Chore::PatchNode,    [Done, Nothing,           Failed(conflict), Failed(conflict), Failed(gone), Failed(too_many_requests), Failed(server), Failed(timeout)]),
    (Chore::Create,       [Done, Failed(not_found), Failed(conflict), Nothing,          Failed(gone), Failed(too_many_requests), Failed(server), Failed(timeout)]),
    (Chore::Delete,       [Done, Nothing,           Failed(conflict), Failed(conflict), Failed(gone), Failed(too_many_requests), Failed(server), Failed(timeout)]),
];

fn sample() -> Sample {
    let mut nm = Sample::new("nm", SampleSpec { node: "n1".into() });
    nm.metadata.resource_version = Some("1".into());
    nm.metadata.finalizers = Some(vec!["other".into()]);
    nm.status = Some(SampleStatus {
        phase: Some("Running".into()),
        progress: Some(50),
        pending_pods: vec!["a".into()],
    });
    nm
}

/// The status `sample()` is written with: a field changed, one gone.
fn drained() -> SampleStatus {
    SampleStatus {
        phase: Some("Running".into()),
        progress: Some(100),
        ..Default::default()
    }
}

fn configmap() -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `obj` as the API server returns it after a write.
fn written<K: Serialize>(obj: &K) -> Value {
    let mut value = serde_json::to_value(obj).expect("encodes");
    value["metadata"]["resourceVersion"] = json!("2");
    value
}

impl Chore {
    /// The request the chore sends, and the API server's answer when it succeeds.
    fn request(self) -> (&'static str, &'static str, Answer) {
        let nm = written(&sample());
        match self {
            Chore::SetFinalizer | Chore::Patch => ("PATCH", "samples/nm", Answer::Json(200, nm)),
            Chore::WriteStatus => ("PATCH", "samples/nm/status", Answer::Json(200, nm)),
            Chore::PatchNode => (
                "PATCH",
                "nodes/n1",
                Answer::Json(200, json!({"metadata": {"name": "n1"}})),
            ),
            Chore::Create => ("POST", "namespaces/ns/configmaps", Answer::Echo(201)),
            Chore::Delete => (
                "DELETE",
                "namespaces/ns/configmaps/cm",
                Answer::Json(200, written(&configmap())),
            ),
        }
    }

    async fn run(self, chores: &Chores) -> Outcome {
        let nm = sample();
        let outcome = match self {
            Chore::SetFinalizer => chores
                .set_finalizer(&nm, "slipway", true)
                .await
                .map(|o| o.is_some()),
            Chore::Patch => chores
                .patch(&nm, json!({"metadata": {"labels": {"a": "b"}}}))
                .await
                .map(|o| o.is_some()),
            Chore::WriteStatus => chores
                .write_status(&nm, &drained())
                .await
                .map(|o| o.is_some()),
            Chore::PatchNode => {
                (chores.patch_node(&NodeChange::of("n1").cordon(true)).await).map(|p| p.is_there())
            }
            Chore::Create => chores.create(&configmap()).await.map(|o| o.is_some()),
            Chore::Delete => {
                chores
                    .delete::<ConfigMap>(Some("ns"), "cm", &DeleteParams::default())
                    .await
            }
        };
        match outcome {
            Ok(true) => Done,
            Ok(false) => Nothing,
            Err(e) => Failed(e.kind()),
        }
    }
}

#[tokio::test]
async fn every_chore_under_every_answer() {
    for (chore, outcomes) in TABLE {
        let (method, path, ok) = chore.request();
        let answers = std::iter::once(ok).chain(FAILURES);
        for (answer, expected) in answers.zip(outcomes) {
            let api = ApiServer::new();
            api.on(method, path, answer.clone());
            let outcome = chore.run(&testing::chores(&api.client())).await;
            assert_eq!(outcome, expected, "{chore:?} answered {answer:?}");
            let sent: Vec<String> = api.sent().iter().map(|s| s.line()).collect();
            assert_eq!(sent.len(), 1, "{chore:?}: one request, no retry: {sent:?}");
            assert!(api.unscripted().is_empty(), "{sent:?}");
        }
    }
}

/// The one request `run` sent.
async fn sent_by<F: Future>(run: impl FnOnce(Chores) -> F) -> testing::Sent {
    let api = ApiServer::new();
    for chore in [
        Chore::Patch,
        Chore::WriteStatus,
        Chore::PatchNode,
        Chore::Create,
        Chore::Delete,
    ] {
        let (method, path, ok) = chore.request();
        api.on(method, path, ok);
    }
    run(testing::chores(&api.client())).await;
    let sent = api.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    sent[0].clone()
}

#[tokio::test]
async fn metadata_patches_are_guarded_by_the_resource_version_they_were_decided_on() {
    let nm = sample();
    let add = sent_by(|c| async move { c.set_finalizer(&nm, "slipway", true).await }).await;
    let want = json!({"metadata": {"finalizers": ["other", "slipway"], "resourceVersion": "1"}});
    assert_eq!(
        add.body, want,
        "the others kept, ours added, the version named"
    );
    assert_eq!(add.content_type, "application/merge-patch+json");
    let nm = sample();
    let remove = sent_by(|c| async move { c.set_finalizer(&nm, "other", false).await }).await;
    assert_eq!(
        remove.body,
        json!({"metadata": {"finalizers": [], "resourceVersion": "1"}})
    );
    let nm = sample();
    let body = json!({"metadata": {"labels": {"a": "b"}}});
    let patch = sent_by(|c| async move { c.patch(&nm, body).await }).await;
    assert_eq!(patch.body["metadata"]["resourceVersion"], "1");
    assert_eq!(patch.body["metadata"]["labels"], json!({"a": "b"}));
}

#[tokio::test]
async fn a_status_write_sends_what_changed_nulls_what_went_and_names_the_version() {
    let nm = sample();
    let sent = sent_by(|c| async move { c.write_status(&nm, &drained()).await }).await;
    assert!(sent.path.ends_with("/samples/nm/status"), "{}", sent.path);
    assert_eq!(sent.content_type, "application/merge-patch+json");
    let want = json!({
        "metadata": {"resourceVersion": "1"},
        "status": {"progress": 100, "pendingPods": null},
    });
    assert_eq!(sent.body, want);
    // Nothing changed: nothing is sent.
    let api = ApiServer::new();
    let nm = sample();
    let same = nm.status.clone().expect("status");
    let chores = testing::chores(&api.client());
    assert!(matches!(chores.write_status(&nm, &same).await, Ok(Some(_))));
    assert!(api.sent().is_empty());
}

#[tokio::test]
async fn a_node_patch_is_a_merge_patch_of_the_change() {
    let change = NodeChange::of("n1")
        .cordon(false)
        .label("l", Some("v"))
        .annotation("a", None);
    let patch = change.patch();
    let sent = sent_by(|c| async move { c.patch_node(&change).await }).await;
    assert_eq!(sent.content_type, "application/merge-patch+json");
    assert_eq!(sent.body, patch);
    assert_eq!(sent.body["spec"]["unschedulable"], Value::Null);
    // An empty change is done without a request.
    let api = ApiServer::new();
    let empty = testing::chores(&api.client())
        .patch_node(&NodeChange::of("n1"))
        .await;
    assert!(matches!(empty, Ok(NodePatched::Unsent)) && api.sent().is_empty());
}

#[tokio::test]
async fn creates_name_the_field_manager_and_deletes_their_propagation() {
    let create = sent_by(|c| async move { c.create(&configmap()).await }).await;
    assert!(
        create.query.contains("fieldManager=slipway"),
        "{}",
        create.query
    );
    assert_eq!(create.body["metadata"]["name"], "cm");
    let params = DeleteParams::background();
    let delete =
        sent_by(|c| async move { c.delete::<ConfigMap>(Some("ns"), "cm", &params).await }).await;
    assert_eq!(delete.body["propagationPolicy"], "Background");
}

#[tokio::test]
async fn two_nodes_messages_are_two_event_series_and_a_repetition_folds_into_one() {
    let api = ApiServer::new();
    let chores = testing::chores(&api.client());
    let nm = sample();
    for node in ["n1", "n2", "n1"] {
        let event = Event::normal("Rebooting", format!("Rebooting Node {node}"));
        chores.publish(&nm, &[event]).await;
    }
    let sent = api.events();
    let methods: Vec<&str> = sent.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(
        methods,
        ["POST", "POST", "PATCH"],
        "the third is the first's series"
    );
    let (n1, n2) = (&sent[0].body, &sent[1].body);
    assert_ne!(
        n1["action"], n2["action"],
        "the digest keeps the nodes apart"
    );
    assert_eq!(n1["note"], "Rebooting Node n1");
    assert_eq!(n2["note"], "Rebooting Node n2");
    assert_eq!(n1["reason"], "Rebooting");
    let series = sent[2].path.rsplit('/').next().unwrap_or_default();
    assert_eq!(json!(series), n1["metadata"]["name"]);
}

#[tokio::test]
async fn a_replica_that_does_not_lead_writes_nothing() {
    let api = ApiServer::new();
    let chores = testing::chores_with(&api.client(), LeaseGuard::default());
    for (chore, _) in TABLE {
        assert_eq!(
            chore.run(&chores).await,
            Failed(ErrorKind::not_leader),
            "{chore:?}"
        );
    }
    chores
        .publish(&sample(), &[Event::normal("Reason", "message")])
        .await;
    assert!(api.sent().is_empty(), "{:?}", api.sent());
}
