//! deploy/'s RBAC, proven against a real API server rather than guessed.
//!
//! Each scene installs `deploy/` (`kubectl apply -k`, or an overlay of it with one component),
//! runs `slipway run` as a child process with a fresh token of the `system-upgrade-controller`
//! ServiceAccount (so with exactly the rights the install grants, and the environment of its
//! ConfigMap), drives the controller through every path that needs a right, then reads the API
//! server's audit log (tests/cluster logs slipway's ServiceAccounts' requests only), keeps the
//! requests made with its token (the token's `jti`), and checks, request by request and rule by
//! rule:
//!
//! - the controller's account holds none of the Jobs' roles (the drainer ClusterRole and the
//!   `system-upgrade-jobs` Role), and the Jobs' account, `system-upgrade`, holds nothing else:
//!   with its token no pod, Job or Secret can be created or read;
//! - no request was refused, and the controller logged no 403/forbidden;
//! - every request is allowed by the controller's own roles;
//! - every (rule, resource, verb) of the roles under proof was used at least once;
//! - a ClusterRole right on a namespaced resource was used outside the controller's namespace
//!   (otherwise it belongs in the Role), and no Role right repeats a ClusterRole right.
//!
//! The scenes:
//! - deploy/ alone ([`deploy_grants_exactly_what_a_rollout_uses`]): a Job that fails (event), a
//!   Plan edit that deletes and recreates that Job, a rollout over its nodes with cordon (node
//!   patches), a node added afterwards, which repeats the `Complete` event (an event series is a
//!   patch), a Plan with `spec.reboot` and a health gate (a reboot pod created and deleted,
//!   health-gate pods listed in all namespaces; the test changes the node's boot ID), a
//!   DisruptionBudget's ledger, and a Lease renewal; then the checker itself is shown to catch
//!   both kinds of mistake;
//! - each component on top of deploy/: maintenance (a NodeMaintenance through a foreign Lease and
//!   a blocking PodDisruptionBudget), reboot-policy (a RebootPolicy's reboot through a blocking
//!   budget), kairos (a NodeOpUpgrade through a blocking budget, its Job and reboot), each proving
//!   its component's rights used and sufficient; and the reboot agent's (its ServiceAccount may
//!   get and patch Nodes only, and the admission policy keeps it to its own Node's annotations).
//!
//! Every scene runs on the RBAC proof's own cluster, one at a time (not the installs', whose real
//! nodes would take the install's controller pod from kwok): the install has fixed names
//! ([`Install`] removes it when the scene ends), the ServiceAccount's bindings must be those of
//! the install under proof, and each scene's controller or DaemonSet reaches every node or a
//! cluster-wide kind. The audit log itself would allow scenes side by side: each scene's requests
//! are told apart by its token.
//!
//! What cannot be proven here: the Jobs' roles (`kubectl cordon`/`drain`, a prepare step's
//! reads, inside the Jobs). kwok plays the kubelet, so Job pods never run a process; they just
//! succeed. The scenes on real nodes (`real::`) prove them: the install's controller and its Jobs,
//! every request of the ServiceAccount granted.
//!
//! Leader election (Lease rights) is exercised when `slipway run --help` offers `--leader-elect`;
//! otherwise the two Lease rules are the only allowed-unused rights, and the test says so.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::controller::ControllerProcess;
use crate::support::install::{self, Install};
use crate::support::plans::{condition_reason, is_complete};
use crate::support::scene::{POOL_LABEL, Scene, SceneBuilder};
use anyhow::anyhow;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::node::budget::DisruptionBudget;
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;

const NS: &str = install::NS;
/// The controller's ServiceAccount.
const SA: &str = "system-upgrade-controller";
/// The upgrade Jobs' ServiceAccount, which Plans name: the drainer role and the Jobs' Role only.
const JOBS_SA: &str = "system-upgrade";
const CONTROLLER: &str = "system-upgrade-controller";
/// The role deploy/ binds to the ServiceAccount for the upgrade Jobs, not for the controller.
const DRAINER_ROLE: &str = "system-upgrade-controller-drainer";
/// The Role for the Jobs' own scripts (an agent Plan's prepare step reads the server Plan); like
/// the drainer role, for the Jobs, and proven on real nodes (`real::`).
const JOBS_ROLE: &str = "system-upgrade-jobs";
/// The account health checks read as, and the one role it holds (filled by aggregation).
const CHECKS_SA: &str = "system-upgrade-health-checks";
const CHECKS_ROLE: &str = "system-upgrade-controller-health-checks";
const PLAN: &str = "rbac";
/// The ClusterRole, Role and bindings of deploy/components/maintenance.
const MAINTENANCE_ROLE: &str = "system-upgrade-controller-maintenance";
const LEASES: &str = "medik8s-leases";
/// The ClusterRole, Role and bindings of deploy/components/reboot-policy.
const POLICY_ROLE: &str = "system-upgrade-controller-reboot-policy";
/// The ClusterRole and binding of deploy/components/kairos.
const KAIROS_ROLE: &str = "system-upgrade-controller-kairos";
/// The roles of the components whose controllers the scenes run, on top of deploy/'s.
const COMPONENT_ROLES: [&str; 3] = [MAINTENANCE_ROLE, POLICY_ROLE, KAIROS_ROLE];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One API request of the controller, from the audit log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Request {
    group: String,
    /// `resource` or `resource/subresource`
    resource: String,
    verb: String,
    namespace: Option<String>,
    name: Option<String>,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " named {name}")?;
        }
        Ok(())
    }
}

/// A rule of one of the controller's roles; `namespace` is set for a Role's rules.
#[derive(Debug, Clone)]
struct Grant {
    role: String,
    namespace: Option<String>,
    rule: PolicyRule,
}

impl Grant {
    fn allows(&self, r: &Request) -> bool {
        let rule = &self.rule;
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        if let Some(ns) = &self.namespace
            && r.namespace.as_ref() != Some(ns)
        {
            return false;
        }
        let names = rule.resource_names.as_deref().unwrap_or_default();
        // The authorizer never knows the name of a create.
        let name = if r.verb == "create" {
            None
        } else {
            r.name.as_deref()
        };
        any(rule.api_groups.as_deref().unwrap_or_default(), &r.group)
            && any(rule.resources.as_deref().unwrap_or_default(), &r.resource)
            && any(&rule.verbs, &r.verb)
            && (names.is_empty() || name.is_some_and(|n| names.iter().any(|x| x == n)))
    }

    /// Every (group, resource, verb) this rule grants.
    fn tuples(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for g in self.rule.api_groups.iter().flatten() {
            for res in self.rule.resources.iter().flatten() {
                for v in &self.rule.verbs {
                    out.push((g.clone(), res.clone(), v.clone()));
                }
            }
        }
        out
    }

    fn describe(&self) -> String {
        let scope = match &self.namespace {
            Some(ns) => format!("Role {ns}/{}", self.role),
            None => format!("ClusterRole {}", self.role),
        };
        let names = self
            .rule
            .resource_names
            .as_ref()
            .map(|n| format!(" resourceNames {n:?}"))
            .unwrap_or_default();
        format!("{scope}{names}")
    }
}

/// `core/pods`, `batch/jobs`: a group and resource as people write them.
fn group_resource(group: &str, resource: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("{group}/{resource}")
}

/// Rights the test cannot exercise, each with the reason it is granted anyway:
/// (API group, resource, verb, why).
const ALLOWED_UNUSED: &[(&str, &str, &str, &str)] = &[
    (
        "",
        "nodes",
        "list",
        "slipway streams the Node watch's initial list (WatchList) where the API server does, as \
         this one does; a server that cannot (WatchList off, or before Kubernetes 1.32) is listed \
         page by page, which needs the right.",
    ),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "watch",
        "slipway waits for its CRD to be Established with a list, then a watch only if it is not \
     Established yet: when slipway creates the CRD itself (a cluster without it). Here the CRD \
     exists, and the shared test cluster cannot delete it. Without the right, that first start \
     would fail and restart.",
    ),
];

