//! A kind of node operation, as the process runs it and `slipway explain` reads it. Each kind
//! implements [`Kind`] in its own shell, and the binary lists the kinds once
//! (`src/cli/kinds.rs`): `slipway run` and `slipway explain` go through that list, so a new kind
//! is its folder and a line there.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::ReadyFuture;
use super::error::Error;
use super::operation::{Operation, predict};
use super::shared::{HoldSource, Shared};
use super::watch::NodeTriggers;
use crate::common::decision::Decision;
use crate::node::holders::Holder;

/// Where the process reads and writes: its client, and the controller's namespace and name.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    pub client: &'a Client,
    /// `--namespace`: the Plans', Jobs', Secrets' and reboot pods' namespace.
    pub namespace: &'a str,
    /// `--name`: the `upgrade.cattle.io/controller` label of what the controller creates.
    pub name: &'a str,
}

impl Place<'_> {
    /// The API of `K` in the controller's namespace.
    pub fn namespaced<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), self.namespace)
    }
}

/// One kind of node operation. The process holds kinds as [`Kinds`]: each a [`Kind`] behind the
/// object-safe [`AnyKind`].
pub trait Kind: Send + Sync + 'static {
    /// The kind's operation.
    type Op: Operation;
    /// Its watches, started: its caches and the changes that trigger its reconciles.
    type Watches: Send + 'static;
    /// Its objects and what their decisions read, listed once.
    type Lists: Send + 'static;

    /// How `slipway explain` names it: its word first (`plan`), then the other spellings.
    fn words(&self) -> &'static [&'static str];
    /// Whether its objects are watched in every namespace, so that `slipway explain` takes
    /// `KIND/[NAMESPACE/]NAME` (the others are cluster-wide, or in `--namespace`).
    fn across_namespaces(&self) -> bool {
        false
    }
    /// Its CRDs, installed at start (`--install-crd`).
    fn crds(&self) -> Vec<CustomResourceDefinition>;
    /// The node annotations its decisions read, which the node index keeps.
    fn node_annotations(&self) -> &'static [&'static str] {
        &[]
    }

    /// Starts (lazily: nothing runs until polled) its watches.
    fn watch(&self, at: Place<'_>, triggers: &NodeTriggers) -> Self::Watches;
    /// The caches the process must have listed before it is ready, besides the hold source's.
    fn ready(&self, _watches: &Self::Watches) -> Vec<(&'static str, ReadyFuture)> {
        Vec::new()
    }
    /// The nodes its objects hold by their own records, for the budget.
    fn holds(&self, watches: &Self::Watches) -> Arc<dyn HoldSource>;
    /// Reconciles its objects until `shutdown`.
    fn run(
        &self,
        watches: Self::Watches,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>>;

    /// Lists its objects once, with what their decisions read (`slipway explain`).
    fn list<'a>(&'a self, at: Place<'a>) -> BoxFuture<'a, Result<Self::Lists, Error>>;
    /// The nodes the listed objects hold by their own records.
    fn listed_holds(&self, lists: &Self::Lists) -> Arc<dyn HoldSource>;
    /// Its operation over the listed objects, on `shared` (which holds every kind's hold
    /// source), and the objects.
    fn operation(
        &self,
        lists: Self::Lists,
        shared: Arc<Shared>,
    ) -> Result<Foreseen<Self::Op>, Error>;
}

/// A [`Kind`], its types erased: what the list of kinds holds.
pub trait AnyKind: Send + Sync {
    fn words(&self) -> &'static [&'static str];
    fn across_namespaces(&self) -> bool;
    fn crds(&self) -> Vec<CustomResourceDefinition>;
    fn node_annotations(&self) -> &'static [&'static str];
    fn watch(self: Arc<Self>, at: Place<'_>, triggers: &NodeTriggers) -> Box<dyn Watching>;
    fn list<'a>(self: Arc<Self>, at: Place<'a>) -> BoxFuture<'a, Result<Box<dyn Listed>, Error>>;
}

/// The kinds a process runs (or `slipway explain` reads), in the order in which the budget lets
/// what survived a restart keep a node.
pub type Kinds = Vec<Arc<dyn AnyKind>>;

