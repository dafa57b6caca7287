//! The Kubernetes chores every controller does, written once: add and remove a finalizer, write a
//! status guarded by the resourceVersion it was decided on, patch a node, create and delete what a
//! decision asks for, publish events. Every write first checks that this replica still holds the
//! leader lease, and answers that only mean "already done" (an object already gone, one already
//! there) are not errors.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::object::HasStatus;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::error::{ApiResult, Error};
use super::leader::LeaseGuard;
use super::metrics::Metrics;
use super::notify::Notifier;
use crate::common::bounded::{EVENT_NOTE_BYTES, cut};
use crate::common::decision::{Event, EventType};
use crate::node::change::NodeChange;
use k8s_openapi::api::core::v1::ObjectReference;

/// The field manager slipway writes with.
pub const FIELD_MANAGER: &str = "slipway";

/// A resource slipway reads and writes.
pub trait Object:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// The API of a resource kind in its scope: namespaced or cluster-wide.
pub trait Scope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(client: Client, ns: Option<&str>)
    -> Api<K>;
}

impl Scope for NamespaceResourceScope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: Client,
        ns: Option<&str>,
    ) -> Api<K> {
        Api::namespaced(client, ns.unwrap_or("default"))
    }
}

impl Scope for ClusterResourceScope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(client: Client, _: Option<&str>) -> Api<K> {
        Api::all(client)
    }
}

/// What a node patch came to.
#[derive(Debug)]
pub enum NodePatched {
    /// The node is gone: nothing left to change.
    Gone,
    /// Nothing was sent: the change changes nothing.
    Unsent,
    /// The node as the patch left it (decoded lean, as the node watch decodes nodes).
    Patched(Box<k8s_openapi::api::core::v1::Node>),
}

impl NodePatched {
    /// The node is there (patched, or with nothing to change).
    pub fn is_there(&self) -> bool {
        !matches!(self, NodePatched::Gone)
    }
}

/// What every shell writes through.
#[derive(Clone)]
pub struct Chores {
    client: Client,
    /// Asks for evictions: no retry layer, so a PodDisruptionBudget's 429 comes back at once.
    evictions: Client,
    guard: LeaseGuard,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    /// Where published events that are worth telling go (`None`: no targets).
    notifier: Option<Notifier>,
}

impl Chores {
    pub fn new(
        client: Client,
        evictions: Client,
        guard: LeaseGuard,
        recorder: Recorder,
        metrics: Arc<Metrics>,
    ) -> Chores {
        Chores {
            client,
            evictions,
            guard,
            recorder,
            metrics,
            notifier: None,
        }
    }