/// Problems with `grants` given the controller's `requests`; empty means least privilege, proven.
/// `may_be_unused(grant, group, resource, verb)` says which rights need not be used. `component`:
/// the role of a component on top of deploy/; deploy/'s own Role rights are not reported as
/// repeated by the component's ClusterRole (deploy/ needs them without the component).
fn audit_rbac(
    grants: &[Grant],
    requests: &BTreeSet<Request>,
    may_be_unused: &dyn Fn(&Grant, &str, &str, &str) -> bool,
    component: Option<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for r in requests {
        if !grants.iter().any(|g| g.allows(r)) {
            problems.push(format!(
                "the controller made a request its roles do not grant: {r}"
            ));
        }
    }
    for g in grants.iter().filter(|g| g.namespace.is_some()) {
        for (group, resource, verb) in g.tuples() {
            let base_under_component =
                |c: &Grant| component.is_some_and(|r| c.role == r && g.role != r);
            let also = grants.iter().find(|c| {
                c.namespace.is_none()
                    && !base_under_component(c)
                    && c.rule.resource_names.as_ref().is_none_or(Vec::is_empty)
                    && c.tuples()
                        .contains(&(group.clone(), resource.clone(), verb.clone()))
            });
            if let Some(c) = also {
                problems.push(format!(
                    "{} grants {verb} {}, which {} already grants everywhere",
                    g.describe(),
                    group_resource(&group, &resource),
                    c.describe()
                ));
            }
        }
    }
    for g in grants {
        for list in [
            g.rule.api_groups.as_deref(),
            g.rule.resources.as_deref(),
            Some(&g.rule.verbs[..]),
        ] {
            if list.unwrap_or_default().iter().any(|x| x == "*") {
                problems.push(format!("{} uses a wildcard: {:?}", g.describe(), g.rule));
            }
        }
        if g.rule.non_resource_urls.is_some() {
            problems.push(format!("{} grants non-resource URLs", g.describe()));
        }
        for (group, resource, verb) in g.tuples() {
            if may_be_unused(g, &group, &resource, &verb) {
                continue;
            }
            let single = Grant {
                rule: PolicyRule {
                    api_groups: Some(vec![group.clone()]),
                    resources: Some(vec![resource.clone()]),
                    verbs: vec![verb.clone()],
                    ..g.rule.clone()
                },
                ..g.clone()
            };
            let used: Vec<&Request> = requests.iter().filter(|r| single.allows(r)).collect();
            let what = format!("{verb} {}", group_resource(&group, &resource));
            if used.is_empty() {
                problems.push(format!("{} grants {what}, never used", g.describe()));
            } else if g.namespace.is_none()
                && used.iter().all(|r| r.namespace.as_deref() == Some(NS))
            {
                problems.push(format!(
                    "{} grants {what} cluster-wide, used only in namespace {NS}: move it to the Role",
                    g.describe()
                ));
            }
        }
    }
    problems
}

/// The text of the audit log `path` and of its rotated files beside it (`audit-<time>.log`,
/// older first), so that a rotation during a scene loses nothing.
fn audit_text(path: &Path) -> String {
    let dir = path.parent().expect("the audit log's directory");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("audit-") && name.ends_with(".log")
        })
        .collect();
    files.sort();
    files.push(path.to_path_buf());
    let mut text = String::new();
    for file in files {
        // A rotated file may be removed (at most one is kept) while it is listed.
        match std::fs::read_to_string(&file) {
            Ok(t) => text.push_str(&t),
            Err(e) if file != path => eprintln!("e2e_rbac: {}: {e}", file.display()),
            Err(e) => panic!("reading the audit log {}: {e}", file.display()),
        }
    }
    text
}

/// The audit log of one controller: the requests made with the token whose `jti` is given.
struct Audit<'a> {
    log: &'a Path,
    jti: &'a str,
}

impl Audit<'_> {
    /// Waits until the controller has looked up the PodDisruptionBudgets of `namespace` (it does
    /// after an eviction there is refused, to say which budget refused): the rights of both are
    /// then in the evidence.
    async fn the_refusing_budget_looked_up(&self, controller: &ControllerProcess, namespace: &str) {
        support::wait_for(
            "the refusing PodDisruptionBudget looked up",
            Duration::from_secs(60),
            || async {
                assert_not_refused(controller);
                let (requests, _, _) = read_audit_log(self.log, self.jti);
                let looked_up = requests.iter().any(|r| {
                    (r.group.as_str(), r.resource.as_str(), r.verb.as_str())
                        == ("policy", "poddisruptionbudgets", "list")
                        && r.namespace.as_deref() == Some(namespace)
                });
                match looked_up {
                    true => Ok(()),
                    false => Err(anyhow!("{} requests, no such list yet", requests.len())),
                }
            },
        )
        .await;
    }
}

/// The controller's requests in the audit log: those made with the token whose `jti` is given.
/// Returns the requests and the refusals (as text).
fn read_audit_log(path: &Path, jti: &str) -> (BTreeSet<Request>, Vec<String>, usize) {
    let text = audit_text(path);
    let credential = format!("JTI={jti}");
    let mut requests = BTreeSet::new();
    let mut refused = Vec::new();
    let mut events = 0;
    // Only the lines that name the token are parsed: the scenes poll a log of every run.
    for line in text.lines().filter(|l| l.contains(&credential)) {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let ours = ev["user"]["extra"]["authentication.kubernetes.io/credential-id"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|i| i.as_str() == Some(credential.as_str())));
        if !ours {
            continue;
        }
        events += 1;
        let decision = ev["annotations"]["authorization.k8s.io/decision"].as_str();
        let code = ev["responseStatus"]["code"].as_i64();
        if decision != Some("allow") || code == Some(403) {
            refused.push(format!(
                "{} {} -> {code:?} {decision:?} {}",
                ev["verb"], ev["requestURI"], ev["annotations"]
            ));
        }
        let obj = &ev["objectRef"];
        let Some(resource) = obj["resource"].as_str() else {
            continue; // a non-resource URL (discovery): granted to every authenticated user
        };
        let resource = match obj["subresource"].as_str() {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        let text = |v: &Value| v.as_str().map(str::to_string);
        requests.insert(Request {
            group: obj["apiGroup"].as_str().unwrap_or("").to_string(),
            resource,
            verb: ev["verb"].as_str().unwrap_or("").to_string(),
            namespace: text(&obj["namespace"]),
            name: text(&obj["name"]),
        });
    }
    (requests, refused, events)
}

/// The rules bound to the ServiceAccount `sa` of the install's namespace, by ClusterRoleBindings
/// and by RoleBindings in any namespace.
async fn bound_rules(client: &kube::Client, sa: &str) -> Vec<Grant> {
    let is_sa = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(NS)
        })
    };
    let mut grants = Vec::new();
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    let crbs = Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list ClusterRoleBindings");
    for b in crbs.items.iter().filter(|b| is_sa(&b.subjects)) {
        assert_eq!(b.role_ref.kind, "ClusterRole");
        let role = cluster_roles
            .get(&b.role_ref.name)
            .await
            .expect("bound ClusterRole");
        for rule in role.rules.unwrap_or_default() {
            grants.push(Grant {
                role: b.role_ref.name.clone(),
                namespace: None,
                rule,
            });
        }
    }
    // Every namespace: the maintenance component binds a Role in the medik8s Lease namespace.
    let rbs = Api::<RoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list RoleBindings");
    for b in rbs.items.iter().filter(|b| is_sa(&b.subjects)) {
        let ns = b
            .metadata
            .namespace
            .clone()
            .expect("a RoleBinding is namespaced");
        let rules = match b.role_ref.kind.as_str() {
            "Role" => Api::<Role>::namespaced(client.clone(), &ns)
                .get(&b.role_ref.name)
                .await
                .expect("bound Role")
                .rules
                .unwrap_or_default(),
            _ => cluster_roles
                .get(&b.role_ref.name)
                .await
                .expect("ClusterRole bound by a RoleBinding")
                .rules
                .unwrap_or_default(),
        };
        for rule in rules {
            grants.push(Grant {
                role: b.role_ref.name.clone(),
                namespace: Some(ns.clone()),
                rule,
            });
        }
    }
    grants
}

/// The controller's rules and the Jobs' rules, each bound to its own ServiceAccount: the
/// controller holds none of the Jobs' roles, and the Jobs hold nothing but theirs.
async fn controller_and_job_rules(client: &kube::Client) -> (Vec<Grant>, Vec<Grant>) {
    let controller = bound_rules(client, SA).await;
    let jobs = bound_rules(client, JOBS_SA).await;
    assert!(!controller.is_empty(), "deploy/ binds no role to {NS}/{SA}");
    let job_roles = [DRAINER_ROLE, JOBS_ROLE];
    let shared: BTreeSet<&str> = (controller.iter())
        .map(|g| g.role.as_str())
        .filter(|r| job_roles.contains(r))
        .collect();
    assert!(
        shared.is_empty(),
        "{NS}/{SA} holds the Jobs' roles {shared:?}"
    );
    let foreign: BTreeSet<&str> = (jobs.iter())
        .map(|g| g.role.as_str())
        .filter(|r| !job_roles.contains(r))
        .collect();
    assert!(
        foreign.is_empty(),
        "{NS}/{JOBS_SA}, the Jobs' account, holds more than the Jobs' roles: {foreign:?}"
    );
    // The health checks' account holds what is aggregated for checks, and nothing else.
    let checks: BTreeSet<String> = (bound_rules(client, CHECKS_SA).await.into_iter())
        .map(|g| g.role)
        .filter(|r| r != CHECKS_ROLE)
        .collect();
    assert!(
        checks.is_empty(),
        "{NS}/{CHECKS_SA}, the health checks' account, holds more than {CHECKS_ROLE}: {checks:?}"
    );
    (controller, jobs)
}

/// The `jti` claim of a ServiceAccount token (a JWT), which the audit log records per request.
fn token_jti(token: &str) -> String {
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let mut bytes = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in payload.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    let claims: Value = serde_json::from_slice(&bytes).expect("JWT claims are JSON");
    claims["jti"]
        .as_str()
        .expect("the token has a jti (ServiceAccountTokenJTI)")
        .to_string()
}

fn help_of_run() -> String {
    let out = support::process::slipway()
        .args(["run", "--help"])
        .output()
        .expect("slipway run --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `slipway run` with the ServiceAccount's kubeconfig; stopped with SIGTERM (so a lease is
/// released as in a pod), killed if it does not stop.
fn start_controller(
    kubeconfig: &Path,
    env: &BTreeMap<String, String>,
    args: &[String],
) -> ControllerProcess {
    ControllerProcess::builder(kubeconfig)
        .args(args)
        .envs(env)
        .stop_on_drop()
        .start()
}

/// Lines of the controller's log that report a refused request.
fn refusals(controller: &ControllerProcess) -> Vec<String> {
    controller
        .log()
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("forbidden") || l.contains(" 403")
        })
        .map(str::to_string)
        .collect()
}