/// A kind's watches, started.
pub trait Watching: Send {
    /// The caches the process must have listed before it is ready, besides the hold source's.
    fn ready(&self) -> Vec<(&'static str, ReadyFuture)>;
    /// The nodes its objects hold by their own records, for the budget.
    fn holds(&self) -> Arc<dyn HoldSource>;
    /// Reconciles its objects until `shutdown`.
    fn run(
        self: Box<Self>,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>>;
}

/// A kind's objects, listed once.
pub trait Listed: Send {
    /// The nodes they hold by their own records, for the budget.
    fn holds(&self) -> Arc<dyn HoldSource>;
    /// The kind's operation over them, on `shared` (which holds every kind's hold source).
    fn foresee(self: Box<Self>, shared: Arc<Shared>) -> Result<Box<dyn Foresight>, Error>;
}

impl<K: Kind> AnyKind for K {
    fn words(&self) -> &'static [&'static str] {
        Kind::words(self)
    }

    fn across_namespaces(&self) -> bool {
        Kind::across_namespaces(self)
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        Kind::crds(self)
    }

    fn node_annotations(&self) -> &'static [&'static str] {
        Kind::node_annotations(self)
    }

    fn watch(self: Arc<Self>, at: Place<'_>, triggers: &NodeTriggers) -> Box<dyn Watching> {
        let watches = Kind::watch(self.as_ref(), at, triggers);
        Box::new(Of {
            kind: self,
            held: watches,
        })
    }

    fn list<'a>(self: Arc<Self>, at: Place<'a>) -> BoxFuture<'a, Result<Box<dyn Listed>, Error>> {
        Box::pin(async move {
            let lists = Kind::list(self.as_ref(), at).await?;
            let listed: Box<dyn Listed> = Box::new(Of {
                kind: self,
                held: lists,
            });
            Ok(listed)
        })
    }
}

/// What a kind holds (its watches, or its listed objects), beside the kind.
struct Of<K, T> {
    kind: Arc<K>,
    held: T,
}

impl<K: Kind> Watching for Of<K, K::Watches> {
    fn ready(&self) -> Vec<(&'static str, ReadyFuture)> {
        self.kind.ready(&self.held)
    }

    fn holds(&self) -> Arc<dyn HoldSource> {
        self.kind.holds(&self.held)
    }

    fn run(
        self: Box<Self>,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>> {
        self.kind.run(self.held, shared, shutdown)
    }
}

impl<K: Kind> Listed for Of<K, K::Lists> {
    fn holds(&self) -> Arc<dyn HoldSource> {
        self.kind.listed_holds(&self.held)
    }

    fn foresee(self: Box<Self>, shared: Arc<Shared>) -> Result<Box<dyn Foresight>, Error> {
        Ok(Box::new(self.kind.operation(self.held, shared)?))
    }
}

/// What the next decision of an object is, its status, effects and report left out.
pub type Outlook = Decision<(), (), ()>;

/// An object that could not be decided on.
#[derive(Debug, thiserror::Error)]
#[error("cannot decide on {object}: {source}")]
pub struct Undecided {
    pub object: String,
    #[source]
    pub source: Error,
}

/// A kind's operation over listed objects: the next decision of each, as a reconcile now would
/// decide it ([`predict`]), claiming and applying nothing.
pub trait Foresight: Send + Sync {
    /// Of each object that `pick` takes (by namespace and name): who it is and its outlook.
    fn outlooks<'a>(
        &'a self,
        pick: &'a (dyn Fn(Option<&str>, &str) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Vec<(Holder, Outlook)>, Undecided>>;
}

/// [`Foresight`] of an operation over its listed objects.
pub struct Foreseen<O: Operation> {
    pub op: O,
    pub objects: Vec<Arc<O::Object>>,
}

impl<O: Operation> Foresight for Foreseen<O> {
    fn outlooks<'a>(
        &'a self,
        pick: &'a (dyn Fn(Option<&str>, &str) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Vec<(Holder, Outlook)>, Undecided>> {
        Box::pin(async move {
            let mut all = Vec::new();
            for obj in &self.objects {
                if !pick(obj.namespace().as_deref(), &obj.name_any()) {
                    continue;
                }
                let holder = self.op.holder(obj);
                let d = predict(&self.op, obj.clone())
                    .await
                    .map_err(|source| Undecided {
                        object: holder.key(),
                        source,
                    })?;
                let outlook = Decision {
                    status: (),
                    effects: Vec::new(),
                    events: d.events,
                    holds: d.holds,
                    requeue: d.requeue,
                    waiting: d.waiting,
                    next: d.next,
                    report: (),
                };
                all.push((holder, outlook));
            }
            Ok(all)
        })
    }
}

/// The objects of `api` with `labels`.
pub async fn list<K>(api: Api<K>, labels: &str) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.list(&ListParams::default().labels(labels)).await?.items)
}

/// The objects of `api`, or none when the cluster does not serve the kind (its CRD is missing).
pub async fn list_served<K>(api: Api<K>) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}
