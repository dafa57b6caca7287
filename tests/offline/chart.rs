//! The Helm chart charts/slipway against deploy/: rendered by real Helm (built once from the Go
//! module proxy by tests/tools/helm/build.sh, cached), its default objects are the objects of
//! `kubectl kustomize deploy/`, and each toggle adds exactly what its kustomize component under
//! deploy/components/ adds. Also: `helm lint --strict`, the values schema, and the values that
//! change the rendered objects. No cluster needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

const NAMESPACE: &str = "system-upgrade";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    repo().join("charts/slipway")
}

/// The cached Helm binary, built on first use (the build prints its progress on stderr).
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| super::tool("SLIPWAY_HELM", "tests/tools/helm/build.sh"))
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

fn documents(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML documents");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm template` of the chart in namespace system-upgrade with these `--set` values.
fn try_template(sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut cmd = Command::new(helm());
    cmd.args(["template", "slipway"])
        .arg(chart())
        .args(["--namespace", NAMESPACE]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    run(&mut cmd).map(|out| documents(&out))
}

fn template(sets: &[&str]) -> Vec<Value> {
    try_template(sets).unwrap_or_else(|e| panic!("{e}"))
}

/// `kubectl kustomize` of an overlay of deploy/ that adds these components (none: deploy/ itself).
fn kustomize(components: &[&str]) -> Vec<Value> {
    let kubectl = |dir: &Path| {
        run(Command::new("kubectl").arg("kustomize").arg(dir))
            .unwrap_or_else(|e| panic!("kubectl (with kustomize) is needed: {e}"))
    };
    if components.is_empty() {
        return documents(&kubectl(&repo().join("deploy")));
    }
    let overlay = std::env::temp_dir().join(format!(
        "slipway-chart-overlay-{}-{}",
        components.join("+"),
        std::process::id()
    ));
    std::fs::create_dir_all(&overlay).expect("overlay dir");
    let overlay = overlay.canonicalize().expect("overlay path");
    // kustomize wants paths relative to the overlay.
    let up = "../".repeat(overlay.components().count() - 1);
    let rel = |p: &str| {
        let abs = repo().join(p).canonicalize().expect("path");
        format!("{up}{}", abs.strip_prefix("/").expect("absolute").display())
    };
    let mut k = format!("resources:\n- {}\ncomponents:\n", rel("deploy"));
    for c in components {
        k += &format!("- {}\n", rel(&format!("deploy/components/{c}")));
    }
    std::fs::write(overlay.join("kustomization.yaml"), k).expect("write overlay");
    let out = kubectl(&overlay);
    let _ = std::fs::remove_dir_all(&overlay);
    documents(&out)
}

fn key(obj: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    format!(
        "{}/{} {}/{}",
        s(&obj["apiVersion"]),
        s(&obj["kind"]),
        s(&obj["metadata"]["namespace"]),
        s(&obj["metadata"]["name"])
    )
}

fn by_key(docs: Vec<Value>) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for doc in docs {
        let k = key(&doc);
        assert!(map.insert(k.clone(), doc).is_none(), "{k} twice");
    }
    map
}

fn remove_annotation(meta: &mut Value, name: &str) -> Option<Value> {
    let annotations = meta.get_mut("annotations")?.as_object_mut()?;
    let value = annotations.remove(name);
    if annotations.is_empty() {
        meta.as_object_mut()?.remove("annotations");
    }
    value
}

/// The chart's objects less the two annotations it adds on purpose, each checked here:
/// - `helm.sh/resource-policy: keep` on every CRD (crds.keep): `helm uninstall` must not delete
///   the CRDs, which would delete every Plan with them;
/// - `checksum/config` on the controller's pod template: slipway reads its ConfigMap only at
///   start (deploy/configmap.yaml says to restart it by hand), so a `helm upgrade` that changes
///   the ConfigMap restarts the pod.
///
/// Nothing else is normalized: RBAC rules, the ConfigMap and the Deployment spec compare exactly.
fn normalized(docs: Vec<Value>) -> BTreeMap<String, Value> {
    let mut objects = by_key(docs);
    for (k, obj) in objects.iter_mut() {
        if obj["kind"] == "CustomResourceDefinition" {
            let keep = remove_annotation(&mut obj["metadata"], "helm.sh/resource-policy");
            assert_eq!(keep, Some(json!("keep")), "{k}: crds.keep");
        }
        if obj["kind"] == "Deployment" {
            let sum =
                remove_annotation(&mut obj["spec"]["template"]["metadata"], "checksum/config");
            let sum = sum.unwrap_or_default();
            let sum = sum.as_str().unwrap_or("");
            assert!(
                sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()),
                "{k}: checksum/config is a SHA-256, got {sum:?}"
            );
        }
    }
    objects
}