/// Fails the test at once when the controller was refused a request: a missing right shows
/// here long before a wait for the rollout would time out.
fn assert_not_refused(controller: &ControllerProcess) {
    let refusals = refusals(controller);
    assert!(
        refusals.is_empty(),
        "the controller was refused requests (a right deploy/ lacks):\n{}",
        refusals.join("\n")
    );
}

async fn wait_plan(
    api: &Api<Plan>,
    controller: &ControllerProcess,
    what: &str,
    done: impl Fn(&Plan) -> bool,
) -> Plan {
    support::wait_for(what, Duration::from_secs(120), || async {
        assert_not_refused(controller);
        let plan = api.get(PLAN).await?;
        if done(&plan) {
            Ok(plan)
        } else {
            Err(anyhow!("status: {}", serde_json::to_string(&plan.status)?))
        }
    })
    .await
}

/// A scene on the RBAC proof's cluster (one at a time there) with deploy/ installed as a user would
/// (with `component`, an overlay of deploy/ with it): its namespace and ClusterRoles have fixed
/// names, and the audit needs the rights bound to the ServiceAccount to be deploy/'s and the
/// component's only. The install is removed first when the scene ends (fields drop in order).
struct Deployed {
    _install: Install,
    s: Scene,
}

async fn deployed(scene: SceneBuilder, component: Option<&str>) -> Option<Deployed> {
    let s = scene.own_cluster("rbac").start().await?;
    install::wait_for_earlier_removal(&s.cluster).await;
    let mut install = Install::new(&s.cluster).await;
    match component {
        None => install_deploy_as_a_user_would(&s, &mut install).await,
        Some(component) => apply_with_component(&s.cluster, &mut install, component).await,
    }
    Some(Deployed {
        _install: install,
        s,
    })
}

/// The label that sorts a scene's nodes into the Plans' pools.
const ROLE_LABEL: &str = "slipway.test/rbac";

/// deploy/ alone: a Plan's rollout through every path that needs a right, with a DisruptionBudget
/// whose ledger the controller keeps, under leader election; every right of deploy/'s roles used,
/// none missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_grants_exactly_what_a_rollout_uses() {
    let scene = Scene::new("rbac").nodes(2).label(ROLE_LABEL, "rollout");
    let Some(mut d) = deployed(scene, None).await else {
        return;
    };
    let started = Instant::now();
    let audit_log = audit_log_of(&d.s.cluster);
    let client = d.s.client.clone();

    // Run slipway as the Deployment would: its ServiceAccount, its ConfigMap, its downward API.
    let (jti, kubeconfig) = service_account_kubeconfig(&d.s.cluster, "slipway-rbac").await;

    // A DisruptionBudget over the rollout's nodes that limits nothing: the controller reads it
    // and keeps its ledger (the status patch its ClusterRole grants).
    let budgets = Api::<DisruptionBudget>::all(client.clone());
    let budget_name = d.s.name("ledger");
    let budget: DisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "DisruptionBudget",
        "metadata": {"name": budget_name},
        "spec": {"maxUnavailable": "100%",
                 "nodeSelector": {"matchLabels": {POOL_LABEL: d.s.pool, ROLE_LABEL: "rollout"}}},
    }))
    .expect("a DisruptionBudget");
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .expect("create the budget");
    let env = controller_env(&repo().join("deploy"), &d.s.nodes[0]);
    let leader_election = help_of_run().contains("--leader-elect");
    let mut controller = start_controller(&kubeconfig, &env, &controller_args());
    let plans = Api::<Plan>::namespaced(client.clone(), NS);

    a_failed_job_then_a_fixed_plan(&controller, &plans, &d.s.pool).await;
    a_new_node_makes_the_complete_event_a_series(&mut d.s, &controller, &plans).await;
    a_reboot_behind_a_health_gate(&mut d.s, &controller, &plans).await;
    let check_grant = a_plan_behind_a_granted_health_check(&d.s, &controller, &plans).await;
    support::wait_for("the budget's ledger", Duration::from_secs(30), || async {
        let b = budgets.get(&budget_name).await?;
        match b.status.is_some_and(|s| s.nodes == 3) {
            true => Ok(()),
            false => Err(anyhow!("no ledger of the pool yet")),
        }
    })
    .await;
    if leader_election {
        // A renewal (an update: the holder renews unread) besides the acquisition (get, create),
        // before the release.
        a_lease_renewal(&client).await;
    }
    let peak = controller.peak_rss_kib();
    controller.stop();
    let evidence = Evidence::read(&client, &audit_log, &jti, leader_election).await;
    evidence.report(peak, started);
    evidence.assert_least_privilege(&controller);
    evidence.the_checker_catches_both_kinds_of_mistake();
    the_jobs_token_runs_nothing_and_reads_no_secret(&d.s.cluster).await;
    let _ = Api::<ClusterRole>::all(client.clone())
        .delete(&check_grant, &Default::default())
        .await;
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(controller.log_path());
}

/// What root on a node being upgraded gets from the Job's token (read from the kubelet's volume
/// directory): tried with a token of the Jobs' ServiceAccount, no pod or Job is created anywhere
/// and no Secret is read; what a Job's `kubectl drain` needs (listing and evicting pods, patching
/// a Node) is still allowed.
async fn the_jobs_token_runs_nothing_and_reads_no_secret(cluster: &support::Cluster) {
    let (_, kubeconfig) = kubeconfig_of(cluster, JOBS_SA, "slipway-rbac-jobs").await;
    let as_job = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("the Jobs' config"),
    )
    .expect("the Jobs' client");
    let _ = std::fs::remove_file(&kubeconfig);
    let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{NS}/{JOBS_SA} may {what}: {other:?}"),
    };
    let pod_spec = json!({"hostPID": true, "nodeName": "any",
                          "containers": [{"name": "c", "image": "busybox",
                                          "securityContext": {"privileged": true}}]});
    let privileged: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stolen-token"},
        "spec": pod_spec,
    }))
    .expect("a pod");
    for ns in [NS, "kube-system", "default"] {
        let pods = Api::<Pod>::namespaced(as_job.clone(), ns);
        let created = pods.create(&PostParams::default(), &privileged).await;
        forbidden(&format!("create a pod in {ns}"), created.map(|_| ()));
        let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(as_job.clone(), ns);
        let job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "stolen-token"},
            "spec": {"template": {"spec": pod_spec.clone()}},
        }));
        let created = jobs
            .create(&PostParams::default(), &job.expect("a Job"))
            .await;
        forbidden(&format!("create a Job in {ns}"), created.map(|_| ()));
        let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(as_job.clone(), ns);
        let listed = secrets.list(&ListParams::default()).await;
        forbidden(&format!("list Secrets in {ns}"), listed.map(|_| ()));
    }
    let patched = Api::<Plan>::namespaced(as_job.clone(), NS)
        .patch(
            PLAN,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"concurrency": 100}})),
        )
        .await;
    forbidden("edit a Plan", patched.map(|_| ()));
    // What the Jobs' drain uses stays allowed.
    Api::<Pod>::all(as_job.clone())
        .list(&ListParams::default().limit(1))
        .await
        .expect("the Jobs' account lists pods (kubectl drain)");
}

/// Waits until the leader has renewed its Lease (a renewal moves `renewTime` past
/// `acquireTime`).
async fn a_lease_renewal(client: &kube::Client) {
    let leases = Api::<Lease>::namespaced(client.clone(), NS);
    support::wait_for(
        "a renewal of the Lease",
        Duration::from_secs(60),
        || async {
            let spec = leases.get(CONTROLLER).await?.spec.unwrap_or_default();
            match spec.renew_time.is_some() && spec.renew_time != spec.acquire_time {
                true => Ok(()),
                false => Err(anyhow!("{spec:?}")),
            }
        },
    )
    .await;
}

/// `slipway run`'s arguments: the metrics server on a free port, where it has the flag.
fn controller_args() -> Vec<String> {
    match help_of_run().contains("--metrics-addr") {
        true => vec![
            "--metrics-addr".to_string(),
            format!("127.0.0.1:{}", support::free_port()),
        ],
        false => Vec::new(),
    }
}

/// The API server's audit log of the cluster (tests/cluster/up.sh logs the requests of the
/// ServiceAccount there).
fn audit_log_of(cluster: &support::Cluster) -> PathBuf {
    let audit_log = cluster
        .kubeconfig_path()
        .parent()
        .expect("cluster directory")
        .join("logs/audit.log");
    assert!(
        audit_log.is_file(),
        "{} does not exist: this test needs a cluster started by tests/cluster/up.sh of this \
         tree, which audits the requests of {NS}/{SA}",
        audit_log.display()
    );
    audit_log
}

