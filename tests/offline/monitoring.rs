//! The monitoring kit, deploy/components/monitoring: promtool (built from the Go module proxy by
//! tests/tools/promtool/build.sh, cached) checks the alerting rules, runs their unit tests
//! (tests/monitoring/alerts.test.yaml: every alert firing and not firing) and parses every query
//! of the dashboard; every metric those queries and the alerts read is one slipway exports; the
//! dashboard's ConfigMap holds dashboard.json as it is; the Service and the ServiceMonitor reach
//! the controller's metrics port.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use slipway::common::phase::PhaseTally;
use slipway::maintenance::shell::metrics::MaintenanceMetrics;
use slipway::nodeop::shell::metrics::NodeOpMetrics;
use slipway::plan::shell::metrics::{PlanGauges, PlanMetrics};
use slipway::reboot_policy::shell::metrics::PolicyMetrics;
use slipway::runtime::ErrorKind;
use slipway::runtime::metrics::{Kind, Metrics};

const KIT: &str = "deploy/components/monitoring";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn rule_file() -> Value {
    serde_saphyr::from_str(&read(&format!("{KIT}/prometheusrule.yaml"))).expect("PrometheusRule")
}

fn dashboard() -> Value {
    serde_json::from_str(&read(&format!("{KIT}/dashboard.json"))).expect("dashboard.json")
}

/// The alerting rules of the PrometheusRule.
fn alerts(rules: &Value) -> Vec<&Value> {
    rules["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// Every `expr` of the dashboard's panels (rows and nested panels included).
fn dashboard_queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(q)) => out.push(q.clone()),
                    _ => dashboard_queries(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, out)),
        _ => {}
    }
}

fn all_queries() -> Vec<(String, String)> {
    let rules = rule_file();
    let mut found: Vec<(String, String)> = alerts(&rules)
        .into_iter()
        .map(|r| {
            let name = format!("alert {}", r["alert"].as_str().unwrap_or_default());
            (name, r["expr"].as_str().expect("expr").to_string())
        })
        .collect();
    let mut panels = Vec::new();
    dashboard_queries(&dashboard(), &mut panels);
    found.extend(panels.into_iter().map(|q| ("dashboard".to_string(), q)));
    found
}

// ---------------------------------------------------------------------------------------------
// promtool
// ---------------------------------------------------------------------------------------------

/// promtool: `SLIPWAY_PROMTOOL`, else what tests/tools/promtool/build.sh builds (once, cached).
fn promtool() -> PathBuf {
    super::tool("SLIPWAY_PROMTOOL", "tests/tools/promtool/build.sh")
}

fn run_in(dir: &Path, promtool: &Path, args: &[&str]) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A dashboard query as Prometheus gets it from Grafana (its interval variables filled in).
fn as_promql(query: &str) -> String {
    let filled = query
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h");
    assert!(!filled.contains('$'), "unknown Grafana variable in {query}");
    filled
}