/// Every difference between two sets of objects, as readable lines (empty: equal).
fn differences(
    chart: &BTreeMap<String, Value>,
    kustomize: &BTreeMap<String, Value>,
) -> Vec<String> {
    let mut out = vec![];
    for k in kustomize.keys().filter(|k| !chart.contains_key(*k)) {
        out.push(format!("missing from the chart: {k}"));
    }
    for k in chart.keys().filter(|k| !kustomize.contains_key(*k)) {
        out.push(format!("only in the chart: {k}"));
    }
    for (k, want) in kustomize {
        if let Some(got) = chart.get(k) {
            diff_value(k, got, want, &mut out);
        }
    }
    out
}

fn diff_value(path: &str, got: &Value, want: &Value, out: &mut Vec<String>) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff_value(
                    &format!("{path}.{k}"),
                    g.get(k).unwrap_or(&null),
                    w.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
            for (i, (g, w)) in g.iter().zip(w).enumerate() {
                diff_value(&format!("{path}[{i}]"), g, w, out);
            }
        }
        _ if got != want => out.push(format!("{path}: chart has {got}, kustomize has {want}")),
        _ => {}
    }
}

/// The labels the chart puts on every object (`slipway.labels`), which deploy/ has not (but for
/// `app.kubernetes.io/name` on a few): compared apart, by [`every_object_carries_the_releases_labels`].
const RELEASE_LABELS: [&str; 6] = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

fn without_release_labels(mut docs: Vec<Value>) -> Vec<Value> {
    for doc in &mut docs {
        let meta = &mut doc["metadata"];
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            RELEASE_LABELS.iter().for_each(|l| {
                labels.remove(*l);
            });
            if labels.is_empty() {
                meta.as_object_mut().map(|m| m.remove("labels"));
            }
        }
    }
    docs
}

fn assert_same(chart: Vec<Value>, kustomize: Vec<Value>, what: &str) {
    let (chart, kustomize) = (
        without_release_labels(chart),
        without_release_labels(kustomize),
    );
    let diffs = differences(&normalized(chart), &by_key(kustomize));
    assert!(
        diffs.is_empty(),
        "{what}: the chart and kustomize differ:\n{}",
        diffs.join("\n")
    );
}

fn without_namespace_object(mut docs: Vec<Value>) -> Vec<Value> {
    let before = docs.len();
    docs.retain(|d| !(d["kind"] == "Namespace" && d["metadata"]["name"] == NAMESPACE));
    assert_eq!(docs.len(), before - 1, "kustomize renders the namespace");
    docs
}

#[test]
fn default_values_render_the_objects_of_deploy() {
    // Helm keeps its release record in the release namespace, so that namespace exists before
    // the chart's objects and the chart renders it only with namespace.create (off by default).
    assert_same(
        template(&[]),
        without_namespace_object(kustomize(&[])),
        "default values",
    );
    assert_same(
        template(&["namespace.create=true"]),
        kustomize(&[]),
        "namespace.create=true",
    );
}