/// Installs deploy/ as a user would, and checks where its controller's pod lands.
async fn install_deploy_as_a_user_would(s: &Scene, install: &mut Install) {
    let client = &s.client;
    install
        .apply_kustomization(&s.cluster, &repo().join("deploy"))
        .await;
    // kwok plays the pod, so this checks scheduling only: affinity to a control-plane node,
    // tolerations and the namespace's pod security level admit it.
    let deployments = Api::<Deployment>::namespaced(client.clone(), NS);
    support::wait_for(
        "the Deployment to be available",
        Duration::from_secs(60),
        || async {
            let d = deployments.get(CONTROLLER).await?;
            let available = d.status.as_ref().and_then(|s| s.available_replicas);
            if available == Some(1) {
                Ok(())
            } else {
                Err(anyhow!("status {:?}", d.status))
            }
        },
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("upgrade.cattle.io/controller={CONTROLLER}")))
        .await
        .expect("controller pods");
    for pod in &pods.items {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("scheduled");
        let labels = Api::<Node>::all(client.clone())
            .get(&node)
            .await
            .expect("node")
            .metadata
            .labels
            .unwrap_or_default();
        assert!(
            labels.contains_key("node-role.kubernetes.io/control-plane"),
            "the controller pod runs on {node}, not a control-plane node"
        );
    }
}

/// The controller's environment as deploy/ gives it: its ConfigMap, and the downward API.
fn controller_env(deploy: &Path, node: &str) -> BTreeMap<String, String> {
    let config_map: ConfigMap = serde_saphyr::from_str(
        &std::fs::read_to_string(deploy.join("configmap.yaml")).expect("deploy/configmap.yaml"),
    )
    .expect("parse the ConfigMap");
    let mut env: BTreeMap<String, String> = config_map.data.unwrap_or_default();
    env.insert("SYSTEM_UPGRADE_CONTROLLER_NAME".into(), CONTROLLER.into());
    env.insert("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE".into(), NS.into());
    env.insert(
        "SYSTEM_UPGRADE_CONTROLLER_NODE_NAME".into(),
        node.to_string(),
    );
    env.insert("POD_NAME".into(), "slipway-rbac-test".into());
    // A failed Job fails at once instead of after 99 retries.
    env.insert("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT".into(), "0".into());
    env
}

/// A Job that fails: JobFailed (event create, plans/status patch, job create).
async fn a_failed_job_then_a_fixed_plan(
    controller: &ControllerProcess,
    plans: &Api<Plan>,
    pool: &str,
) {
    let plan: Plan = serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {PLAN}
  labels:
    {fail}: "true"
spec:
  concurrency: 1
  cordon: true
  version: v1.30.1+k3s1
  serviceAccountName: {JOBS_SA}
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
      {ROLE_LABEL}: rollout
  upgrade:
    image: rancher/k3s-upgrade
"#,
        fail = support::FAIL_LABEL
    ))
    .expect("plan");
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create plan");
    wait_plan(plans, controller, "the Job to fail", |p| {
        condition_reason(p, "Complete").as_deref() == Some("JobFailed")
    })
    .await;

    // 2. Editing the Plan deletes the failed Job (job delete) and rolls out (node patches).
    plans
        .patch(
            PLAN,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {support::FAIL_LABEL: null}}})),
        )
        .await
        .expect("fix the plan");
    wait_plan(plans, controller, "the plan to complete", is_complete).await;
}

/// A new node re-opens the Plan; completing again repeats the Complete event, which the
/// event recorder patches into a series (event patch).
async fn a_new_node_makes_the_complete_event_a_series(
    s: &mut Scene,
    controller: &ControllerProcess,
    plans: &Api<Plan>,
) {
    let more = s.add_nodes("rbac", 1, &[(ROLE_LABEL, "rollout")]).await;
    let client = &s.client;
    let node_api = Api::<Node>::all(client.clone());
    support::wait_for(
        "the plan to complete on the new node",
        Duration::from_secs(120),
        || async {
            assert_not_refused(controller);
            let plan = plans.get(PLAN).await?;
            let hash = plan.status.as_ref().and_then(|s| s.latest_hash.clone());
            let label = node_api
                .get(&more[0])
                .await?
                .metadata
                .labels
                .unwrap_or_default()
                .remove(&format!("plan.upgrade.cattle.io/{PLAN}"));
            if is_complete(&plan) && hash.is_some() && label == hash {
                Ok(())
            } else {
                Err(anyhow!(
                    "node label {label:?}, plan status {:?}",
                    plan.status
                ))
            }
        },
    )
    .await;
    let events = Api::<Event>::namespaced(client.clone(), NS);
    support::wait_for(
        "the Complete event to become a series",
        Duration::from_secs(30),
        || async {
            assert_not_refused(controller);
            let list = events.list(&ListParams::default()).await?;
            let count = list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Complete"))
                .filter_map(|e| e.series.as_ref().map(|s| s.count))
                .max();
            match count {
                Some(n) if n >= 2 => Ok(()),
                _ => Err(anyhow!(
                    "Complete events: {:?}",
                    list.items
                        .iter()
                        .filter(|e| e.reason.as_deref() == Some("Complete"))
                        .map(|e| (&e.note, &e.series))
                        .collect::<Vec<_>>()
                )),
            }
        },
    )
    .await;
}

/// A Plan with a health check on a ConfigMap of another namespace, granted as docs/plans.md says
/// (a ClusterRole labelled for aggregation into the health checks' role): the controller asks
/// whether the health checks' account may get it (a SubjectAccessReview), reads it through the
/// aggregated role, and the Plan completes. The grant's name, to remove after the proof (the
/// aggregated role's rules are among those proven).
async fn a_plan_behind_a_granted_health_check(
    s: &Scene,
    controller: &ControllerProcess,
    plans: &Api<Plan>,
) -> String {
    let (client, ns, pool) = (&s.client, s.ns.name(), &s.pool);
    let gate: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "gate"}, "data": {"state": "ok"}
    }))
    .expect("a ConfigMap");
    s.ns.api::<ConfigMap>()
        .create(&PostParams::default(), &gate)
        .await
        .expect("create the ConfigMap");
    let grant = s.name("check-grant");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": grant,
                     "labels": {"slipway.dev/aggregate-to-health-checks": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                   "resourceNames": ["gate"]}],
    }))
    .expect("a ClusterRole");
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("grant the check");
    let plan: Plan = serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {PLAN}-checked
spec:
  concurrency: 1
  version: v1.30.1+k3s1
  serviceAccountName: {JOBS_SA}
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
      {ROLE_LABEL}: rollout
  upgrade:
    image: rancher/k3s-upgrade
  healthChecks:
  - apiVersion: v1
    kind: ConfigMap
    namespace: {ns}
    name: gate
    expr: "data.state == 'ok'"
"#
    ))
    .expect("checked plan");
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the checked plan");
    let name = format!("{PLAN}-checked");
    support::wait_for(
        "the checked plan to complete",
        Duration::from_secs(120),
        || async {
            assert_not_refused(controller);
            let p = plans.get(&name).await?;
            let healthy = (p.status.as_ref())
                .is_some_and(|st| st.health_checks.len() == 1 && st.health_checks[0].healthy);
            match healthy && is_complete(&p) {
                true => Ok(()),
                false => Err(anyhow!("status: {}", serde_json::to_string(&p.status)?)),
            }
        },
    )
    .await;
    grant
}

/// A Plan with spec.reboot and a health gate in all namespaces: a reboot pod is created on
/// the node, the test "reboots" the node (a new boot ID), the gate lists the node's pods in
/// every namespace, and the reboot pod is deleted.
async fn a_reboot_behind_a_health_gate(
    s: &mut Scene,
    controller: &ControllerProcess,
    plans: &Api<Plan>,
) {
    let rebooted = s
        .add_nodes("rbac-reboot", 1, &[(ROLE_LABEL, "reboot")])
        .await;
    let (client, pool) = (&s.client, &s.pool);
    let reboot_plan: Plan = serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {PLAN}-reboot
spec:
  concurrency: 1
  version: "2026-11-22"
  serviceAccountName: {JOBS_SA}
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
      {ROLE_LABEL}: reboot
  upgrade:
    image: debian:bookworm-slim
    command: [sh, -c, "true"]
  reboot:
    timeout: 5m
    healthGate:
      podSelector:
        matchLabels:
          slipway.test/health: {pool}
"#
    ))
    .expect("reboot plan");
    plans
        .create(&PostParams::default(), &reboot_plan)
        .await
        .expect("create the reboot plan");
    let reboot_name = format!("{PLAN}-reboot");
    support::wait_for(
        "the node to be rebooting",
        Duration::from_secs(120),
        || async {
            assert_not_refused(controller);
            let p = plans.get(&reboot_name).await?;
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.nodes.iter().find(|n| n.name == rebooted[0]))
                .map(|n| n.phase.to_string());
            if phase.as_deref() == Some("Rebooting") {
                Ok(())
            } else {
                Err(anyhow!("status: {}", serde_json::to_string(&p.status)?))
            }
        },
    )
    .await;
    let pod_api = Api::<Pod>::namespaced(client.clone(), NS);
    // Its reboot pod is made once the Job is seen complete, just after the status says so.
    let reboot_pods = ListParams::default().labels(&format!(
        "slipway.dev/reboot=true,upgrade.cattle.io/node={}",
        rebooted[0]
    ));
    support::wait_for("the reboot pod", Duration::from_secs(60), || async {
        match pod_api.list(&reboot_pods).await?.items.is_empty() {
            true => Err(anyhow!("none yet")),
            false => Ok(()),
        }
    })
    .await;
    support::simulate_reboot(client, &rebooted[0]).await;
    support::wait_for(
        "the rebooted node to be done and its reboot pod gone",
        Duration::from_secs(120),
        || async {
            assert_not_refused(controller);
            let p = plans.get(&reboot_name).await?;
            let reboot_pods = pod_api
                .list(&ListParams::default().labels(&format!(
                    "slipway.dev/reboot=true,upgrade.cattle.io/node={}",
                    rebooted[0]
                )))
                .await?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            if is_complete(&p) && reboot_pods == 0 {
                Ok(())
            } else {
                Err(anyhow!(
                    "{reboot_pods} reboot pods, status: {}",
                    serde_json::to_string(&p.status)?
                ))
            }
        },
    )
    .await;
}

