//! Reads the objects health checks name, of any kind: the kind is looked up once through API
//! discovery (remembered for a while, failures too), then the objects are read with a GET or a
//! LIST. Every way a read can fail becomes a [`CheckRead`] that says what to do about it: the
//! checks are evaluated by the pure [`crate::common::check`], here, on tokio's blocking pool: the
//! controller's one runtime thread keeps renewing its Lease and deciding other objects while an
//! expression runs, and an evaluation past [`EVAL_TIMEOUT`] fails its check (the thread cannot be
//! stopped; that expression is not started again until it ends). A check's read is reused for a
//! few seconds ([`READ_INTERVAL`]), by every operation that has it: a busy fleet reconciles a
//! Plan as often as its nodes change, and the objects a check names need not be read that often.
//!
//! A check reads only what the health checks' ServiceAccount ([`CheckAccount`]) may read, never
//! with the controller's own rights: before each read the controller asks the API server, by a
//! SubjectAccessReview, whether that account may get or list what the check names, and reads
//! nothing when it may not. Not by impersonation: that would need the right to act as
//! ServiceAccounts, which a stolen controller token could then use as any of them; a review only
//! asks. The account's token is mounted nowhere, so no node holds it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::time::Instant as Clock;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::{Client, Error as KubeError};

use crate::common::check::{CheckRead, HealthCheckSpec, group_of};
use crate::common::selector::Selector;

/// How long a kind's discovery is remembered (a CRD installed later is seen after this).
const KIND_TTL: Duration = Duration::from_secs(60);
/// How long one read may take before the check counts as failing.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a check's read is reused.
pub const READ_INTERVAL: Duration = Duration::from_secs(5);
/// A check without a name reads its objects this many at a time...
const PAGE: u32 = 250;
/// ...and at most this many: past it the check fails, saying so, rather than hold them all.
pub const MAX_LISTED: usize = 1000;
/// How long one evaluation of a check's expression may take before the check fails.
pub const EVAL_TIMEOUT: Duration = Duration::from_secs(2);

type Discovered = Result<(ApiResource, bool), CheckRead>;

/// The ServiceAccount whose rights every health check reads with (`--health-check-account`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckAccount {
    pub namespace: String,
    pub name: String,
}

impl CheckAccount {
    /// The account's name when none is given: deploy/ and the chart create it, with no token
    /// mounted anywhere and only the rules aggregated for health checks.
    pub const DEFAULT_NAME: &str = "system-upgrade-health-checks";

    /// The default account of a controller in `namespace`.
    pub fn in_namespace(namespace: &str) -> CheckAccount {
        CheckAccount {
            namespace: namespace.to_string(),
            name: Self::DEFAULT_NAME.to_string(),
        }
    }

    /// The question "may this account `verb` `resource` (named `name`) in `namespace`?", as the
    /// API server authenticates the account's tokens: its user name and groups.
    fn review(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: Option<&str>,
        verb: &str,
    ) -> SubjectAccessReview {
        let ns = &self.namespace;
        SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!("system:serviceaccount:{ns}:{}", self.name)),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".into(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(resource.group.clone()),
                    version: Some(resource.version.clone()),
                    resource: Some(resource.plural.clone()),
                    namespace: namespace.map(str::to_string),
                    name: name.map(str::to_string),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

impl std::fmt::Display for CheckAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Reads health checks' objects; shared by every operation that has checks.
pub struct CheckReader {
    client: Client,
    account: CheckAccount,
    kinds: Mutex<HashMap<(String, String), (Instant, Discovered)>>,
    /// The last read of each check (by what it reads), and when.
    reads: Mutex<HashMap<String, (Clock, CheckRead)>>,
    /// The checks (what they read and their expression) whose evaluation runs now.
    evaluating: Arc<Mutex<HashSet<String>>>,
    eval_timeout: Duration,
}

impl CheckReader {
    /// A reader whose checks read what `account` may read.
    pub fn new(client: Client, account: CheckAccount) -> Self {
        CheckReader {
            client,
            account,
            kinds: Mutex::new(HashMap::new()),
            reads: Mutex::new(HashMap::new()),
            evaluating: Arc::new(Mutex::new(HashSet::new())),
            eval_timeout: EVAL_TIMEOUT,
        }
    }