/// Each toggle, and all of them together, renders what deploy/ with its components renders: its
/// objects (CRD included) and its patch of the ConfigMap, nothing more.
#[test]
fn each_toggle_adds_exactly_its_kustomize_component() {
    let base = by_key(kustomize(&[]));
    let toggles = [
        ("maintenance.enabled=true", "maintenance"),
        ("rebootPolicies.enabled=true", "reboot-policy"),
        ("rebootAgent.enabled=true", "reboot-agent"),
        ("nodeOps.enabled=true", "kairos"),
    ];
    for (set, component) in toggles {
        let with = kustomize(&[component]);
        assert!(
            !differences(&by_key(with.clone()), &base).is_empty(),
            "deploy/components/{component} changes nothing"
        );
        assert_same(
            template(&[set, "namespace.create=true"]),
            with,
            &format!("--set {set} against deploy/components/{component}"),
        );
    }
    let sets: Vec<&str> = toggles.iter().map(|(s, _)| *s).collect();
    let components: Vec<&str> = toggles.iter().map(|(_, c)| *c).collect();
    assert_same(
        template(&[&sets[..], &["namespace.create=true"]].concat()),
        kustomize(&components),
        "every toggle against every component",
    );
    // The agent's update-engine option, a component on top of the agent's.
    let engine = ["reboot-agent", "reboot-agent/update-engine"];
    assert!(
        !differences(
            &by_key(kustomize(&engine)),
            &by_key(kustomize(&engine[..1]))
        )
        .is_empty(),
        "deploy/components/reboot-agent/update-engine changes nothing"
    );
    assert_same(
        template(&[
            "rebootAgent.enabled=true",
            "rebootAgent.updateEngine.enabled=true",
            "namespace.create=true",
        ]),
        kustomize(&engine),
        "--set rebootAgent.updateEngine.enabled=true against its component",
    );
    // The host-command option, the same way.
    let host = ["reboot-agent", "reboot-agent/host-command"];
    assert_same(
        template(&[
            "rebootAgent.enabled=true",
            "rebootAgent.hostCommand.enabled=true",
            "namespace.create=true",
        ]),
        kustomize(&host),
        "--set rebootAgent.hostCommand.enabled=true against its component",
    );
}

/// The monitoring kit's toggles, each against the objects of deploy/components/monitoring it
/// renders (the component patches nothing of the base), and all of them against the whole
/// component. A ServiceMonitor needs the Service it scrapes, so it brings it.
#[test]
fn the_monitoring_toggles_add_exactly_the_kit() {
    let base = kustomize(&[]);
    let kit = kustomize(&["monitoring"]);
    let base_keys = by_key(base.clone());
    let added: Vec<&Value> = kit
        .iter()
        .filter(|o| match base_keys.get(&key(o)) {
            Some(b) => {
                assert_eq!(b, *o, "the monitoring component changes {}", key(o));
                false
            }
            None => true,
        })
        .collect();
    let toggles: [(&str, &[&str]); 5] = [
        ("metrics.service.enabled=true", &["Service"]),
        (
            "serviceMonitor.enabled=true",
            &["Service", "ServiceMonitor"],
        ),
        ("podMonitor.enabled=true", &["PodMonitor"]),
        ("prometheusRule.enabled=true", &["PrometheusRule"]),
        ("dashboard.enabled=true", &["ConfigMap"]),
    ];
    for (set, kinds) in toggles {
        let mut want = base.clone();
        let before = want.len();
        want.extend(
            added
                .iter()
                .filter(|o| kinds.iter().any(|k| o["kind"] == *k))
                .map(|o| (*o).clone()),
        );
        assert_eq!(
            want.len(),
            before + kinds.len(),
            "{kinds:?} in the component"
        );
        assert_same(
            template(&[set, "namespace.create=true"]),
            want,
            &format!("--set {set} against deploy/components/monitoring"),
        );
    }
    let sets: Vec<&str> = toggles.iter().map(|(s, _)| *s).collect();
    assert_same(
        template(&[&sets[..], &["namespace.create=true"]].concat()),
        kit,
        "every monitoring toggle against deploy/components/monitoring",
    );
}

#[test]
fn a_changed_rule_is_a_difference() {
    // The comparison itself: one verb less in one rule of the controller's Role is reported.
    let deploy = by_key(kustomize(&[]));
    let mut changed = deploy.clone();
    let role = changed
        .values_mut()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "system-upgrade-controller")
        .expect("the controller's Role");
    role["rules"][0]["verbs"]
        .as_array_mut()
        .expect("verbs")
        .pop();
    let diffs = differences(&changed, &deploy);
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(diffs[0].contains(".rules[0].verbs"), "{diffs:?}");
}