/// What the audit log says the controller did, and the rights deploy/ bound to it.
struct Evidence {
    requests: BTreeSet<Request>,
    refused: Vec<String>,
    audited: usize,
    /// The controller's roles (the components' left out).
    grants: Vec<Grant>,
    /// The Jobs' roles (the drainer ClusterRole, the Jobs' Role).
    drainer: Vec<Grant>,
    /// Why the Lease rules may be unused, when they may.
    lease_unused_reason: Option<&'static str>,
}

impl Evidence {
    async fn read(
        client: &kube::Client,
        audit_log: &Path,
        jti: &str,
        leader_election: bool,
    ) -> Self {
        let (requests, refused, audited) = read_audit_log(audit_log, jti);
        let (mut grants, drainer) = controller_and_job_rules(client).await;
        // deploy/'s own roles only, whatever else is bound.
        grants.retain(|g| !COMPONENT_ROLES.contains(&g.role.as_str()));
        let lease_unused_reason = (!leader_election).then_some(
            "this slipway has no --leader-elect yet, so the Lease rules are not exercised",
        );
        Evidence {
            requests,
            refused,
            audited,
            grants,
            drainer,
            lease_unused_reason,
        }
    }

    /// Rights that need not be used: [`ALLOWED_UNUSED`], and the Lease rules without leader
    /// election.
    fn may_be_unused(&self, _: &Grant, group: &str, resource: &str, verb: &str) -> bool {
        (self.lease_unused_reason.is_some() && group == "coordination.k8s.io")
            || ALLOWED_UNUSED
                .iter()
                .any(|(g, r, v, _)| (*g, *r, *v) == (group, resource, verb))
    }

    fn audit(&self, grants: &[Grant]) -> Vec<String> {
        audit_rbac(
            grants,
            &self.requests,
            &|g, group, resource, verb| self.may_be_unused(g, group, resource, verb),
            None,
        )
    }

    /// Prints the requests and what may be unused.
    fn report(&self, peak_rss_kib: Option<u64>, started: Instant) {
        let (audited, requests) = (self.audited, &self.requests);
        eprintln!(
            "e2e_rbac: {audited} audited requests by {NS}/{SA}, {} distinct:",
            requests.len()
        );
        for r in requests {
            eprintln!("  {r}");
        }
        for (g, r, v, why) in ALLOWED_UNUSED {
            let used = requests
                .iter()
                .any(|q| (q.group.as_str(), q.resource.as_str(), q.verb.as_str()) == (*g, *r, *v));
            eprintln!("e2e_rbac: may be unused: {v} {g}/{r} (used this time: {used}): {why}");
        }
        if let Some(reason) = self.lease_unused_reason {
            eprintln!("e2e_rbac: may be unused: coordination.k8s.io/leases: {reason}");
        }
        if let Some(kib) = peak_rss_kib {
            eprintln!("e2e_rbac: slipway peak RSS {} MiB", kib / 1024);
        }
        eprintln!("e2e_rbac: took {:?}", started.elapsed());
    }

    /// No request was refused, every request is granted by the controller's roles, and every
    /// right of them was used.
    fn assert_least_privilege(&self, controller: &ControllerProcess) {
        let problems = self.audit(&self.grants);
        assert!(
            self.refused.is_empty(),
            "the API server refused requests of the controller:\n{}",
            self.refused.join("\n")
        );
        assert_not_refused(controller);
        assert!(
            problems.is_empty(),
            "deploy/'s RBAC is not least privilege:\n{}",
            problems.join("\n")
        );
    }

    /// The checker itself catches both kinds of mistake, on this run's evidence.
    fn the_checker_catches_both_kinds_of_mistake(&self) {
        let mut too_much = self.grants.clone();
        too_much.push(Grant {
            role: "extra".into(),
            namespace: Some(NS.into()),
            rule: PolicyRule {
                api_groups: Some(vec!["".into()]),
                resources: Some(vec!["secrets".into()]),
                verbs: vec!["get".into()],
                ..Default::default()
            },
        });
        assert!(
            self.audit(&too_much)
                .iter()
                .any(|p| p.contains("get core/secrets, never used")),
            "an unused right is reported"
        );
        let too_little: Vec<Grant> = self
            .grants
            .iter()
            .filter(|g| {
                !g.rule
                    .resources
                    .iter()
                    .flatten()
                    .any(|r| r == "plans/status")
            })
            .cloned()
            .collect();
        assert!(
            self.audit(&too_little)
                .iter()
                .any(|p| p.contains("do not grant: patch upgrade.cattle.io/plans/status")),
            "a missing right is reported"
        );
        // The drainer role is for the Jobs: it is left out of `grants`, so a request that only it
        // allows is reported above as not granted.
        assert!(
            !self.drainer.is_empty(),
            "deploy/ binds {DRAINER_ROLE} to {JOBS_SA}"
        );
    }
}

/// Rights of the maintenance component the run cannot exercise, each with the reason.
const MAINTENANCE_ALLOWED_UNUSED: &[(&str, &str, &str, &str)] = &[
    (
        "events.k8s.io",
        "events",
        "patch",
        "an Event of a NodeMaintenance repeated while the recorder remembers it becomes a series (a \
     patch): a drain that goes from blocked to draining and back is blocked again with the same \
     message. The run below publishes each of its Events once.",
    ),
    (
        "",
        "pods",
        "delete",
        "a drain past its timeout with spec.disruption.onDrainTimeout: DeletePods deletes the pods \
         left; this run's maintenance does not ask for it (real_ops::a_node_maintenance_drains_a_real_node_and_gives_it_back \
         does, and the unit tests of each kind).",
    ),
    (
        "storage.k8s.io",
        "volumeattachments",
        "list",
        "a drain with spec.disruption.waitForVolumeDetach reads the node's VolumeAttachments once \
         its pods are gone; this run's maintenance does not ask for it (real_ops::a_node_maintenance_drains_a_real_node_and_gives_it_back \
         does).",
    ),
];

/// `kubectl apply -k` of an overlay of deploy/ with one of its components, as a user would write it.
async fn apply_with_component(cluster: &support::Cluster, install: &mut Install, component: &str) {
    let overlay = install::overlay(&[component]);
    install.apply_kustomization(cluster, &overlay).await;
    let _ = std::fs::remove_dir_all(&overlay);
}

/// deploy/components/reboot-agent: its ServiceAccount may read Nodes and patch them, and nothing
/// else; the admission policy narrows the patch to the Node of the pod the token is bound to, and
/// to annotations. The agent runs with a token bound to the DaemonSet's pod on one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_component_lets_the_agent_change_its_own_node_only() {
    // Alone besides deploy/: the agent's DaemonSet runs a pod on every node of the cluster.
    let scene = Scene::new("rbac-agent").nodes(2);
    let Some(d) = deployed(scene, Some("deploy/components/reboot-agent")).await else {
        return;
    };
    let (cluster, client, nodes) = (&d.s.cluster, &d.s.client, &d.s.nodes);
    the_agent_may_only_get_and_patch_nodes(cluster).await;
    // The DaemonSet runs a pod on every node (kwok plays the kubelet); take two of them.
    let kubeconfig = a_kubeconfig_bound_to_the_agent_pod_on(cluster, client, &nodes[0]).await;
    the_agent_changes_only_its_own_nodes_annotations(client, &kubeconfig, nodes).await;
    let _ = std::fs::remove_file(&kubeconfig);
}

/// A kubeconfig with a token of the agent's ServiceAccount bound to its DaemonSet's pod on
/// `node`, as the pod has.
async fn a_kubeconfig_bound_to_the_agent_pod_on(
    cluster: &support::Cluster,
    client: &kube::Client,
    node: &str,
) -> PathBuf {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let pod_on = |node: String| {
        let pods = pods.clone();
        async move {
            support::wait_for(
                &format!("the agent pod on {node}"),
                Duration::from_secs(60),
                || async {
                    pods.list(&ListParams::default().labels("app.kubernetes.io/component=agent"))
                        .await?
                        .items
                        .into_iter()
                        .find(|p| {
                            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node)
                        })
                        .and_then(|p| p.metadata.name)
                        .ok_or_else(|| anyhow!("not yet"))
                },
            )
            .await
        }
    };
    let pod = pod_on(node.to_string()).await;
    let token = cluster
        .kubectl(&[
            "-n",
            NS,
            "create",
            "token",
            "slipway-agent",
            "--duration=1h",
            "--bound-object-kind=Pod",
            &format!("--bound-object-name={pod}"),
        ])
        .await
        .expect("a token bound to the agent's pod")
        .trim()
        .to_string();
    let kubeconfig =
        std::env::temp_dir().join(format!("{}.kubeconfig", support::unique_name("agent")));
    support::token_kubeconfig(cluster.kubeconfig_path(), &token, &kubeconfig);
    kubeconfig
}