    /// What each check names, read now or less than [`READ_INTERVAL`] ago, and judged
    /// ([`CheckRead::Judged`]) when its objects were read.
    pub async fn read_all(&self, checks: &[HealthCheckSpec]) -> Vec<CheckRead> {
        let mut judged = Vec::with_capacity(checks.len());
        for (check, read) in checks.iter().zip(self.read_objects(checks).await) {
            judged.push(self.judge(check, read).await);
        }
        judged
    }

    /// The check's expression over the objects read, on the blocking pool, for at most
    /// `eval_timeout`; another read (refused, not found) is left as it is.
    async fn judge(&self, check: &HealthCheckSpec, read: CheckRead) -> CheckRead {
        if !matches!(read, CheckRead::Objects(_)) {
            return read;
        }
        let key = format!(
            "{} {} {}",
            check.api_version,
            crate::common::check::id(check),
            check.expr
        );
        let secs = self.eval_timeout.as_secs_f64();
        if !lock(&self.evaluating).insert(key.clone()) {
            return CheckRead::Judged(Err(format!(
                "its last evaluation, started more than {secs}s ago, still runs: simplify the expression"
            )));
        }
        let running = Running {
            set: self.evaluating.clone(),
            key,
        };
        let spec = check.clone();
        let evaluation = tokio::task::spawn_blocking(move || {
            // Dropped when the evaluation ends, even by a panic: the check is not stuck "running".
            let _running = running;
            crate::common::check::evaluate(&spec, &read)
        });
        match tokio::time::timeout(self.eval_timeout, evaluation).await {
            Ok(Ok(verdict)) => CheckRead::Judged(verdict),
            Ok(Err(_)) => CheckRead::Judged(Err("its evaluation failed".into())),
            Err(_) => CheckRead::Judged(Err(format!(
                "its evaluation took longer than {secs}s: simplify the expression"
            ))),
        }
    }

    async fn read_objects(&self, checks: &[HealthCheckSpec]) -> Vec<CheckRead> {
        let mut reads = Vec::with_capacity(checks.len());
        for check in checks {
            let key = format!("{} {}", check.api_version, crate::common::check::id(check));
            if let Some(read) = self.recent(&key) {
                reads.push(read);
                continue;
            }
            let read = tokio::time::timeout(READ_TIMEOUT, self.read(check)).await;
            let read = read.unwrap_or_else(|_| {
                CheckRead::Failed(format!("no answer within {}s", READ_TIMEOUT.as_secs()))
            });
            let mut recent = self.reads.lock().unwrap_or_else(|e| e.into_inner());
            // Checks no object has any more are forgotten.
            recent.retain(|_, (at, _)| at.elapsed() < READ_INTERVAL * 12);
            recent.insert(key, (Clock::now(), read.clone()));
            reads.push(read);
        }
        reads
    }

    fn recent(&self, key: &str) -> Option<CheckRead> {
        let recent = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        let (at, read) = recent.get(key)?;
        (at.elapsed() < READ_INTERVAL).then(|| read.clone())
    }

    async fn read(&self, check: &HealthCheckSpec) -> CheckRead {
        let (resource, namespaced) = match self.kind(&check.api_version, &check.kind).await {
            Ok(found) => found,
            Err(read) => return read,
        };
        let ns = check.namespace.as_deref().filter(|_| namespaced);
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let verb = if check.name.is_some() { "get" } else { "list" };
        let target = format!(
            "{} ({}) {}",
            resource.plural,
            if resource.group.is_empty() {
                "core group".to_string()
            } else {
                format!("group {}", resource.group)
            },
            ns.map_or("cluster-wide".to_string(), |n| format!("in namespace {n}"))
        );
        let grant = "grant it with a ClusterRole labelled slipway.dev/aggregate-to-health-checks (docs/plans.md, \"Health checks\")";
        match self.may(&resource, ns, check.name.as_deref(), verb).await {
            Ok(true) => {}
            Ok(false) => {
                return CheckRead::Forbidden(format!(
                    "the health checks' account {} may not {verb} {target}: {grant}",
                    self.account
                ));
            }
            Err(why) => return CheckRead::Failed(why),
        }
        let objects = match &check.name {
            Some(name) => match api.get_opt(name).await {
                Ok(Some(o)) => Ok(vec![o]),
                Ok(None) => {
                    return CheckRead::NotFound(format!("{} {name} not found", check.kind));
                }
                Err(e) => Err((e, "get")),
            },
            None => {
                let selector = Selector::from_label_selector(check.selector.as_ref())
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                match list_bounded(&api, &selector).await {
                    Ok(Some(objects)) => Ok(objects),
                    Ok(None) => {
                        return CheckRead::Failed(format!(
                            "more than {MAX_LISTED} {} match: name one, or narrow the check's namespace or selector",
                            resource.plural
                        ));
                    }
                    Err(e) => Err((e, "list")),
                }
            }
        };
        match objects {
            Ok(objects) => CheckRead::Objects(
                objects
                    .into_iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect(),
            ),
            Err((KubeError::Api(s), verb)) if s.code == 403 => CheckRead::Forbidden(format!(
                "the controller may not {verb} {target}, which its health checks' account may: {grant}"
            )),
            Err((e, verb)) => CheckRead::Failed(format!("cannot {verb} {}: {e}", resource.plural)),
        }
    }