#[test]
fn helm_lint_passes_strict_with_every_toggle() {
    for sets in [
        "",
        "maintenance.enabled=true,rebootPolicies.enabled=true,rebootAgent.enabled=true,namespace.create=true,\
         serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboard.enabled=true",
    ] {
        let mut cmd = Command::new(helm());
        cmd.args(["lint", "--strict", "--namespace", NAMESPACE])
            .arg(chart());
        if !sets.is_empty() {
            cmd.args(["--set", sets]);
        }
        let out = run(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn the_schema_refuses_bad_values() {
    let refused = [
        // Two controllers without a lease would both reconcile.
        (
            vec!["replicaCount=2", "leaderElection.enabled=false"],
            "leaderElection/enabled",
        ),
        // ConfigMap values are strings; `--set-string` or quotes in a values file.
        (
            vec!["config.SYSTEM_UPGRADE_CONTROLLER_THREADS=4"],
            "want string",
        ),
        // Set by the toggle of its own.
        (
            vec!["config.SLIPWAY_MAINTENANCE=yes"],
            "invalid propertyName 'SLIPWAY_MAINTENANCE'",
        ),
        (vec!["replica=2"], "'replica' not allowed"),
        (vec!["image.pullPolicy=Sometimes"], "pullPolicy"),
        (vec!["rebootAgent.period=often"], "rebootAgent/period"),
        (vec!["podLabels.app\\.kubernetes\\.io/name=x"], "podLabels"),
        (
            vec!["serviceMonitor.interval=often"],
            "serviceMonitor/interval",
        ),
        (vec!["podMonitor.interval=often"], "podMonitor/interval"),
        // The ServiceAccount's name is part of every Plan's latestHash: not a value.
        (vec!["serviceAccount.name=other"], "'name' not allowed"),
        (vec!["serviceAccount.create=false"], "'create' not allowed"),
        (
            vec!["serviceAccount.labels.helm\\.sh/chart=x"],
            "invalid propertyName 'helm.sh/chart'",
        ),
        (
            vec!["securityContext.privileged=yes"],
            "securityContext/privileged",
        ),
        (vec!["securityContext.runAsUsr=1"], "'runAsUsr' not allowed"),
        (
            vec!["podSecurityContext.seccompProfile.type=Everything"],
            "podSecurityContext/seccompProfile/type",
        ),
    ];
    for (sets, message) in refused {
        let err = try_template(&sets).expect_err(&format!("{sets:?} is refused"));
        assert!(err.contains(message), "{sets:?}: {err}");
    }
    // Two replicas with the lease are fine.
    template(&["replicaCount=2"]);
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn values_reach_the_objects() {
    let values =
        std::env::temp_dir().join(format!("slipway-chart-values-{}.yaml", std::process::id()));
    std::fs::write(
        &values,
        r#"
image:
  repository: registry.example.com/slipway
  tag: "9.9.9"
  pullPolicy: Always
imagePullSecrets: [{name: regcred}]
replicaCount: 2
leaderElection: {enabled: true, leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}
config:
  SYSTEM_UPGRADE_CONTROLLER_THREADS: "8"
  SYSTEM_UPGRADE_JOB_PRIVILEGED: null
  SLIPWAY_LOG_FORMAT: json
env: [{name: RUST_LOG, value: debug}]
extraArgs: ["--notify=ops=https://hooks.example.com/T0", "--notify-format=ops=slack"]
resources: {requests: {cpu: 50m}}
podAnnotations: {example.com/team: platform}
podLabels: {example.com/tier: system}
podSecurityContext: {runAsUser: 1000, runAsGroup: null, fsGroup: 2000}
securityContext: {runAsUser: 1000, runAsGroup: null, readOnlyRootFilesystem: false}
serviceAccount:
  annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::111122223333:role/slipway"}
  labels: {example.com/team: platform}
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux}
affinity: null
tolerations: [{operator: Exists}]
maintenance: {enabled: true, leaseNamespace: {name: leases, create: false}}
rebootAgent: {enabled: true, period: 5m, priorityClassName: system-node-critical, nodeSelector: {pool: a}, tolerations: [], updateEngine: {enabled: true, runAsUser: 1001}}
serviceMonitor: {enabled: true, interval: 1m, labels: {release: kube-prometheus-stack}}
podMonitor: {enabled: true, interval: 2m, labels: {release: kube-prometheus-stack}}
prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}, additionalRuleLabels: {team: platform, severity: page}, runbookBaseURL: "https://wiki.example.com/slipway/troubleshooting/"}
dashboard: {enabled: true, namespace: monitoring, labels: {grafana_dashboard: null, dashboards: slipway}, grafanaOperator: {enabled: true, instanceSelector: {matchLabels: {dashboards: main}}, folder: Platform}}
"#,
    )
    .expect("write values");
    let mut cmd = Command::new(helm());
    cmd.args(["template", "slipway"])
        .arg(chart())
        .args(["--namespace", "elsewhere", "--values"])
        .arg(&values);
    let out = run(&mut cmd);
    let _ = std::fs::remove_file(&values);
    let docs = documents(&out.unwrap_or_else(|e| panic!("{e}")));

    let deployment = find(&docs, "Deployment", "system-upgrade-controller");
    assert_eq!(deployment["metadata"]["namespace"], "elsewhere");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/team"],
        "platform"
    );
    assert_eq!(pod["metadata"]["labels"]["example.com/tier"], "system");
    assert_eq!(
        pod["metadata"]["labels"]["upgrade.cattle.io/controller"],
        "system-upgrade-controller"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert!(spec["affinity"].is_null(), "affinity: null drops it");
    assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
    // A values file's securityContext merges with the default; null drops a key.
    assert_eq!(
        spec["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 2000,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let container = &spec["containers"][0];
    assert_eq!(
        container["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": false,
               "runAsNonRoot": true, "runAsUser": 1000, "capabilities": {"drop": ["ALL"]},
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(container["image"], "registry.example.com/slipway:9.9.9");
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(
        container["args"],
        json!([
            "run",
            "--notify=ops=https://hooks.example.com/T0",
            "--notify-format=ops=slack"
        ])
    );
    assert_eq!(
        container["env"].as_array().and_then(|e| e.last()),
        Some(&json!({"name": "RUST_LOG", "value": "debug"}))
    );
    // A values file's map merges with the default: the memory request and limit stay.
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}})
    );

    let data = &find(&docs, "ConfigMap", "default-controller-env")["data"];
    assert_eq!(data["SYSTEM_UPGRADE_CONTROLLER_THREADS"], "8");
    assert!(
        data["SYSTEM_UPGRADE_JOB_PRIVILEGED"].is_null(),
        "null drops a default"
    );
    assert_eq!(data["SLIPWAY_LOG_FORMAT"], "json");
    assert_eq!(data["SYSTEM_UPGRADE_CONTROLLER_LEADER_ELECT"], "true");
    assert_eq!(data["CATTLE_ELECTION_LEASE_DURATION"], "60s");
    assert_eq!(data["CATTLE_ELECTION_RENEW_DEADLINE"], "40s");
    assert_eq!(data["CATTLE_ELECTION_RETRY_PERIOD"], "5s");
    assert_eq!(data["SLIPWAY_MAINTENANCE"], "true");
    assert_eq!(data["SLIPWAY_MAINTENANCE_LEASE_NAMESPACE"], "leases");

    // The Jobs' ServiceAccount keeps its name, takes the annotations and adds the labels to the
    // chart's; the controller runs as its own, which takes neither.
    let account = find(&docs, "ServiceAccount", "system-upgrade");
    assert_eq!(
        account["metadata"]["annotations"],
        json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/slipway"})
    );
    assert_eq!(
        account["metadata"]["labels"]["example.com/team"],
        "platform"
    );
    assert_eq!(
        account["metadata"]["labels"]["app.kubernetes.io/name"],
        "slipway"
    );
    let controller = find(&docs, "ServiceAccount", "system-upgrade-controller");
    assert!(controller["metadata"]["annotations"].is_null());
    assert_eq!(
        spec["serviceAccountName"], "system-upgrade-controller",
        "the controller runs as its own"
    );

    // Every binding names the ServiceAccount in the release namespace.
    for d in &docs {
        for s in d["subjects"].as_array().into_iter().flatten() {
            assert_eq!(s["namespace"], "elsewhere", "{}", key(d));
        }
    }
    assert_eq!(
        find(&docs, "Role", "system-upgrade-controller-maintenance")["metadata"]["namespace"],
        "leases",
        "the medik8s Leases' Role follows maintenance.leaseNamespace"
    );
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "Namespace" && d["metadata"]["name"] == "leases"),
        "leaseNamespace.create: false"
    );

    let agent = &find(&docs, "DaemonSet", "slipway-agent")["spec"]["template"]["spec"];
    assert_eq!(
        agent["containers"][0]["image"],
        "registry.example.com/slipway:9.9.9"
    );
    assert_eq!(agent["containers"][0]["env"][3]["value"], "5m");
    assert_eq!(agent["securityContext"]["runAsUser"], 1001);
    assert_eq!(agent["priorityClassName"], "system-node-critical");
    assert_eq!(agent["nodeSelector"], json!({"pool": "a"}));
    assert!(agent["tolerations"].is_null());
    assert_eq!(agent["imagePullSecrets"], json!([{"name": "regcred"}]));
    let policy = find(&docs, "ValidatingAdmissionPolicy", "slipway-agent-own-node");
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:elsewhere:slipway-agent'",
        "the policy names the agent in the release namespace"
    );

    let monitor = find(&docs, "ServiceMonitor", "slipway");
    assert_eq!(monitor["metadata"]["namespace"], "elsewhere");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "1m");
    let agents = find(&docs, "PodMonitor", "slipway-agent");
    assert_eq!(agents["metadata"]["namespace"], "elsewhere");
    assert_eq!(
        agents["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(agents["spec"]["podMetricsEndpoints"][0]["interval"], "2m");
    let service = find(&docs, "Service", "slipway-metrics");
    assert_eq!(service["metadata"]["namespace"], "elsewhere");
    let rule = find(&docs, "PrometheusRule", "slipway");
    assert_eq!(rule["metadata"]["namespace"], "elsewhere");
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    // Every alert: the extra labels (its own severity kept) and its runbook's anchor.
    let alerts: Vec<&Value> = (rule["spec"]["groups"].as_array().into_iter().flatten())
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    assert!(alerts.len() >= 11, "{}", alerts.len());
    for alert in alerts {
        let name = alert["alert"].as_str().expect("an alert");
        assert_eq!(alert["labels"]["team"], "platform", "{name}");
        assert_ne!(
            alert["labels"]["severity"], "page",
            "{name}: its own severity wins"
        );
        assert_eq!(
            alert["annotations"]["runbook_url"],
            format!(
                "https://wiki.example.com/slipway/troubleshooting#{}",
                name.to_lowercase()
            ),
            "{name}"
        );
    }
    let dashboard = find(&docs, "ConfigMap", "slipway-dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["dashboards"], "slipway");
    // The Grafana Operator's kind: the same dashboard, for the instances selected.
    let operated = find(&docs, "GrafanaDashboard", "slipway");
    assert_eq!(operated["metadata"]["namespace"], "monitoring");
    assert_eq!(
        operated["spec"]["instanceSelector"]["matchLabels"]["dashboards"],
        "main"
    );
    assert_eq!(operated["spec"]["folder"], "Platform");
    assert_eq!(operated["spec"]["json"], dashboard["data"]["slipway.json"]);

    // null renders no securityContext at all.
    let docs = template(&["podSecurityContext=null", "securityContext=null"]);
    let spec = &find(&docs, "Deployment", "system-upgrade-controller")["spec"]["template"]["spec"];
    assert!(spec.get("securityContext").is_none(), "{spec}");
    assert!(
        spec["containers"][0].get("securityContext").is_none(),
        "{spec}"
    );

    // A digest wins over the tag.
    let digest = format!("sha256:{}", "a".repeat(64));
    let docs = template(&[&format!("image.digest={digest}")]);
    assert_eq!(
        find(&docs, "Deployment", "system-upgrade-controller")["spec"]["template"]["spec"]["containers"]
            [0]["image"],
        format!("ghcr.io/slipway-dev/slipway@{digest}").as_str()
    );
}

#[test]
fn crds_can_be_left_to_others_and_are_kept_by_default() {
    let docs = template(&["crds.install=false", "maintenance.enabled=true"]);
    assert!(!docs.iter().any(|d| d["kind"] == "CustomResourceDefinition"));
    let docs = template(&["crds.keep=false"]);
    let crd = find(&docs, "CustomResourceDefinition", "plans.upgrade.cattle.io");
    assert!(crd["metadata"]["annotations"].is_null());
}

/// The strict checks of Plans are opt-in: off, no policy; on, deploy/'s component as it is.
#[test]
fn strict_plans_are_an_opt_in_admission_policy() {
    let kinds = [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let docs = template(&[]);
    assert!(
        !docs
            .iter()
            .any(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
    );
    let docs = template(&["strictPlans.enabled=true"]);
    let [policy, binding] = slipway::plan::api::strict::strict_plan_policy();
    for (kind, expected) in kinds.into_iter().zip([policy, binding]) {
        let found = find(&docs, kind, slipway::plan::api::strict::POLICY_NAME);
        assert_eq!(found["spec"], expected["spec"], "{kind}");
    }
}

#[test]
fn the_chart_carries_the_committed_files_and_the_crate_version() {
    let copies = [
        ("crds", "plans.upgrade.cattle.io.yaml"),
        ("crds", "nodemaintenances.nodemaintenance.medik8s.io.yaml"),
        ("crds", "rebootpolicies.slipway.dev.yaml"),
        ("deploy/components/monitoring", "prometheusrule.yaml"),
        ("deploy/components/monitoring", "dashboard.json"),
        ("deploy/components/strict-plans", "policy.yaml"),
    ];
    for (dir, name) in copies {
        let read =
            |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        let sub = dir.rsplit('/').next().unwrap_or(dir);
        assert!(
            read(chart().join("files").join(sub).join(name)) == read(repo().join(dir).join(name)),
            "charts/slipway/files/{sub}/{name} differs from {dir}/{name}: run `just chart-files`"
        );
    }
    let meta: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    assert_eq!(
        meta["version"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml version"
    );
    assert_eq!(
        meta["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml appVersion"
    );
}

/// The dotted paths of values.yaml that operators set, down to a scalar, a list or a map of free
/// keys.
fn value_paths(prefix: &str, value: &Value, out: &mut Vec<String>) {
    const FREE_KEYS: [&str; 12] = [
        "instanceSelector",
        "config",
        "affinity",
        "resources",
        "labels",
        "annotations",
        "nodeSelector",
        "podAnnotations",
        "podLabels",
        "podSecurityContext",
        "securityContext",
        "global",
    ];
    match value.as_object() {
        Some(map) if !FREE_KEYS.contains(&prefix.rsplit('.').next().unwrap_or("")) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                value_paths(&path, v, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn the_readme_lists_every_value() {
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let readme = std::fs::read_to_string(chart().join("README.md")).expect("README.md");
    let mut paths = vec![];
    value_paths("", &values, &mut paths);
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !readme.contains(&format!("| `{p}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "charts/slipway/README.md has no row for {missing:?}"
    );
}

#[test]
fn health_check_rules_become_an_aggregated_cluster_role() {
    let docs = template(&[]);
    let role = find(
        &docs,
        "ClusterRole",
        "system-upgrade-controller-health-checks",
    );
    assert_eq!(
        role["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["slipway.dev/aggregate-to-health-checks"],
        "true"
    );
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "system-upgrade-controller-health-check-reads"),
        "no rules, no extra role"
    );
    let docs = template(&[
        "healthChecks.rules[0].apiGroups[0]=ceph.rook.io",
        "healthChecks.rules[0].resources[0]=cephclusters",
        "healthChecks.rules[0].verbs[0]=get",
        "healthChecks.rules[0].verbs[1]=list",
    ]);
    let reads = find(
        &docs,
        "ClusterRole",
        "system-upgrade-controller-health-check-reads",
    );
    assert_eq!(
        reads["metadata"]["labels"]["slipway.dev/aggregate-to-health-checks"],
        "true"
    );
    assert_eq!(reads["rules"][0]["resources"][0], "cephclusters");
    assert_eq!(
        reads["rules"][0]["verbs"],
        serde_json::json!(["get", "list"])
    );
    let refused = try_template(&["healthChecks.rules[0].verbs[0]=delete"]);
    assert!(refused.is_err(), "health checks only read");
}

#[test]
fn every_object_carries_the_releases_labels() {
    let everything = [
        "namespace.create=true",
        "maintenance.enabled=true",
        "rebootPolicies.enabled=true",
        "nodeOps.enabled=true",
        "rebootAgent.enabled=true",
        "metrics.service.enabled=true",
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "dashboard.enabled=true",
        "podDisruptionBudget.enabled=true",
    ];
    let docs = template(&everything);
    assert!(docs.len() >= 40, "{} objects", docs.len());
    let version = env!("CARGO_PKG_VERSION");
    let want = [
        ("app.kubernetes.io/name", "slipway".to_string()),
        ("app.kubernetes.io/instance", "slipway".to_string()),
        ("app.kubernetes.io/version", version.to_string()),
        ("app.kubernetes.io/part-of", "slipway".to_string()),
        ("app.kubernetes.io/managed-by", "Helm".to_string()),
        ("helm.sh/chart", format!("slipway-{version}")),
    ];
    for doc in &docs {
        for (label, value) in &want {
            assert_eq!(
                doc["metadata"]["labels"][label].as_str(),
                Some(value.as_str()),
                "{} {}: {label}",
                doc["kind"],
                doc["metadata"]["name"]
            );
        }
    }
}

#[test]
fn the_pod_disruption_budget_is_optional_and_always_allows_an_eviction() {
    let pdbs = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "PodDisruptionBudget")
            .cloned()
            .collect()
    };
    assert!(pdbs(&template(&[])).is_empty(), "none by default");

    let docs = template(&["podDisruptionBudget.enabled=true"]);
    let [pdb] = &pdbs(&docs)[..] else {
        panic!("one PodDisruptionBudget when enabled")
    };
    assert_eq!(pdb["metadata"]["name"], "system-upgrade-controller");
    assert_eq!(pdb["metadata"]["namespace"], "system-upgrade");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"].get("minAvailable").is_none());
    // It selects exactly the controller's pods.
    let deployment = find(&docs, "Deployment", "system-upgrade-controller");
    assert_eq!(
        pdb["spec"]["selector"], deployment["spec"]["selector"],
        "the Deployment's selector"
    );

    let docs = template(&[
        "podDisruptionBudget.enabled=true",
        "replicaCount=3",
        "podDisruptionBudget.minAvailable=2",
    ]);
    let spec = &pdbs(&docs)[0]["spec"];
    assert_eq!(spec["minAvailable"], 2);
    assert!(spec.get("maxUnavailable").is_none(), "minAvailable wins");
    let docs = template(&[
        "podDisruptionBudget.enabled=true",
        "replicaCount=2",
        "podDisruptionBudget.minAvailable=50%",
    ]);
    assert_eq!(pdbs(&docs)[0]["spec"]["minAvailable"], "50%");

    // A budget that allows no eviction would hold every drain of the controller's node.
    let refused = [
        (
            vec!["podDisruptionBudget.minAvailable=1"],
            "below replicaCount",
        ),
        (
            vec!["replicaCount=2", "podDisruptionBudget.minAvailable=51%"],
            "allows no eviction",
        ),
        (
            vec!["podDisruptionBudget.minAvailable=50%"],
            "allows no eviction",
        ),
        (
            vec!["podDisruptionBudget.maxUnavailable=0"],
            "allows no eviction",
        ),
        (
            vec!["podDisruptionBudget.maxUnavailable=0%"],
            "allows no eviction",
        ),
        (
            vec!["podDisruptionBudget.maxUnavailable=null"],
            "needs minAvailable or maxUnavailable",
        ),
        (
            vec!["podDisruptionBudget.maxUnavailable=lots"],
            "maxUnavailable",
        ),
        (vec!["podDisruptionBudget.budget=1"], "'budget' not allowed"),
    ];
    for (mut sets, message) in refused {
        sets.push("podDisruptionBudget.enabled=true");
        let err = try_template(&sets).expect_err(&format!("{sets:?} is refused"));
        assert!(err.contains(message), "{sets:?}: {err}");
    }
}