/// `slipway agent --once` with that token marks its own node, and labels it `kairos.io/managed:
/// "true"` on a Kairos host, and is refused another node; any other label patch of its own node
/// is refused too (only the annotations, and that one label set to "true").
async fn the_agent_changes_only_its_own_nodes_annotations(
    client: &kube::Client,
    kubeconfig: &Path,
    nodes: &[String],
) {
    // A Kairos host's /etc.
    let host_etc = std::env::temp_dir().join(support::unique_name("rbac-agent-etc"));
    std::fs::create_dir_all(&host_etc).expect("the stand-in for /etc");
    std::fs::write(host_etc.join("kairos-release"), "KAIROS_ID=kairos\n").expect("kairos-release");
    let agent = |node: &str| {
        support::process::slipway()
            .args([
                "agent",
                "--once",
                "--sentinel-command",
                "true",
                "--kubeconfig",
            ])
            .arg(kubeconfig)
            .args(["--node", node, "--host-etc"])
            .arg(&host_etc)
            .output()
            .expect("run slipway agent")
    };
    let as_agent = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("agent config"),
    )
    .expect("agent client");
    // The API server loads a new admission policy a moment after it is created (the agent once
    // changed another node under load before it had): wait until a label patch of the agent's
    // own node is refused, which only the policy does, then check each rule once.
    let mut probe = 0;
    support::wait_for(
        "the agent's admission policy to be enforced",
        Duration::from_secs(60),
        || {
            probe += 1;
            let api = Api::<Node>::all(as_agent.clone());
            let value = probe.to_string();
            async move {
                let patch = json!({"metadata": {"labels": {"slipway.test/probe": value}}});
                match api
                    .patch(&nodes[0], &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Err(kube::Error::Api(s)) if s.message.contains("only the annotations") => {
                        Ok(())
                    }
                    other => Err(anyhow!("not refused yet: {other:?}")),
                }
            }
        },
    )
    .await;
    let own = agent(&nodes[0]);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let own_node = Api::<Node>::all(client.clone())
        .get(&nodes[0])
        .await
        .expect("node")
        .metadata;
    let annotated = own_node
        .annotations
        .is_some_and(|a| a.contains_key(support::REBOOT_REQUIRED_ANNOTATION));
    assert!(annotated, "the agent marked its own node");
    let labelled = own_node
        .labels
        .and_then(|l| l.get("kairos.io/managed").cloned());
    assert_eq!(
        labelled.as_deref(),
        Some("true"),
        "the agent labelled its Kairos node"
    );
    let foreign = agent(&nodes[1]);
    assert!(!foreign.status.success(), "the agent changed another node");
    assert!(
        String::from_utf8_lossy(&foreign.stderr).contains("may change only the Node it runs on"),
        "{}",
        String::from_utf8_lossy(&foreign.stderr)
    );
    for labels in [
        json!({"example.com/chosen": "yes"}),
        json!({"kairos.io/managed": "false"}),
        json!({"kairos.io/managed": null}),
        json!({"kairos.io/managed": "true", "kairos.io/flavor": "ubuntu"}),
    ] {
        let label = Api::<Node>::all(as_agent.clone())
            .patch(
                &nodes[0],
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await;
        assert!(
            matches!(&label, Err(kube::Error::Api(s)) if s.message.contains("only the annotations")),
            "{labels}: {label:?}"
        );
    }
    // The one label it may set, set again: allowed (and a no-op).
    Api::<Node>::all(as_agent)
        .patch(
            &nodes[0],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"kairos.io/managed": "true"}}})),
        )
        .await
        .expect("kairos.io/managed: \"true\" is allowed");
    let _ = std::fs::remove_dir_all(&host_etc);
}

/// The agent's ServiceAccount may get and patch Nodes (the admission policy keeps it to its own
/// Node's annotations), and nothing else it is asked about.
async fn the_agent_may_only_get_and_patch_nodes(cluster: &support::Cluster) {
    let agent_sa = format!("system:serviceaccount:{NS}:slipway-agent");
    for (verb, resource, subresource, allowed) in [
        ("get", "nodes", "", true),
        ("patch", "nodes", "", true),
        ("list", "nodes", "", false),
        ("update", "nodes", "", false),
        ("delete", "nodes", "", false),
        ("patch", "nodes", "status", false),
        ("get", "pods", "", false),
        ("create", "pods", "eviction", false),
    ] {
        let subresource = format!("--subresource={subresource}");
        let answer = cluster
            .kubectl(&[
                "auth",
                "can-i",
                verb,
                resource,
                &subresource,
                "--as",
                &agent_sa,
            ])
            .await;
        assert_eq!(
            answer.is_ok(),
            allowed,
            "can the agent {verb} {resource} {subresource}? {answer:?}"
        );
    }
}

/// `deploy/` plus `deploy/components/maintenance`, applied as an overlay would, then one
/// NodeMaintenance through every path that needs a right: a foreign Lease that expired (taken
/// over: update), a drain blocked by a PodDisruptionBudget (pod get, PDB list, in the status), a
/// DaemonSet pod skipped (DaemonSet get), the drain finishing, and the deletion that restores the
/// node and releases the Lease. The component's rules must be used, each one; every request of
/// the controller must be granted by deploy/ and the component together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maintenance_component_grants_exactly_what_a_maintenance_uses() {
    // Alone besides deploy/: its controller reconciles every NodeMaintenance.
    let scene = Scene::new("rbac-maint").nodes(2);
    let Some(d) = deployed(scene, Some("deploy/components/maintenance")).await else {
        return;
    };
    let (cluster, client, nodes) = (&d.s.cluster, &d.s.client, &d.s.nodes);
    let audit_log = audit_log_of(cluster);
    let mut env = overlay_env(
        client,
        ("SLIPWAY_MAINTENANCE", "the maintenance controller"),
        "slipway-rbac-maintenance",
    )
    .await;
    // The first node has workloads and a foreign Lease; the second neither (its Lease is created).
    let (node, bare) = (&nodes[0], &nodes[1]);
    env.insert("SYSTEM_UPGRADE_CONTROLLER_NODE_NAME".into(), node.clone());

    // Workloads on the node: a Deployment's pod held by a PDB, and a DaemonSet's pod.
    let workloads = d.s.ns.name();
    workloads_on(client, node, workloads).await;
    an_expired_foreign_lease(client, node).await;

    let (jti, kubeconfig) = service_account_kubeconfig(cluster, "slipway-rbac-maint").await;
    let mut controller = start_controller(&kubeconfig, &env, &controller_args());

    let names = [d.s.name("first"), d.s.name("bare")];
    maintain_both_through_a_blocking_budget(client, &controller, [node, bare], &names, workloads)
        .await;
    let leases = Api::<Lease>::namespaced(client.clone(), LEASES);
    for node in nodes {
        assert!(
            leases
                .get_opt(&format!("node-{node}"))
                .await
                .expect("get lease")
                .is_none(),
            "the Lease of {node} is released"
        );
    }
    controller.stop();

    for (g, r, v, why) in MAINTENANCE_ALLOWED_UNUSED {
        eprintln!("e2e_rbac: maintenance may leave unused: {v} {g}/{r}: {why}");
    }
    prove_component_audit(
        client,
        &audit_log,
        &jti,
        ("maintenance", MAINTENANCE_ROLE),
        MAINTENANCE_ALLOWED_UNUSED,
    )
    .await;
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(controller.log_path());
}

/// The ConfigMap of the overlay with a component: `switch` (variable, what it turns on) must be
/// on; the downward API's variables added, `pod` the pod's name.
async fn overlay_env(
    client: &kube::Client,
    (switch, what): (&str, &str),
    pod: &str,
) -> BTreeMap<String, String> {
    let config_map = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get("default-controller-env")
        .await
        .expect("the ConfigMap of the overlay");
    let mut env: BTreeMap<String, String> = config_map.data.unwrap_or_default();
    assert_eq!(
        env.get(switch).map(String::as_str),
        Some("true"),
        "the component turns {what} on"
    );
    env.insert("SYSTEM_UPGRADE_CONTROLLER_NAME".into(), CONTROLLER.into());
    env.insert("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE".into(), NS.into());
    env.insert("POD_NAME".into(), pod.into());
    env
}

/// A Lease of the node held by another holder that expired an hour ago: taken over with an
/// update.
async fn an_expired_foreign_lease(client: &kube::Client, node: &str) {
    let pp = PostParams::default();
    let leases = Api::<Lease>::namespaced(client.clone(), LEASES);
    let hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
    let expired = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("node-{node}")),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("someone-else".into()),
            lease_duration_seconds: Some(10),
            renew_time: Some(MicroTime(hour_ago)),
            ..Default::default()
        }),
    };
    leases
        .create(&pp, &expired)
        .await
        .expect("create the expired Lease");
}