    /// Whether the checks' account may `verb` the objects, as the API server answers; `Err` says
    /// why it could not be asked.
    async fn may(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: Option<&str>,
        verb: &str,
    ) -> Result<bool, String> {
        let review = self.account.review(resource, namespace, name, verb);
        let reviews = Api::<SubjectAccessReview>::all(self.client.clone());
        match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) => Ok(answer.status.is_some_and(|s| s.allowed)),
            Err(KubeError::Api(s)) if s.code == 403 => Err(format!(
                "the controller may not ask whether {} may {verb} {}: grant it create on subjectaccessreviews (authorization.k8s.io)",
                self.account, resource.plural
            )),
            Err(e) => Err(format!(
                "cannot ask whether {} may {verb} {}: {e}",
                self.account, resource.plural
            )),
        }
    }

    /// The resource and scope of a kind, remembered for [`KIND_TTL`].
    async fn kind(&self, api_version: &str, kind: &str) -> Discovered {
        let key = (api_version.to_string(), kind.to_string());
        if let Some((at, found)) = self.lock().get(&key)
            && at.elapsed() < KIND_TTL
        {
            return found.clone();
        }
        let version = api_version.rsplit('/').next().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group_of(api_version), version, kind);
        let found = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => Ok((resource, caps.scope == Scope::Namespaced)),
            Err(KubeError::Api(s)) if s.code == 404 => Err(CheckRead::NotFound(format!(
                "the API server serves no {api_version}: is the CRD of {kind} installed?"
            ))),
            Err(KubeError::Discovery(e)) => Err(CheckRead::NotFound(format!(
                "the API server serves no kind {kind} in {api_version} ({e})"
            ))),
            Err(e) => Err(CheckRead::Failed(format!(
                "cannot look up kind {kind} in {api_version}: {e}"
            ))),
        };
        // A lookup that failed for a moment is not remembered.
        if !matches!(found, Err(CheckRead::Failed(_))) {
            self.lock().insert(key, (Instant::now(), found.clone()));
        }
        found
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (Instant, Discovered)>> {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A check's evaluation in progress: its key leaves the set when this is dropped.
struct Running {
    set: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.set).remove(&self.key);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The objects `selector` matches, a page at a time; `None` past [`MAX_LISTED`].
async fn list_bounded(
    api: &Api<DynamicObject>,
    selector: &str,
) -> Result<Option<Vec<DynamicObject>>, KubeError> {
    let mut objects = Vec::new();
    let mut params = ListParams::default().labels(selector).limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        objects.extend(page.items);
        if objects.len() > MAX_LISTED {
            return Ok(None);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(Some(objects)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::runtime::testing::{Answer, ApiServer, NOT_FOUND, Sent};

    fn check(name: Option<&str>) -> HealthCheckSpec {
        HealthCheckSpec {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ops".into()),
            name: name.map(str::to_string),
            expr: "data.state == 'ok'".into(),
            ..Default::default()
        }
    }

    fn api() -> ApiServer {
        let api = ApiServer::new();
        let resources = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
            "resources": [{"name": "configmaps", "singularName": "configmap", "namespaced": true,
                           "kind": "ConfigMap", "verbs": ["get", "list"]}]});
        api.on("GET", "api/v1", Answer::Json(200, resources));
        api.on("POST", "subjectaccessreviews", review(true));
        api
    }

    fn account() -> CheckAccount {
        CheckAccount::in_namespace("system-upgrade")
    }

    fn review(allowed: bool) -> Answer {
        Answer::Json(
            201,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {}, "status": {"allowed": allowed}}),
        )
    }

    /// A check reads nothing its account may not read, though the controller may: the API server
    /// is asked first, as the account, about exactly what the check names, and the refusal says
    /// which account to grant what. An API server that cannot be asked reads nothing either.
    #[tokio::test(start_paused = true)]
    async fn reads_only_what_the_checks_account_may() {
        let api = api();
        let secret = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gate", "namespace": "ops"}, "data": {"password": "hunter2"}});
        api.on(
            "GET",
            "namespaces/ops/configmaps/gate",
            Answer::Json(200, secret.clone()),
        );
        api.on(
            "GET",
            "namespaces/ops/configmaps",
            Answer::list(vec![secret]),
        );
        api.on("POST", "subjectaccessreviews", review(false));
        let reader = CheckReader::new(api.client(), account());
        let reads = reader.read_all(&[check(Some("gate")), check(None)]).await;
        for (read, verb) in reads.iter().zip(["get", "list"]) {
            let CheckRead::Forbidden(why) = read else {
                panic!("{read:?}");
            };
            assert!(
                why.contains(&format!(
                    "account system-upgrade/system-upgrade-health-checks may not {verb} configmaps (core group) in namespace ops"
                )),
                "{why}"
            );
            assert!(!why.contains("hunter2"), "{why}");
        }
        let sent = api.sent();
        assert!(
            !sent
                .iter()
                .any(|s| s.method == "GET" && s.path.contains("configmaps")),
            "nothing read: {:?}",
            sent.iter().map(Sent::line).collect::<Vec<_>>()
        );
        let asked: Vec<&serde_json::Value> = (sent.iter())
            .filter(|s| s.is("POST", "subjectaccessreviews"))
            .map(|s| &s.body)
            .collect();
        assert_eq!(asked.len(), 2);
        assert_eq!(
            asked[0]["spec"]["user"],
            "system:serviceaccount:system-upgrade:system-upgrade-health-checks"
        );
        assert_eq!(
            asked[0]["spec"]["groups"],
            json!([
                "system:serviceaccounts",
                "system:serviceaccounts:system-upgrade",
                "system:authenticated"
            ])
        );
        assert_eq!(
            asked[0]["spec"]["resourceAttributes"],
            json!({"group": "", "version": "v1", "resource": "configmaps",
                   "namespace": "ops", "name": "gate", "verb": "get"})
        );
        assert_eq!(asked[1]["spec"]["resourceAttributes"]["verb"], "list");
        assert!(asked[1]["spec"]["resourceAttributes"].get("name").is_none());

        tokio::time::advance(READ_INTERVAL).await;
        api.on(
            "POST",
            "subjectaccessreviews",
            Answer::Fail(403, "Forbidden"),
        );
        let reads = reader.read_all(&[check(Some("gate"))]).await;
        let CheckRead::Failed(why) = &reads[0] else {
            panic!("{:?}", reads[0]);
        };
        assert!(why.contains("create on subjectaccessreviews"), "{why}");
        assert!(
            !api.sent()
                .iter()
                .any(|s| s.method == "GET" && s.path.contains("configmaps")),
            "nothing read when the API server cannot be asked"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reads_by_name_and_by_list_and_says_what_went_wrong() {
        let api = api();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gate", "namespace": "ops"}, "data": {"state": "ok"}});
        api.on(
            "GET",
            "namespaces/ops/configmaps/gate",
            Answer::Json(200, cm.clone()),
        );
        api.on("GET", "namespaces/ops/configmaps", Answer::list(vec![cm]));
        let reader = CheckReader::new(api.client(), account());
        let reads = reader.read_all(&[check(Some("gate")), check(None)]).await;
        for read in &reads {
            assert_eq!(crate::common::check::evaluate(&check(None), read), Ok(()));
        }
        api.on("GET", "namespaces/ops/configmaps/gate", NOT_FOUND);
        api.on(
            "GET",
            "namespaces/ops/configmaps",
            Answer::Fail(403, "Forbidden"),
        );
        let again = reader.read_all(&[check(Some("gate")), check(None)]).await;
        assert_eq!(again, reads, "read a moment ago: not read again");
        tokio::time::advance(READ_INTERVAL).await;
        let reads = reader.read_all(&[check(Some("gate")), check(None)]).await;
        assert_eq!(
            reads[0],
            CheckRead::NotFound("ConfigMap gate not found".into())
        );
        let CheckRead::Forbidden(why) = &reads[1] else {
            panic!("{:?}", reads[1]);
        };
        assert!(
            why.contains("the controller may not list configmaps (core group) in namespace ops"),
            "{why}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_kind_names_its_api_version() {
        let api = api();
        let reader = CheckReader::new(api.client(), account());
        let mut c = check(Some("gate"));
        c.kind = "Gadget".into();
        let reads = reader.read_all(&[c]).await;
        let CheckRead::NotFound(why) = &reads[0] else {
            panic!("{:?}", reads[0]);
        };
        assert!(why.contains("no kind Gadget in v1"), "{why}");
        c = check(Some("x"));
        c.api_version = "ceph.rook.io/v1".into();
        api.on("GET", "apis/ceph.rook.io/v1", NOT_FOUND);
        let reads = reader.read_all(&[c]).await;
        assert!(
            matches!(&reads[0], CheckRead::NotFound(w) if w.contains("is the CRD of ConfigMap installed")),
            "{:?}",
            reads[0]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_is_read_a_page_at_a_time_and_never_past_its_bound() {
        let api = api();
        let cm = |i: usize| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("gate-{i}"), "namespace": "ops"},
                   "data": {"state": "ok"}})
        };
        // An API server that always has another page: the read stops at the bound.
        let page = json!({"apiVersion": "v1", "kind": "ConfigMapList",
            "metadata": {"continue": "more"},
            "items": (0..PAGE as usize).map(cm).collect::<Vec<_>>()});
        api.on("GET", "namespaces/ops/configmaps", Answer::Json(200, page));
        let reader = CheckReader::new(api.client(), account());
        let reads = reader.read_all(&[check(None)]).await;
        let CheckRead::Failed(why) = &reads[0] else {
            panic!("{:?}", reads[0]);
        };
        assert!(why.starts_with("more than 1000 configmaps match"), "{why}");
        let lists: Vec<String> = (api.sent().into_iter())
            .filter(|s| s.method == "GET" && s.path.ends_with("namespaces/ops/configmaps"))
            .map(|s| s.query)
            .collect();
        assert_eq!(lists.len(), MAX_LISTED / PAGE as usize + 1);
        assert!(lists.iter().all(|q| q.contains("limit=250")), "{lists:?}");
        assert!(
            lists[1..].iter().all(|q| q.contains("continue=more")),
            "{lists:?}"
        );
        // The last page says no more: every object is read.
        tokio::time::advance(READ_INTERVAL).await;
        api.on(
            "GET",
            "namespaces/ops/configmaps",
            Answer::list((0..3).map(cm).collect()),
        );
        let reads = reader.read_all(&[check(None)]).await;
        assert_eq!(
            reads[0],
            CheckRead::Judged(Ok(())),
            "every object read and judged"
        );
    }

    /// The worst an object can make an affordable expression cost: the runtime's one thread goes
    /// on (a task beside it keeps ticking), the check fails once the evaluation is over its time,
    /// and the same evaluation is not started again while it still runs.
    #[test]
    fn a_slow_evaluation_fails_its_check_and_stalls_nothing() {
        // The controller's runtime: one thread (src/cli/process.rs).
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let api = api();
            // One comprehension (within the static budget), over a list the object makes long.
            let items: Vec<i64> = (0..400_000).collect();
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "gate", "namespace": "ops"}, "items": items});
            api.on(
                "GET",
                "namespaces/ops/configmaps/gate",
                Answer::Json(200, cm),
            );
            let mut reader = CheckReader::new(api.client(), account());
            reader.eval_timeout = Duration::from_millis(50);
            let mut slow = check(Some("gate"));
            slow.expr = "items.all(x, x >= 0 && x < 1000000 && x != 7000000)".into();
            let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let ticker = tokio::spawn({
                let ticks = ticks.clone();
                async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
            let first = reader.read_all(std::slice::from_ref(&slow)).await;
            let CheckRead::Judged(Err(why)) = &first[0] else {
                panic!("{:?}", first[0]);
            };
            assert!(why.contains("took longer than 0.05s"), "{why}");
            let again = reader.read_all(std::slice::from_ref(&slow)).await;
            let CheckRead::Judged(Err(why)) = &again[0] else {
                panic!("{:?}", again[0]);
            };
            assert!(why.contains("still runs"), "{why}");
            // The runtime's thread was free meanwhile.
            assert!(ticks.load(std::sync::atomic::Ordering::Relaxed) >= 1);
            ticker.abort();
        });
    }
}
