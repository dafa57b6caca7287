//! The one Node watch of the process, and what every watch shares: reducing a stream of objects to
//! the changes a decision reads.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::channel::mpsc::{TryRecvError, UnboundedReceiver, UnboundedSender, unbounded};
use futures::{Stream, StreamExt, TryStreamExt, future};
use k8s_openapi::api::core::v1::Node;
use kube::api::{WatchEvent, WatchParams};
use kube::runtime::watcher::InitialListStrategy;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tracing::{debug, info, warn};

use super::ReadyFuture;
use super::lean::LeanNode;
use crate::node::NodeInfo;
use crate::node::holders::Holder;
use crate::node::index::NodeIndex;

/// Who hears of node changes: each object a change concerns (by its [`NodeIndex`] interest), on
/// the receiver of its kind. Also how one operation wakes the others when it lets go of nodes.
#[derive(Default)]
pub struct NodeTriggers {
    routes: Mutex<Vec<Route>>,
}

/// The receiver of the objects `which` picks.
struct Route {
    which: fn(&Holder) -> bool,
    tx: UnboundedSender<Holder>,
    /// The objects sent and not received yet: an object is in the channel once at most, so a
    /// node that flaps a thousand times before its Plan's next reconcile queues that Plan once.
    pending: Arc<Mutex<BTreeSet<Holder>>>,
}

/// The objects of one kind that node changes concern, each queued once until received.
pub struct Triggered {
    rx: UnboundedReceiver<Holder>,
    pending: Arc<Mutex<BTreeSet<Holder>>>,
}

impl Triggered {
    /// The next object already queued, if any (without waiting).
    pub fn try_recv(&mut self) -> Result<Holder, TryRecvError> {
        let h = self.rx.try_recv()?;
        self.received(&h);
        Ok(h)
    }

    /// `h` may be queued again: its reconcile, which reads the node index as it is when it runs,
    /// comes after this (a change folded into the index meanwhile is read by it).
    fn received(&self, h: &Holder) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(h);
    }
}

impl futures::Stream for Triggered {
    type Item = Holder;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Holder>> {
        let next = self.rx.poll_next_unpin(cx);
        if let Poll::Ready(Some(h)) = &next {
            self.received(h);
        }
        next
    }
}

impl NodeTriggers {
    /// The objects of one kind (those `which` picks) that node changes concern.
    pub fn concerned(&self, which: fn(&Holder) -> bool) -> Triggered {
        let (tx, rx) = unbounded();
        let pending = Arc::new(Mutex::new(BTreeSet::new()));
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.push(Route {
            which,
            tx,
            pending: pending.clone(),
        });
        Triggered { rx, pending }
    }

    /// Tells each object's kind that it is concerned (no receiver for a kind the process does not
    /// run is fine); an object already queued is not queued again.
    pub fn send(&self, concerned: impl IntoIterator<Item = Holder>) {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        for h in concerned {
            if let Some(route) = routes.iter().find(|r| (r.which)(&h)) {
                let mut pending = route.pending.lock().unwrap_or_else(|e| e.into_inner());
                if pending.insert(h.clone()) && route.tx.unbounded_send(h.clone()).is_err() {
                    pending.remove(&h);
                }
            }
        }
    }
}

/// Runs the Node watch: keeps `index` (its nodes keeping the annotations it names), and tells
/// `triggers` what each change concerns.
pub async fn nodes(client: &Client, index: Arc<RwLock<NodeIndex>>, triggers: Arc<NodeTriggers>) {
    let api = Api::<Node>::all(client.clone());
    // Streamed, the initial list is decoded one Node at a time, not in pages of 500: the memory
    // peak at start no longer grows with the fleet.
    let config = match streams_lists(&api).await {
        true => watcher::Config::default().streaming_lists(),
        false => watcher::Config::default(),
    };
    info!(
        streamed = config.initial_list_strategy == InitialListStrategy::StreamingList,
        "watching nodes"
    );
    // Decoded as the index reads them: not their images, managed fields or capacity.
    let lean = Api::<LeanNode>::all(client.clone());
    let events = watcher(lean, config)
        .default_backoff()
        .map_ok(LeanNode::into_event);
    apply_node_events(events, index, triggers).await;
}

/// Whether the API server streams a watch's initial list (WatchList, Kubernetes 1.27+, on by
/// default in 1.34): asked with a selector that matches no node, so that the answer is one
/// bookmark ending the initial events. A server that refuses the parameters, or ignores them
/// (no such bookmark), is watched the old way: list, then watch.
async fn streams_lists(api: &Api<Node>) -> bool {
    let params = WatchParams::streaming_lists()
        .labels("slipway.dev/watch-list-probe")
        .timeout(2);
    let probe = async {
        let events = api.watch(&params, "0").await.ok()?;
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(WatchEvent::Bookmark(b)) = event {
                return Some(
                    b.metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .map(String::as_str)
                        == Some("true"),
                );
            }
        }
        Some(false)
    };
    tokio::time::timeout(Duration::from_secs(10), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// The annotation on the bookmark that ends a streamed initial list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Folds node watch events into `index` (pruned to what decisions read, keeping the annotations
/// the index names).
pub async fn apply_node_events(
    events: impl Stream<Item = Result<watcher::Event<Node>, watcher::Error>> + Send,
    index: Arc<RwLock<NodeIndex>>,
    triggers: Arc<NodeTriggers>,
) {
    let kept = index
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .kept()
        .to_vec();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                warn!("node watch: {e}");
                continue;
            }
        };
        let node = match &event {
            watcher::Event::Apply(n) | watcher::Event::Delete(n) => n.metadata.name.clone(),
            _ => None,
        };
        let concerned = {
            let mut index = index.write().unwrap_or_else(|e| e.into_inner());
            match event {
                watcher::Event::Apply(n) => index.apply(NodeInfo::from_node_keeping(&n, &kept)),
                watcher::Event::Delete(n) => {
                    index.delete(n.metadata.name.as_deref().unwrap_or_default())
                }
                watcher::Event::Init => {
                    index.relist_start();
                    Vec::new()
                }
                watcher::Event::InitApply(n) => {
                    index.relisted(NodeInfo::from_node_keeping(&n, &kept));
                    Vec::new()
                }
                watcher::Event::InitDone => index.relist_done(),
            }
        };
        if !concerned.is_empty() {
            // What a node change wakes, for whoever wonders why a kind reconciles so often.
            debug!(
                node = node.as_deref().unwrap_or("(list)"),
                ?concerned,
                "node change"
            );
        }
        triggers.send(concerned);
    }
}