/// A NodeMaintenance of each node, named `names`: the first one's drain is blocked by the PDB
/// `web` of `workloads` (and says so) until it is deleted; both drains succeed; both
/// maintenances are deleted and gone.
async fn maintain_both_through_a_blocking_budget(
    client: &kube::Client,
    controller: &ControllerProcess,
    nodes: [&String; 2],
    names: &[String; 2],
    workloads: &str,
) {
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), workloads);
    let pp = PostParams::default();
    let nms = Api::<NodeMaintenance>::all(client.clone());
    for (node, name) in nodes.iter().zip(names) {
        let nm: NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "reason": "rbac"},
        }))
        .expect("a NodeMaintenance");
        nms.create(&pp, &nm)
            .await
            .expect("create the NodeMaintenance");
    }
    let name = &names[0];
    let status_of = |nm: &NodeMaintenance| serde_json::to_string(&nm.status).unwrap_or_default();
    support::wait_for("the PDB to be named", Duration::from_secs(60), || async {
        assert_not_refused(controller);
        let nm = nms.get(name).await?;
        let error = nm.status.as_ref().and_then(|s| s.last_error.clone());
        let blocker = format!("PodDisruptionBudget {workloads}/web");
        if error.is_some_and(|e| e.contains(&blocker)) {
            Ok(())
        } else {
            Err(anyhow!("status: {}", status_of(&nm)))
        }
    })
    .await;
    pdbs.delete("web", &DeleteParams::default())
        .await
        .expect("delete the PDB");
    support::wait_for("the drains to succeed", Duration::from_secs(60), || async {
        assert_not_refused(controller);
        for name in names {
            let nm = nms.get(name).await?;
            if nm.status.as_ref().and_then(|s| s.phase) != Some(MaintenancePhase::Succeeded) {
                return Err(anyhow!("{name}: status: {}", status_of(&nm)));
            }
        }
        Ok(())
    })
    .await;
    for name in names {
        nms.delete(name, &DeleteParams::default())
            .await
            .expect("delete the NodeMaintenance");
    }
    support::wait_for(
        "the maintenances to be gone",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            for name in names {
                if let Some(nm) = nms.get_opt(name).await? {
                    return Err(anyhow!("{name} still there: {:?}", nm.metadata.finalizers));
                }
            }
            Ok(())
        },
    )
    .await;
}

/// Workloads on `node`, in namespace `workloads`: a Deployment's pod held by a
/// PodDisruptionBudget (both named `web`) and a DaemonSet's pod, running.
async fn workloads_on(client: &kube::Client, node: &str, workloads: &str) {
    let pod_spec = json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "app", "image": "nginx:1.27"}],
        "terminationGracePeriodSeconds": 1,
    });
    let workload = |kind: &str| {
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": kind}},
                "template": {"metadata": {"labels": {"app": kind}}, "spec": pod_spec.clone()},
            },
        })
    };
    let pp = PostParams::default();
    Api::<Deployment>::namespaced(client.clone(), workloads)
        .create(
            &pp,
            &serde_json::from_value(workload("web")).expect("deployment"),
        )
        .await
        .expect("create the Deployment");
    Api::<DaemonSet>::namespaced(client.clone(), workloads)
        .create(
            &pp,
            &serde_json::from_value(workload("agent")).expect("daemonset"),
        )
        .await
        .expect("create the DaemonSet");
    Api::<PodDisruptionBudget>::namespaced(client.clone(), workloads)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            }))
            .expect("pdb"),
        )
        .await
        .expect("create the PDB");
    let pods = Api::<Pod>::namespaced(client.clone(), workloads);
    support::wait_for("both pods running", Duration::from_secs(60), || async {
        let running = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 2 {
            Ok(())
        } else {
            Err(anyhow!("{running} running"))
        }
    })
    .await;
}

/// deploy/components/reboot-policy: a RebootPolicy reboots a node that asks (the agent's
/// annotation) with a Deployment's pod held by a PodDisruptionBudget and a DaemonSet's pod on it:
/// the policy watched and finalized, its status patched, the node's pods listed, the DaemonSet
/// read, evictions asked (a refusal names the PDB: pod get, PDB list), the node cordoned, a reboot
/// pod created and deleted (deploy/'s rights), events, and the finalizer removed on deletion.
/// Every rule of the component must be used, and every request granted by deploy/ and the
/// component alone (not the maintenance component, whose rights overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reboot_policy_component_grants_exactly_what_a_reboot_uses() {
    // Alone besides deploy/: its controller reconciles every RebootPolicy.
    let scene = Scene::new("rbac-rbp").nodes(1);
    let Some(d) = deployed(scene, Some("deploy/components/reboot-policy")).await else {
        return;
    };
    let (cluster, client, node) = (&d.s.cluster, &d.s.client, &d.s.nodes[0]);
    let audit_log = audit_log_of(cluster);
    let mut env = overlay_env(
        client,
        ("SLIPWAY_REBOOT_POLICIES", "the RebootPolicy controller"),
        "slipway-rbac-policy",
    )
    .await;
    // Only the policies here, whatever the ConfigMap says of the other operations.
    env.insert("SLIPWAY_MAINTENANCE".into(), "false".into());
    let workloads = d.s.ns.name();
    workloads_on(client, node, workloads).await;

    let (jti, kubeconfig) = service_account_kubeconfig(cluster, "slipway-rbac-policy").await;
    let mut controller = start_controller(&kubeconfig, &env, &controller_args());
    let audit = Audit {
        log: &audit_log,
        jti: &jti,
    };
    let policy = d.s.name("rbp");
    reboot_the_node_through_its_budget(&d.s, &controller, &audit, &policy).await;
    controller.stop();

    prove_component_audit(
        client,
        &audit_log,
        &jti,
        ("reboot-policy", POLICY_ROLE),
        POLICY_ALLOWED_UNUSED,
    )
    .await;
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(controller.log_path());
}

/// A RebootPolicy `name` over the scene's node, which asks; its drain waits for the PDB `web` of
/// the scene's namespace, which is then deleted; the reboot pod comes, the node reboots and is
/// given back; the policy is deleted and gone.
async fn reboot_the_node_through_its_budget(
    s: &Scene,
    controller: &ControllerProcess,
    audit: &Audit<'_>,
    name: &str,
) {
    let (client, node, workloads) = (&s.client, &s.nodes[0], s.ns.name());
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), workloads);
    let pp = PostParams::default();
    let policies = Api::<RebootPolicy>::all(client.clone());
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: s.pool}}, "timeout": "5m"},
    }))
    .expect("a RebootPolicy");
    support::wait_for("the RebootPolicy", Duration::from_secs(60), || async {
        policies.create(&pp, &policy).await
    })
    .await;
    support::ask_reboot(client, node).await;
    let nodes_api = Api::<Node>::all(client.clone());
    let status_of = |p: &RebootPolicy| serde_json::to_string(&p.status).unwrap_or_default();
    support::wait_for(
        "the drain to wait for the PDB's pod",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            let p = policies.get(name).await?;
            let draining = p
                .status
                .as_ref()
                .and_then(|s| s.nodes.first())
                .is_some_and(|n| {
                    n.phase == slipway::reboot_policy::api::RebootPhase::Draining
                        && n.message.as_deref().unwrap_or("").contains("web")
                });
            if draining {
                Ok(())
            } else {
                Err(anyhow!("status: {}", status_of(&p)))
            }
        },
    )
    .await;
    audit
        .the_refusing_budget_looked_up(controller, workloads)
        .await;
    pdbs.delete("web", &DeleteParams::default())
        .await
        .expect("delete the PDB");
    let reboot_pods = Api::<Pod>::namespaced(client.clone(), NS);
    support::wait_for("the reboot pod", Duration::from_secs(60), || async {
        assert_not_refused(controller);
        let list = reboot_pods
            .list(&ListParams::default().labels(&format!("slipway.dev/reboot-policy={name}")))
            .await?;
        if list.items.is_empty() {
            Err(anyhow!("status: {}", status_of(&policies.get(name).await?)))
        } else {
            Ok(())
        }
    })
    .await;
    support::simulate_reboot(client, node).await;
    support::wait_for(
        "the node back and uncordoned",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            let p = policies.get(name).await?;
            let n = nodes_api.get(node).await?;
            let cordoned = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
            if p.status.as_ref().is_some_and(|s| s.nodes.is_empty()) && !cordoned {
                Ok(())
            } else {
                Err(anyhow!("cordoned {cordoned}, status: {}", status_of(&p)))
            }
        },
    )
    .await;
    policies
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the policy");
    support::wait_for("the policy to be gone", Duration::from_secs(60), || async {
        assert_not_refused(controller);
        match policies.get_opt(name).await? {
            None => Ok(()),
            Some(p) => Err(anyhow!("still there: {:?}", p.metadata.finalizers)),
        }
    })
    .await;
}

/// The audit of a component's run with the token `jti`: every request is granted, and every
/// right of the component's role is used but those of `allowed_unused` (and [`ALLOWED_UNUSED`]);
/// deploy/'s own rights are proven by a scene of their own.
async fn prove_component_audit(
    client: &kube::Client,
    audit_log: &Path,
    jti: &str,
    (component, role): (&str, &str),
    allowed_unused: &[(&str, &str, &str, &str)],
) {
    let (requests, refused, audited) = read_audit_log(audit_log, jti);
    let (grants, _) = controller_and_job_rules(client).await;
    // deploy/'s roles and this component's: not another component's, whose rights overlap.
    let grants: Vec<Grant> = grants
        .into_iter()
        .filter(|g| g.role == role || !COMPONENT_ROLES.contains(&g.role.as_str()))
        .collect();
    let may_be_unused = |g: &Grant, group: &str, resource: &str, verb: &str| {
        g.role != role
            || ALLOWED_UNUSED
                .iter()
                .chain(allowed_unused)
                .any(|(gr, r, v, _)| (*gr, *r, *v) == (group, resource, verb))
    };
    let problems = audit_rbac(&grants, &requests, &may_be_unused, Some(role));
    assert_component_proven(component, audited, &requests, &refused, &problems);
}