    /// The same chores, telling `notifier` the events they publish.
    pub fn with_notifier(self, notifier: Notifier) -> Chores {
        Chores {
            notifier: Some(notifier),
            ..self
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn eviction_client(&self) -> &Client {
        &self.evictions
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The API of `K` in `ns` (ignored for cluster-scoped kinds).
    pub fn api<K>(&self, ns: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        <K::Scope as Scope>::api::<K>(self.client.clone(), ns)
    }

    fn api_of<K>(&self, obj: &K) -> Api<K>
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        self.api(obj.meta().namespace.as_deref())
    }

    /// Whether this replica may write now.
    pub fn leading(&self) -> Result<(), Error> {
        if self.guard.is_leading() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    /// A merge patch of `obj`'s metadata (and more), refused if `obj` changed since it was read.
    /// `None`: the object is gone.
    pub async fn patch<K>(&self, obj: &K, mut body: Value) -> Result<Option<K>, Error>
    where
        K: Object,
        K::Scope: Scope,
    {
        self.leading()?;
        body["metadata"]["resourceVersion"] = json!(obj.resource_version());
        self.api_of(obj)
            .patch(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
            .found()
            .map(|o| o.map(without_managed_fields))
    }

    /// Adds (`present`) or removes `finalizer`, keeping the others. `None`: the object is gone.
    pub async fn set_finalizer<K>(
        &self,
        obj: &K,
        finalizer: &str,
        present: bool,
    ) -> Result<Option<K>, Error>
    where
        K: Object,
        K::Scope: Scope,
    {
        let mut finalizers: Vec<&str> = obj
            .finalizers()
            .iter()
            .map(String::as_str)
            .filter(|f| *f != finalizer)
            .collect();
        if present {
            finalizers.push(finalizer);
        }
        self.patch(obj, json!({ "metadata": { "finalizers": finalizers } }))
            .await
    }

    /// Writes `status` over the one `obj` was read with, as a merge patch of what changed, guarded
    /// by `obj`'s resourceVersion: a decision made on a stale object is refused with a conflict
    /// instead of overwriting a newer status. The object as written (as it was, when nothing
    /// changed); `Ok(None)` when the object is gone.
    pub async fn write_status<K>(&self, obj: &K, status: &K::Status) -> Result<Option<K>, Error>
    where
        K: Object + HasStatus,
        K::Status: Serialize,
        K::Scope: Scope,
    {
        let encoding =
            |e: serde_json::Error| Error::Startup(format!("cannot encode a status: {e}"));
        let Some(diff) = merge::status_patch(obj.status(), status).map_err(encoding)? else {
            return Ok(Some(obj.clone()));
        };
        self.leading()?;
        let body = StatusPatch {
            metadata: Revision {
                resource_version: obj.resource_version(),
            },
            status: &diff,
        };
        let written = self
            .api_of(obj)
            .patch_status(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
            .found()?;
        debug!(name = %obj.name_any(), "status written");
        Ok(written.map(without_managed_fields))
    }

    /// Applies `change` to its node (see [`super::shared::Shared::patch_node`], which every kind
    /// patches nodes with).
    pub async fn patch_node(&self, change: &NodeChange) -> Result<NodePatched, Error> {
        if change.is_empty() {
            return Ok(NodePatched::Unsent);
        }
        self.leading()?;
        // Its answer is the whole node: decoded lean, as the node watch does.
        let nodes = self.api::<super::lean::LeanNode>(None);
        let mut body = change.patch();
        if !change.taint_edits.is_empty() && change.taints.is_none() {
            // The taint list is replaced whole: read it, and refuse the write if it moved since.
            let Some(node) = nodes.get_opt(&change.node).await? else {
                return Ok(NodePatched::Gone);
            };
            let current = (node.0)
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if let Some(taints) = change.edited_taints(&current) {
                body["spec"]["taints"] = json!(taints);
                body["metadata"]["resourceVersion"] = json!(node.0.metadata.resource_version);
            } else if body == json!({}) {
                return Ok(NodePatched::Unsent);
            }
        }
        let patched = nodes
            .patch(&change.node, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .found()?;
        Ok(match patched {
            Some(node) => {
                self.metrics.node_patched();
                NodePatched::Patched(Box::new(node.0))
            }
            None => NodePatched::Gone,
        })
    }

    /// Creates `obj`; `None` when an object of that name already exists.
    pub async fn create<K>(&self, obj: &K) -> Result<Option<K>, Error>
    where
        K: Object,
        K::Scope: Scope,
    {
        self.leading()?;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.api_of(obj).create(&params, obj).await.created()
    }

    /// Deletes `name`; `false` when it was already gone.
    pub async fn delete<K>(
        &self,
        ns: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<bool, Error>
    where
        K: Object,
        K::Scope: Scope,
    {
        self.leading()?;
        let deleted = self.api::<K>(ns).delete(name, params).await.found()?;
        Ok(deleted.is_some())
    }

    /// Publishes `events` on `obj`, and queues those worth telling for the notification targets
    /// (which never waits). A failure is logged: an event is never worth a retry.
    pub async fn publish<K: Object>(&self, obj: &K, events: &[Event]) {
        self.publish_to(&obj.object_ref(&()), events).await;
    }

    /// Publishes `events` on the object `reference` names (see [`Chores::publish`]).
    pub async fn publish_to(&self, reference: &ObjectReference, events: &[Event]) {
        for event in events {
            self.publish_on(reference, event).await;
        }
    }

    /// Publishes `event` on the object `reference` names (see [`Chores::publish`]).
    pub async fn publish_on(&self, reference: &ObjectReference, event: &Event) {
        if !self.guard.is_leading() {
            return;
        }
        if let Some(notifier) = &self.notifier {
            notifier.tell(reference, event);
        }
        if event.quiet {
            return;
        }
        let published = self.recorder.publish(&kube_event(event), reference).await;
        if let Err(e) = published {
            let name = reference.name.as_deref().unwrap_or_default();
            warn!(name, reason = event.reason, "cannot publish event: {e}");
        }
    }
}

impl super::notify::Warnings for Chores {
    async fn publish_on(&self, reference: &ObjectReference, event: &Event) {
        Chores::publish_on(self, reference, event).await;
    }
}

/// The event as kube's recorder takes it. The recorder folds events with the same reason and
/// action into one series that keeps the first note; a digest of the note in the action keeps
/// different messages (two nodes, two reasons for waiting) apart, and folds only repetitions.
pub fn kube_event(event: &Event) -> KubeEvent {
    KubeEvent {
        type_: match event.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        },
        reason: event.reason.to_string(),
        note: Some(cut(&event.message, EVENT_NOTE_BYTES).into_owned()),
        action: format!("{}-{}", event.reason, note_digest(&event.message)),
        secondary: None,
    }
}

fn note_digest(note: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(note.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A status write: the merge patch of the status, guarded by the resourceVersion read.
#[derive(Debug, Serialize)]
struct StatusPatch<'a> {
    metadata: Revision,
    status: &'a serde_json::value::RawValue,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Revision {
    resource_version: Option<String>,
}

/// An object as the process keeps it: its answer from the API server names every field each
/// manager wrote (for a status, every field of it), and nothing here reads that.
fn without_managed_fields<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

mod merge;

#[cfg(test)]
mod answers;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_with_other_messages_are_other_series() {
        let a = kube_event(&Event::normal("Rebooting", "Rebooting Node n1"));
        let b = kube_event(&Event::normal("Rebooting", "Rebooting Node n2"));
        let again = kube_event(&Event::normal("Rebooting", "Rebooting Node n1"));
        assert_ne!(a.action, b.action);
        assert_eq!(a.action, again.action);
        assert!(a.action.starts_with("Rebooting-"));
        assert!(a.action.len() <= 128, "the API server's limit");
    }
}