/// Resolves once the node index has its first full list.
pub fn index_ready(index: Arc<RwLock<NodeIndex>>) -> ReadyFuture {
    Box::pin(async move {
        loop {
            if index.read().unwrap_or_else(|e| e.into_inner()).is_synced() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Passes on an object only when `view` changed since it was last seen (or it was deleted).
pub fn changes<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    view: fn(&K) -> u64,
) -> impl Stream<Item = K> + Send + 'static
where
    K: Resource + Send + 'static,
{
    let mut seen = Seen::default();
    events.filter_map(move |event| {
        let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone());
        let out = match event {
            Ok(watcher::Event::Apply(o)) => {
                let v = view(&o);
                (seen.views.insert(key(&o), v) != Some(v)).then_some(o)
            }
            Ok(watcher::Event::InitApply(o)) => {
                let (k, v) = (key(&o), view(&o));
                seen.relisted.get_or_insert_default().insert(k.clone());
                (seen.views.insert(k, v) != Some(v)).then_some(o)
            }
            Ok(watcher::Event::Delete(o)) => {
                seen.views.remove(&key(&o));
                Some(o)
            }
            Ok(watcher::Event::Init) => {
                seen.relisted = Some(HashSet::new());
                None
            }
            Ok(watcher::Event::InitDone) => {
                // Deleted while the watch was down: no Delete comes for them.
                let listed = seen.relisted.take().unwrap_or_default();
                seen.views.retain(|k, _| listed.contains(k));
                None
            }
            Err(e) => {
                warn!("watch: {e}");
                None
            }
        };
        future::ready(out)
    })
}

type Key = (Option<String>, Option<String>);

/// What [`changes`] keeps: the view of each object last passed on, and the objects the list under
/// way has shown.
#[derive(Default)]
struct Seen {
    views: HashMap<Key, u64>,
    relisted: Option<HashSet<Key>>,
}

/// A digest of what a decision reads of an object, for [`changes`].
pub fn digest(parts: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    use super::*;
    use crate::runtime::testing::{Answer, ApiServer};

    fn bookmark(annotations: serde_json::Value) -> Answer {
        Answer::Json(
            200,
            json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1",
                "metadata": {"resourceVersion": "7", "annotations": annotations}}}),
        )
    }

    /// A node that changes a thousand times before its Plan's next reconcile queues that Plan
    /// once (the channel holds each object once at most), and again once it was received.
    #[tokio::test]
    async fn an_object_is_queued_once_until_it_is_received() {
        let triggers = NodeTriggers::default();
        let mut plans = triggers.concerned(Holder::is_plan);
        let plan = |n: &str| Holder::Plan {
            namespace: "ns".into(),
            name: n.into(),
        };
        for _ in 0..1000 {
            triggers.send([plan("a"), plan("b")]);
        }
        let mut got = vec![plans.next().await, plans.next().await];
        got.sort();
        assert_eq!(got, [Some(plan("a")), Some(plan("b"))]);
        assert!(plans.try_recv().is_err(), "each queued once");
        triggers.send([plan("a")]);
        assert_eq!(
            plans.try_recv().ok(),
            Some(plan("a")),
            "queued again once received"
        );
        assert!(plans.try_recv().is_err());
    }

    #[tokio::test]
    async fn lists_are_streamed_only_where_the_server_says_it_streamed_one() {
        let cases = [
            (bookmark(json!({INITIAL_EVENTS_END: "true"})), true),
            // An old server that ignores the parameters: no bookmark ends the initial events.
            (bookmark(json!({})), false),
            (Answer::Fail(422, "Invalid"), false),
            (Answer::Fail(403, "Forbidden"), false),
        ];
        for (answer, streamed) in cases {
            let api = ApiServer::new();
            api.on("GET", "nodes", answer);
            let nodes = Api::<Node>::all(api.client());
            assert_eq!(streams_lists(&nodes).await, streamed);
        }
    }

    #[tokio::test]
    async fn objects_deleted_while_the_watch_was_down_are_forgotten() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let named = |i: usize| {
            let mut o = ConfigMap::default();
            o.metadata.name = Some(format!("o-{i}"));
            o
        };
        let list = |names: std::ops::Range<usize>| {
            let mut events = vec![watcher::Event::Init];
            events.extend(names.map(|i| watcher::Event::InitApply(named(i))));
            events.push(watcher::Event::InitDone);
            events
        };
        // Listed, then the watch is down while they are all deleted, and it lists none; they
        // come back as they were.
        let mut events = list(0..100);
        events.extend(list(0..0));
        events.extend((0..100).map(|i| watcher::Event::Apply(named(i))));
        let events = futures::stream::iter(events.into_iter().map(Ok));
        let passed: Vec<ConfigMap> = changes(events, |_| 0).collect().await;
        assert_eq!(passed.len(), 200, "each new one is a change");
    }
}