#[test]
fn promtool_accepts_the_rules_their_unit_tests_and_the_dashboard_queries() {
    let promtool = promtool();
    let dir = std::env::temp_dir().join(format!("slipway-promtool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    // The PrometheusRule's spec is a Prometheus rule file (`groups:`).
    let rules = rule_file();
    let spec = serde_saphyr::to_string(&rules["spec"]).expect("rules as YAML");
    std::fs::write(dir.join("slipway.rules.yaml"), spec).expect("write rules");
    std::fs::write(
        dir.join("alerts.test.yaml"),
        read("tests/monitoring/alerts.test.yaml"),
    )
    .expect("write rule tests");
    run_in(&dir, &promtool, &["check", "rules", "slipway.rules.yaml"]);
    run_in(&dir, &promtool, &["test", "rules", "alerts.test.yaml"]);

    // Each dashboard query, as a recording rule: promtool parses it as Prometheus would.
    let mut panels = Vec::new();
    dashboard_queries(&dashboard(), &mut panels);
    let records: Vec<Value> = panels
        .iter()
        .enumerate()
        .map(|(i, q)| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": as_promql(q)}))
        .collect();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": records}]});
    std::fs::write(
        dir.join("dashboard.rules.yaml"),
        serde_saphyr::to_string(&file).expect("YAML"),
    )
    .expect("write dashboard rules");
    run_in(&dir, &promtool, &["check", "rules", "dashboard.rules.yaml"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_alert_is_tested_firing_and_not_firing_and_says_what_to_do() {
    let tests: Value =
        serde_saphyr::from_str(&read("tests/monitoring/alerts.test.yaml")).expect("rule tests");
    let (mut firing, mut silent) = (BTreeSet::new(), BTreeSet::new());
    for case in tests["tests"].as_array().expect("tests").iter() {
        for check in case["alert_rule_test"].as_array().expect("alert_rule_test") {
            let name = check["alertname"].as_str().expect("alertname").to_string();
            let expected = check["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected > 0 {
                &mut firing
            } else {
                &mut silent
            }
            .insert(name);
        }
    }
    let rules = rule_file();
    let alerts = alerts(&rules);
    assert!(alerts.len() >= 8, "the alerts are read: {}", alerts.len());
    for rule in alerts {
        let name = rule["alert"].as_str().expect("alert name");
        assert!(firing.contains(name), "{name} is never tested firing");
        assert!(silent.contains(name), "{name} is never tested not firing");
        assert!(rule["for"].as_str().is_some(), "{name} has no `for`");
        let severity = rule["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("warning" | "critical")),
            "{name}: severity {severity:?}"
        );
        // Its runbook: an entry under "## Alerts" of docs/troubleshooting.md, the anchor the
        // chart's prometheusRule.runbookBaseURL points at.
        let runbooks = read("docs/troubleshooting.md");
        let alerts_section = runbooks.split("\n## Alerts\n").nth(1).unwrap_or_default();
        assert!(
            alerts_section.contains(&format!("\n### {name}\n")),
            "{name} has no entry under ## Alerts in docs/troubleshooting.md"
        );
        for annotation in ["summary", "description"] {
            assert!(
                rule["annotations"][annotation]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name} has no {annotation}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The metrics the queries read
// ---------------------------------------------------------------------------------------------

const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Followed by a list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

/// The index just after the group opened at `open` (`{`, `[` or `(`), strings inside skipped.
fn skip_group(b: &[char], open: usize) -> usize {
    let close = match b[open] {
        '{' => '}',
        '[' => ']',
        _ => ')',
    };
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            '"' | '\'' | '`' => i = skip_string(b, i),
            c if c == close => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The index just after the string literal starting at `start`.
fn skip_string(b: &[char], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a PromQL expression reads: its identifiers, less function and aggregation
/// names, keywords, label names (in `{...}` and after `by`, `on`, `group_left`...), strings,
/// durations, numbers and Grafana variables.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let b: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&b, i);
        } else if matches!(c, '{' | '[') {
            i = skip_group(&b, i);
        } else if c == '$' {
            i += 1;
            if b.get(i) == Some(&'{') {
                i = skip_group(&b, i);
            } else {
                while i < b.len() && is_name_char(b[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && b.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // Numbers (1e3, 0x1f, 0.5) and durations (5m, 1h30m).
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.') {
                let exponent = matches!(b[i], 'e' | 'E')
                    && matches!(b.get(i + 1), Some('+' | '-'))
                    && b[..i]
                        .iter()
                        .all(|c| !c.is_ascii_hexdigit() || c.is_ascii_digit());
                i += if exponent { 2 } else { 1 };
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < b.len() && is_name_char(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            let next = b[i..]
                .iter()
                .position(|c| !c.is_whitespace())
                .map(|n| i + n);
            let opens = next.is_some_and(|n| b[n] == '(');
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                if let Some(n) = next.filter(|_| opens) {
                    i = skip_group(&b, n);
                }
            } else if !(opens
                || AGGREGATIONS.contains(&lower.as_str())
                || KEYWORDS.contains(&lower.as_str()))
            {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The metric names of slipway's exposition, every family shown (process metrics included).
pub(crate) fn exported() -> BTreeSet<String> {
    exposition()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

/// slipway's exposition in the text format with a sample in every family it registers.
fn exposition() -> String {
    let m = Metrics::new();
    for kind in [
        "plan",
        "nodemaintenance",
        "rebootpolicy",
        "nodeop",
        "nodeopupgrade",
    ]
    .map(Kind)
    {
        m.kind_running(kind);
        m.reconcile_started(kind);
        m.reconcile_finished(kind, Duration::from_millis(5), Some(ErrorKind::server));
    }
    let since = |phase| PhaseTally {
        phase,
        nodes: 1,
        oldest_since: Some("2026-01-01T00:00:00Z".parse().expect("time")),
    };
    // Each kind's own families, as each kind's operation registers them.
    let plans = m.families::<PlanMetrics>();
    plans.plan(
        "ns",
        "p",
        PlanGauges {
            targeted: 1,
            ..PlanGauges::default()
        },
    );
    plans.plan_phases("ns", "p", &[since("Upgrading")]);
    plans.channel_request(Duration::from_millis(5), false);
    plans.channel_cache_hit();
    let policies = m.families::<PolicyMetrics>();
    policies.reboot_policy("r", 1, 1);
    policies.reboot_phases("r", &[since("Draining")]);
    (m.families::<MaintenanceMetrics>()).maintenance("nm", "n1", Some(since("Running")));
    (m.families::<NodeOpMetrics>()).nodeop_phases("ns", "op", &[since("Running")]);
    m.notifications().target("chat");
    m.job_created();
    m.job_deleted();
    m.node_patched();
    m.set_leader(true);
    m.alertmanager_request("list", false);
    m.silences("active", 1);
    m.render()
}

/// `query: unknown metric` for each metric a query reads that slipway does not export.
fn unknown_metrics(queries: &[(String, String)], exported: &BTreeSet<String>) -> Vec<String> {
    queries
        .iter()
        .flat_map(|(what, q)| {
            metric_names(q)
                .into_iter()
                .filter(|n| !exported.contains(n))
                .map(move |n| format!("{what}: `{n}` in {q}"))
        })
        .collect()
}

#[test]
fn every_query_reads_only_metrics_slipway_exports() {
    let exported = exported();
    for family in [
        "slipway_build_info",
        "slipway_reconcile_duration_seconds_bucket",
        "slipway_reconciles_total",
        "slipway_nodemaintenance_phase_since_timestamp_seconds",
        "process_resident_memory_bytes",
    ] {
        assert!(exported.contains(family), "{family} in {exported:?}");
    }
    let queries = all_queries();
    let read: BTreeSet<String> = queries.iter().flat_map(|(_, q)| metric_names(q)).collect();
    assert!(
        read.len() >= 20 && read.contains("slipway_leader"),
        "the queries are read: {read:?}"
    );
    let unknown = unknown_metrics(&queries, &exported);
    assert!(
        unknown.is_empty(),
        "queries read metrics slipway does not export:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_checker_reads_metric_names_only_and_finds_unknown_ones() {
    let q = r#"histogram_quantile(0.99, sum by (kind, le) (rate(slipway_reconcile_duration_seconds_bucket{kind=~"plan|x}", le!='1'}[$__rate_interval] offset 5m)))
        * on (job, instance) group_left (version) slipway_build_info
        / ignoring(a) (time() - max without (x) (slipway_leader)) > bool 1e3 unless absent(up) or vector(0)
        and label_replace(process_open_fds, "dst", "$1", "src", "(.*)") > .5 and Sum BY(x)(ns:recorded:rate5m @ start())"#;
    let want: BTreeSet<String> = [
        "slipway_reconcile_duration_seconds_bucket",
        "slipway_build_info",
        "slipway_leader",
        "up",
        "process_open_fds",
        "ns:recorded:rate5m",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(metric_names(q), want);

    let exported = exported();
    let queries = vec![
        ("ok".to_string(), "sum(slipway_leader)".to_string()),
        (
            "bad".to_string(),
            "rate(slipway_reconciles_total[5m]) / slipway_reconciles".to_string(),
        ),
        (
            "typo".to_string(),
            "max by (policy) (slipway_reboot_phase_node{phase=\"Failed\"})".to_string(),
        ),
    ];
    let unknown = unknown_metrics(&queries, &exported);
    assert_eq!(unknown.len(), 2, "{unknown:?}");
    assert!(
        unknown[0].starts_with("bad: `slipway_reconciles`"),
        "{unknown:?}"
    );
    assert!(
        unknown[1].starts_with("typo: `slipway_reboot_phase_node`"),
        "{unknown:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The kit as kustomize builds it
// ---------------------------------------------------------------------------------------------

/// `kubectl kustomize` of an overlay of deploy/ with the monitoring component.
fn with_kit() -> Vec<Value> {
    let overlay = std::env::temp_dir().join(format!("slipway-overlay-kit-{}", std::process::id()));
    std::fs::create_dir_all(&overlay).expect("overlay dir");
    let overlay = overlay.canonicalize().expect("overlay path");
    // kustomize wants paths relative to the overlay.
    let up = "../".repeat(overlay.components().count() - 1);
    let rel = |p: &str| {
        let abs = repo().join(p).canonicalize().expect("path");
        format!("{up}{}", abs.strip_prefix("/").expect("absolute").display())
    };
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n- {}\ncomponents:\n- {}\n",
            rel("deploy"),
            rel(KIT)
        ),
    )
    .expect("write overlay");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .expect("kubectl (with kustomize) is needed to check deploy/");
    let _ = std::fs::remove_dir_all(&overlay);
    assert!(
        out.status.success(),
        "kubectl kustomize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("kustomize output")
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn the_kit_builds_over_deploy_and_reaches_the_controllers_metrics_port() {
    let docs = with_kit();
    let dashboards: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    let [cm] = dashboards[..] else {
        panic!("one dashboard ConfigMap: {dashboards:?}")
    };
    assert!(
        cm["data"]["slipway.json"].as_str()
            == Some(read(&format!("{KIT}/dashboard.json")).as_str()),
        "the ConfigMap holds dashboard.json as it is"
    );
    assert_eq!(cm["metadata"]["namespace"], "system-upgrade");

    // The Service selects the controller's pods (not the agent's) and targets its port.
    let deployment = find(&docs, "Deployment");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let service = find(&docs, "Service");
    let selector = service["spec"]["selector"].as_object().expect("selector");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(&pod_labels[k], v, "the controller's pods have {k}={v}");
    }
    assert_eq!(selector["app.kubernetes.io/component"], "controller");
    let port = &service["spec"]["ports"][0];
    let container_ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("container ports");
    assert!(
        container_ports
            .iter()
            .any(|p| p["name"] == port["targetPort"]),
        "targetPort {} is a port of the container",
        port["targetPort"]
    );

    // The ServiceMonitor selects the Service and scrapes its port with slipway's own labels.
    let monitor = find(&docs, "ServiceMonitor");
    let service_labels = &service["metadata"]["labels"];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(&service_labels[k], v, "the Service has {k}={v}");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], port["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(
        endpoint["honorLabels"], true,
        "a Plan's namespace label stays"
    );

    // The PodMonitor selects the agents' pods and scrapes their metrics port.
    let agent: Value =
        serde_saphyr::from_str(&read("deploy/components/reboot-agent/daemonset.yaml"))
            .expect("the agent's DaemonSet");
    let agent_pod = &agent["spec"]["template"];
    let monitor = find(&docs, "PodMonitor");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    assert_eq!(selector["app.kubernetes.io/component"], "agent");
    for (k, v) in selector {
        assert_eq!(
            &agent_pod["metadata"]["labels"][k], v,
            "the agent's pods have {k}={v}"
        );
    }
    assert!(
        selector.iter().any(|(k, v)| pod_labels[k] != *v),
        "the controller's pods are not selected"
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let agent_ports = agent_pod["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("the agent's ports");
    assert!(
        agent_ports.iter().any(|p| p["name"] == endpoint["port"]),
        "port {} is a port of the agent",
        endpoint["port"]
    );
    assert_eq!(endpoint["path"], "/metrics");

    assert_eq!(find(&docs, "PrometheusRule")["spec"], rule_file()["spec"]);
}

/// OpenMetrics text (what `/metrics` serves) in Prometheus' classic text format, the one `promtool
/// check metrics` reads: a counter's family takes its samples' `_total` name, as Prometheus stores
/// it, and the `# UNIT` and `# EOF` lines, which the classic format has not, go.
fn classic_text(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = (openmetrics.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::new();
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[test]
fn the_classic_text_names_counters_as_prometheus_stores_them() {
    let om = "# HELP a_jobs Jobs.\n# TYPE a_jobs counter\n# UNIT a_jobs jobs\na_jobs_total 1\n\
              # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# EOF\n";
    assert_eq!(
        classic_text(om),
        "# HELP a_jobs_total Jobs.\n# TYPE a_jobs_total counter\na_jobs_total 1\n\
         # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n"
    );
}

/// Every family slipway registers, rendered as the controller serves it, passes `promtool check
/// metrics`: Prometheus' naming conventions (a counter's `_total`, base units, no `_count`, `_sum`
/// or `_bucket` of its own, snake case) and the text format, every sample with a HELP and a TYPE.
#[test]
fn promtool_accepts_the_names_and_format_of_every_family() {
    let openmetrics = exposition();
    assert!(
        openmetrics.ends_with("# EOF\n"),
        "the OpenMetrics end marker"
    );
    let text = classic_text(&openmetrics);
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    let mut stdin = child.stdin.take().expect("promtool's stdin");
    std::io::Write::write_all(&mut stdin, text.as_bytes()).expect("writing to promtool");
    drop(stdin);
    let out = child.wait_with_output().expect("promtool's answer");
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}\n--- the exposition, as promtool read it:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