/// Prints what the controller did with deploy/components/`component`'s rights, and fails on a
/// refused request or a right that is missing or unused.
fn assert_component_proven(
    component: &str,
    audited: usize,
    requests: &BTreeSet<Request>,
    refused: &[String],
    problems: &[String],
) {
    eprintln!(
        "e2e_rbac: {component} component: {audited} audited requests, {} distinct:",
        requests.len()
    );
    for r in requests {
        eprintln!("  {r}");
    }
    assert!(
        refused.is_empty(),
        "the API server refused requests of the controller with the {component} component:\n{}",
        refused.join("\n")
    );
    assert!(
        problems.is_empty(),
        "deploy/components/{component}'s RBAC is not least privilege:\n{}",
        problems.join("\n")
    );
}

/// deploy/components/kairos: a NodeOpUpgrade (in a namespace of its own) creates its NodeOp, which
/// cordons the node, drains it through a PodDisruptionBudget's refusal and a DaemonSet's pod, runs
/// its Job, reboots the node with its reboot pod (created, then deleted once the node is back) and
/// uncordons it; events; the finalizers of both removed on deletion. Every rule of the component
/// must be used, and every request granted by deploy/ and the component alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kairos_component_grants_exactly_what_a_node_upgrade_uses() {
    // Alone besides deploy/: its controller reconciles NodeOps in every namespace.
    let scene = Scene::new("rbac-kairos").nodes(1);
    let Some(d) = deployed(scene, Some("deploy/components/kairos")).await else {
        return;
    };
    let (cluster, client, node) = (&d.s.cluster, &d.s.client, &d.s.nodes[0]);
    let audit_log = audit_log_of(cluster);
    let mut env = overlay_env(
        client,
        ("SLIPWAY_NODEOPS", "the NodeOp controller"),
        "slipway-rbac-kairos",
    )
    .await;
    // Only NodeOps here, whatever the ConfigMap says of the other operations.
    env.insert("SLIPWAY_MAINTENANCE".into(), "false".into());
    env.insert("SLIPWAY_REBOOT_POLICIES".into(), "false".into());
    let workloads = d.s.ns.name();
    workloads_on(client, node, workloads).await;

    let (jti, kubeconfig) = service_account_kubeconfig(cluster, "slipway-rbac-kairos").await;
    let mut controller = start_controller(&kubeconfig, &env, &controller_args());
    let audit = Audit {
        log: &audit_log,
        jti: &jti,
    };
    upgrade_the_node_through_its_budget(&d.s, &controller, &audit).await;
    controller.stop();

    prove_component_audit(
        client,
        &audit_log,
        &jti,
        ("kairos", KAIROS_ROLE),
        KAIROS_ALLOWED_UNUSED,
    )
    .await;
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(controller.log_path());
}

/// A NodeOpUpgrade of the scene's node in its namespace; its drain waits for the PDB `web`, which
/// is then deleted; the Job runs, the reboot pod comes, the node reboots and is given back; the
/// upgrade is deleted and gone with its NodeOp.
async fn upgrade_the_node_through_its_budget(
    s: &Scene,
    controller: &ControllerProcess,
    audit: &Audit<'_>,
) {
    use slipway::nodeop::api::{NodeOp, NodeOpUpgrade};
    let (client, node, pool, workloads) = (&s.client, &s.nodes[0], &s.pool, s.ns.name());
    let upgrades = Api::<NodeOpUpgrade>::namespaced(client.clone(), workloads);
    let nodeops = Api::<NodeOp>::namespaced(client.clone(), workloads);
    let upgrade: NodeOpUpgrade = serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOpUpgrade",
        "metadata": {"name": "to-v3"},
        "spec": {"image": "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3s",
                 "force": true,
                 "nodeSelector": {"matchLabels": {"slipway.test/pool": pool}}},
    }))
    .expect("a NodeOpUpgrade");
    support::wait_for("the NodeOpUpgrade", Duration::from_secs(60), || async {
        upgrades.create(&PostParams::default(), &upgrade).await
    })
    .await;
    let entry = |op: &NodeOp| {
        op.status
            .as_ref()
            .and_then(|s| s.node_statuses.get(node))
            .cloned()
            .unwrap_or_default()
    };
    support::wait_for(
        "the drain to wait for the PDB's pod",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            let op = nodeops.get("to-v3").await?;
            let e = entry(&op);
            match (e.phase.as_str(), e.job_name) {
                ("Pending", Some(_)) => Ok(()),
                _ => Err(anyhow!("status: {:?}", op.status)),
            }
        },
    )
    .await;
    audit
        .the_refusing_budget_looked_up(controller, workloads)
        .await;
    Api::<PodDisruptionBudget>::namespaced(client.clone(), workloads)
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the PDB");
    support::wait_for(
        "the reboot to be awaited",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            let op = nodeops.get("to-v3").await?;
            match entry(&op).reboot_status.as_deref() {
                Some("pending") if entry(&op).phase == "Completed" => Ok(()),
                _ => Err(anyhow!("status: {:?}", op.status)),
            }
        },
    )
    .await;
    support::simulate_reboot(client, node).await;
    let nodes_api = Api::<Node>::all(client.clone());
    support::wait_for(
        "the upgrade to complete",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            let u = upgrades.get("to-v3").await?;
            let cordoned = nodes_api
                .get(node)
                .await?
                .spec
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            match u.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Completed") if !cordoned => Ok(()),
                _ => Err(anyhow!("cordoned {cordoned}, status: {:?}", u.status)),
            }
        },
    )
    .await;
    upgrades
        .delete("to-v3", &DeleteParams::foreground())
        .await
        .expect("delete the upgrade");
    support::wait_for(
        "the upgrade and its NodeOp gone",
        Duration::from_secs(60),
        || async {
            assert_not_refused(controller);
            match (
                upgrades.get_opt("to-v3").await?,
                nodeops.get_opt("to-v3").await?,
            ) {
                (None, None) => Ok(()),
                (u, op) => Err(anyhow!(
                    "still there: {:?} {:?}",
                    u.map(|u| u.metadata.finalizers),
                    op.map(|o| o.metadata.finalizers)
                )),
            }
        },
    )
    .await;
}

/// The kairos component's rights the run above need not use.
const KAIROS_ALLOWED_UNUSED: &[(&str, &str, &str, &str)] = &[
    (
        "events.k8s.io",
        "events",
        "patch",
        "an Event of a NodeOp repeated while the recorder remembers it becomes a series (a patch). \
         The run above publishes each of its Events once.",
    ),
    (
        "storage.k8s.io",
        "volumeattachments",
        "list",
        "a drain with spec.disruption.waitForVolumeDetach reads the node's VolumeAttachments once \
         its pods are gone; this run's NodeOp does not ask for it (real_ops::a_node_maintenance_drains_a_real_node_and_gives_it_back \
         does).",
    ),
];

/// The RebootPolicy component's rights the run above need not use.
const POLICY_ALLOWED_UNUSED: &[(&str, &str, &str, &str)] = &[
    (
        "events.k8s.io",
        "events",
        "patch",
        "an Event of a RebootPolicy repeated while the recorder remembers it becomes a series (a \
     patch): a node that fails its reboot twice. The run above publishes each of its Events once.",
    ),
    (
        "",
        "pods",
        "delete",
        "a drain past its timeout with spec.disruption.onDrainTimeout: DeletePods deletes the pods \
         left; cluster-wide because the pods a drain deletes are in every namespace; this run's policy \
         deletes only its reboot pods, in its own namespace (real_ops::a_node_maintenance_drains_a_real_node_and_gives_it_back \
         deletes a workload's pod past the timeout, and the unit tests of each kind).",
    ),
    (
        "storage.k8s.io",
        "volumeattachments",
        "list",
        "a drain with spec.disruption.waitForVolumeDetach reads the node's VolumeAttachments once \
         its pods are gone; this run's policy does not ask for it (real_ops::a_node_maintenance_drains_a_real_node_and_gives_it_back \
         does).",
    ),
];

/// A kubeconfig that authenticates as deploy/'s controller ServiceAccount with a fresh token, and
/// the token's ID, which marks its requests in the audit log.
async fn service_account_kubeconfig(cluster: &support::Cluster, name: &str) -> (String, PathBuf) {
    kubeconfig_of(cluster, SA, name).await
}

/// A kubeconfig that authenticates as the ServiceAccount `sa` of the install's namespace with a
/// fresh token, and the token's ID.
async fn kubeconfig_of(cluster: &support::Cluster, sa: &str, name: &str) -> (String, PathBuf) {
    let token = cluster
        .kubectl(&["-n", NS, "create", "token", sa, "--duration=1h"])
        .await
        .expect("kubectl create token")
        .trim()
        .to_string();
    let kubeconfig =
        std::env::temp_dir().join(format!("{}.kubeconfig", support::unique_name(name)));
    support::token_kubeconfig(cluster.kubeconfig_path(), &token, &kubeconfig);
    (token_jti(&token), kubeconfig)
}
