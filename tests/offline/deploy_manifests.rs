//! Offline checks of `deploy/` (the kustomize base): it carries the committed CRD, the ConfigMap
//! holds SUC's manifest values under names slipway reads, and the Deployment keeps its security
//! settings; dist/slipway.yaml is its build. Its image is checked with the other published names
//! (names.rs). tests/e2e/rbac.rs installs it on a cluster; tests/offline/chart.rs compares the Helm
//! chart with it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn yaml<T: serde::de::DeserializeOwned>(path: &str) -> T {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

#[test]
fn deploy_carries_the_committed_crd() {
    assert!(
        read("deploy/plans.upgrade.cattle.io.yaml") == read("crds/plans.upgrade.cattle.io.yaml"),
        "deploy/plans.upgrade.cattle.io.yaml differs from crds/plans.upgrade.cattle.io.yaml: \
         run `just crd` and commit both"
    );
}

fn run_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(["run", "--help"])
        .output()
        .expect("slipway run --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_config_map_has_suc_values_under_names_slipway_reads() {
    let cm: ConfigMap = yaml("deploy/configmap.yaml");
    assert_eq!(cm.metadata.name.as_deref(), Some("default-controller-env"));
    let data: BTreeMap<String, String> = cm.data.expect("data");
    let expect = [
        ("SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS", "900"),
        ("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "99"),
        ("SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY", "Always"),
        (
            "SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE",
            "rancher/kubectl:v1.30.3",
        ),
        ("SYSTEM_UPGRADE_JOB_PRIVILEGED", "true"),
        ("SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH", "900"),
        ("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "15m"),
        ("SYSTEM_UPGRADE_CONTROLLER_LEADER_ELECT", "true"),
    ];
    for (k, v) in expect {
        assert_eq!(data.get(k).map(String::as_str), Some(v), "{k}");
    }

    // The job settings parse without a warning and mean what SUC's manifest means.
    let env = slipway::plan::core::config::EnvSettings::from_lookup(|k| data.get(k).cloned());
    assert!(env.warnings.is_empty(), "{:?}", env.warnings);
    assert_eq!(env.job.active_deadline_seconds, 900);
    assert_eq!(env.job.backoff_limit, 99);
    assert_eq!(env.job.image_pull_policy, "Always");
    assert_eq!(env.job.ttl_seconds_after_finished, 900);
    assert_eq!(env.polling_interval.as_secs(), 15 * 60);

    // Every other key is a `slipway run` option; leader election is still being added.
    let help = run_help();
    for key in data.keys() {
        let job_setting =
            key.starts_with("SYSTEM_UPGRADE_JOB_") || key == "SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL";
        let option = help.contains(&format!("[env: {key}="));
        let pending =
            key == "SYSTEM_UPGRADE_CONTROLLER_LEADER_ELECT" && !help.contains("--leader-elect");
        assert!(
            job_setting || option || pending,
            "deploy/configmap.yaml sets {key}, which slipway does not read"
        );
    }
}

/// The account health checks read as runs nothing: no token is mounted for it, and no pod of
/// deploy/ or the chart names it, so no node ever holds its token.
#[test]
fn the_health_checks_account_runs_nothing() {
    const ACCOUNT: &str = "system-upgrade-health-checks";
    for file in ["deploy/rbac.yaml", "charts/slipway/templates/rbac.yaml"] {
        let text = read(file);
        let account = text
            .split("\n---\n")
            .find(|d| {
                d.contains("kind: ServiceAccount") && d.contains(&format!("name: {ACCOUNT}\n"))
            })
            .unwrap_or_else(|| panic!("{file} makes the ServiceAccount {ACCOUNT}"));
        assert!(
            account.contains("automountServiceAccountToken: false"),
            "{file}: {account}"
        );
    }
    let mut manifests = Vec::new();
    for dir in ["deploy", "deploy/components", "charts/slipway/templates"] {
        let mut stack = vec![repo().join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d)
                .expect("a manifests directory")
                .flatten()
            {
                let path = entry.path();
                match path.is_dir() {
                    true => stack.push(path),
                    false => manifests.push(path),
                }
            }
        }
    }
    for path in manifests {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            !text.contains(&format!("serviceAccountName: {ACCOUNT}")),
            "{} runs a pod as {ACCOUNT}",
            path.display()
        );
    }
}

#[test]
fn the_deployment_runs_locked_down_with_suc_identity() {
    let d: Deployment = yaml("deploy/deployment.yaml");
    let spec = d.spec.expect("spec");
    let pod = spec.template.spec.expect("pod spec");
    let labels = spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .expect("labels");
    assert_eq!(
        labels
            .get("upgrade.cattle.io/controller")
            .map(String::as_str),
        Some("system-upgrade-controller"),
        "the pod label that names the controller and keeps drains off it"
    );
    // Its own account: the Jobs' system-upgrade (which Plans name) holds a drain's rights only.
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("system-upgrade-controller")
    );
    let psc = pod.security_context.expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65534));
    let [c] = &pod.containers[..] else {
        panic!("one container")
    };
    assert_eq!(c.image.as_deref(), Some("ghcr.io/slipway-dev/slipway"));
    assert_eq!(c.args.as_deref(), Some(&["run".to_string()][..]));
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(probe_path(&c.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(probe_path(&c.readiness_probe).as_deref(), Some("/readyz"));
    let resources = c.resources.as_ref().expect("resources");
    assert!(
        resources
            .requests
            .as_ref()
            .is_some_and(|r| r.contains_key("cpu"))
    );
    assert!(
        resources
            .limits
            .as_ref()
            .is_some_and(|l| l.contains_key("memory"))
    );
    let env: BTreeMap<&str, String> = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let field = e
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.clone())
                .unwrap_or_default();
            (e.name.as_str(), field)
        })
        .collect();
    assert_eq!(
        env.get("SYSTEM_UPGRADE_CONTROLLER_NAME")
            .map(String::as_str),
        Some("metadata.labels['upgrade.cattle.io/controller']")
    );
    assert_eq!(
        env.get("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE")
            .map(String::as_str),
        Some("metadata.namespace")
    );
    assert_eq!(
        env.get("SYSTEM_UPGRADE_CONTROLLER_NODE_NAME")
            .map(String::as_str),
        Some("spec.nodeName")
    );
    assert_eq!(
        c.env_from
            .as_ref()
            .and_then(|e| e[0].config_map_ref.as_ref())
            .map(|r| r.name.as_str()),
        Some("default-controller-env")
    );
}

fn kubectl_kustomize(dir: &std::path::Path) -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl (with kustomize) is needed to check deploy/");
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn kustomize_builds_it_and_an_overlay_can_move_it_to_another_namespace() {
    let base = kubectl_kustomize(&repo().join("deploy"));
    assert!(base.contains(&format!(
        "image: ghcr.io/slipway-dev/slipway:{}",
        env!("CARGO_PKG_VERSION")
    )));

    let overlay = std::env::temp_dir().join(format!("slipway-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&overlay).expect("overlay dir");
    let overlay = overlay.canonicalize().expect("overlay path");
    // kustomize wants a relative path to the base.
    let up = "../".repeat(overlay.components().count() - 1);
    let base = repo().join("deploy").canonicalize().expect("deploy/ path");
    let base = format!(
        "{up}{}",
        base.strip_prefix("/").expect("absolute").display()
    );
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "namespace: elsewhere\nresources:\n- {base}\nimages:\n- {{name: ghcr.io/slipway-dev/slipway, newName: registry.example.com/slipway, newTag: \"9.9.9\"}}\n"
        ),
    )
    .expect("write overlay");
    let out = kubectl_kustomize(&overlay);
    let _ = std::fs::remove_dir_all(&overlay);
    assert!(out.contains("image: registry.example.com/slipway:9.9.9"));
    assert!(
        !out.contains("namespace: system-upgrade"),
        "every namespaced object and binding subject moves"
    );
    assert!(
        out.contains("  name: elsewhere\n"),
        "the Namespace is renamed"
    );
}

#[test]
fn the_base_carries_the_committed_disruption_budget_crd_and_its_rights() {
    let name = "disruptionbudgets.slipway.dev.yaml";
    assert!(
        read(&format!("deploy/{name}")) == read(&format!("crds/{name}")),
        "deploy/{name} differs from crds/{name}: run `just crd`"
    );
    let base = kubectl_kustomize(&repo().join("deploy"));
    assert!(base.contains("name: disruptionbudgets.slipway.dev"));
    assert!(
        base.contains("resources:\n  - disruptionbudgets/status"),
        "{base}"
    );
    assert!(
        !base.contains("SLIPWAY_DISRUPTION_BUDGETS"),
        "on by default"
    );
}

#[test]
fn the_maintenance_component_carries_the_committed_crd() {
    let name = "nodemaintenances.nodemaintenance.medik8s.io.yaml";
    assert!(
        read(&format!("deploy/components/maintenance/{name}")) == read(&format!("crds/{name}")),
        "deploy/components/maintenance/{name} differs from crds/{name}: run `just crd`"
    );
}

/// `kubectl kustomize` of an overlay of deploy/ with one component.
fn with_component(component: &str) -> String {
    with_components(&[component])
}

/// `kubectl kustomize` of an overlay of deploy/ with these components, in this order.
fn with_components(components: &[&str]) -> String {
    let overlay = std::env::temp_dir().join(format!(
        "slipway-overlay-{}-{}",
        components.join("+").replace('/', "-"),
        std::process::id()
    ));
    std::fs::create_dir_all(&overlay).expect("overlay dir");
    let overlay = overlay.canonicalize().expect("overlay path");
    let up = "../".repeat(overlay.components().count() - 1);
    let rel = |p: &str| {
        let abs = repo().join(p).canonicalize().expect("path");
        format!("{up}{}", abs.strip_prefix("/").expect("absolute").display())
    };
    let mut kustomization = format!("resources:\n- {}\ncomponents:\n", rel("deploy"));
    for c in components {
        kustomization += &format!("- {}\n", rel(c));
    }
    std::fs::write(overlay.join("kustomization.yaml"), kustomization).expect("write overlay");
    let out = kubectl_kustomize(&overlay);
    let _ = std::fs::remove_dir_all(&overlay);
    out
}

#[test]
fn an_overlay_with_the_maintenance_component_enables_it_with_its_rights() {
    let out = with_component("deploy/components/maintenance");
    assert!(out.contains("SLIPWAY_MAINTENANCE: \"true\""), "{out}");
    assert!(out.contains("name: nodemaintenances.nodemaintenance.medik8s.io"));
    assert!(out.contains("resources:\n  - pods/eviction"), "{out}");
    assert!(out.contains("namespace: medik8s-leases"));
    let base = kubectl_kustomize(&repo().join("deploy"));
    assert!(
        !base.contains("SLIPWAY_MAINTENANCE"),
        "Plans alone do not change"
    );
    assert!(!base.contains("name: nodemaintenances.nodemaintenance.medik8s.io"));
    assert!(!base.contains("resources:\n  - nodemaintenances"));
}

#[test]
fn the_reboot_policy_component_carries_the_committed_crd_and_enables_it() {
    let name = "rebootpolicies.slipway.dev.yaml";
    assert!(
        read(&format!("deploy/components/reboot-policy/{name}")) == read(&format!("crds/{name}")),
        "deploy/components/reboot-policy/{name} differs from crds/{name}: run `just crd`"
    );
    let out = with_component("deploy/components/reboot-policy");
    assert!(out.contains("SLIPWAY_REBOOT_POLICIES: \"true\""), "{out}");
    assert!(out.contains("name: rebootpolicies.slipway.dev"));
    assert!(
        out.contains("resources:\n  - rebootpolicies/status"),
        "{out}"
    );
    assert!(out.contains("resources:\n  - pods/eviction"), "{out}");
    let base = kubectl_kustomize(&repo().join("deploy"));
    assert!(
        !base.contains("SLIPWAY_REBOOT_POLICIES"),
        "Plans alone do not change"
    );
    assert!(!base.contains("rebootpolicies"));
}

#[test]
fn the_kairos_component_carries_the_committed_crd_and_enables_nodeops() {
    for name in [
        "nodeops.operator.kairos.io.yaml",
        "nodeopupgrades.operator.kairos.io.yaml",
    ] {
        assert!(
            read(&format!("deploy/components/kairos/{name}")) == read(&format!("crds/{name}")),
            "deploy/components/kairos/{name} differs from crds/{name}: run `just crd`"
        );
    }
    let out = with_component("deploy/components/kairos");
    assert!(out.contains("SLIPWAY_NODEOPS: \"true\""), "{out}");
    assert!(out.contains("name: nodeops.operator.kairos.io"));
    assert!(out.contains("name: nodeopupgrades.operator.kairos.io"));
    assert!(out.contains("resources:\n  - nodeops/status"), "{out}");
    assert!(out.contains("resources:\n  - jobs"), "{out}");
    assert!(out.contains("resources:\n  - pods/eviction"), "{out}");
    let base = kubectl_kustomize(&repo().join("deploy"));
    assert!(
        !base.contains("SLIPWAY_NODEOPS"),
        "Plans alone do not change"
    );
    assert!(!base.contains("nodeops"));
}

#[test]
fn the_reboot_agent_component_runs_unprivileged_on_every_node() {
    let out = with_component("deploy/components/reboot-agent");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&out).expect("kustomize output parses");
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"], "ghcr.io/slipway-dev/slipway:0.1.0",
        "the base's image"
    );
    assert_eq!(container["args"][0], "agent");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert!(pod["hostPID"].is_null() && pod["hostNetwork"].is_null());
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    assert!(mounts.iter().all(|m| m["readOnly"] == true), "{mounts:?}");
    let host_paths: Vec<&serde_json::Value> = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| &v["hostPath"]["path"])
        .collect();
    assert_eq!(host_paths, ["/var/run", "/etc"]);
    assert!(
        container["env"]
            .as_array()
            .expect("env")
            .contains(&serde_json::json!({"name": "SLIPWAY_AGENT_HOST_ETC", "value": "/host/etc"}))
    );
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "slipway-agent")
        .expect("the agent's ClusterRole");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}])
    );
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "ValidatingAdmissionPolicy")
    );
    let base = kubectl_kustomize(&repo().join("deploy"));
    assert!(!base.contains("slipway-agent"), "Plans alone do not change");
}

/// The DaemonSet of a kustomize output.
fn daemon_set(out: &str) -> serde_json::Value {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(out).expect("kustomize output parses");
    docs.into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet")
}

/// The update-engine option adds the host's system bus socket, read-only, and runs the agent as
/// Flatcar's `core`, still not root; nothing else changes.
#[test]
fn the_update_engine_option_adds_only_the_bus_socket_and_the_uid() {
    let base = daemon_set(&with_component("deploy/components/reboot-agent"));
    let mut with = daemon_set(&with_components(&[
        "deploy/components/reboot-agent",
        "deploy/components/reboot-agent/update-engine",
    ]));
    let pod = &mut with["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"], 500);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    pod["securityContext"]["runAsUser"] = 65534.into();
    let volumes = pod["volumes"].as_array_mut().expect("volumes");
    assert_eq!(
        volumes.remove(0),
        serde_json::json!({"name": "host-dbus", "hostPath": {"path": "/run/dbus/system_bus_socket", "type": "Socket"}})
    );
    let container = &mut pod["containers"][0];
    let mounts = container["volumeMounts"].as_array_mut().expect("mounts");
    assert_eq!(
        mounts.remove(0),
        serde_json::json!({"name": "host-dbus", "mountPath": "/host/run/dbus/system_bus_socket", "readOnly": true})
    );
    let env = container["env"].as_array_mut().expect("env");
    let added: Vec<serde_json::Value> = env.drain(..2).collect();
    assert_eq!(
        added,
        [
            serde_json::json!({"name": "SLIPWAY_AGENT_UPDATE_ENGINE", "value": "true"}),
            serde_json::json!({"name": "SLIPWAY_AGENT_DBUS_ADDRESS", "value": "unix:path=/host/run/dbus/system_bus_socket"}),
        ]
    );
    assert_eq!(
        with, base,
        "the option changes only the uid, the socket and the env"
    );
}

/// The host-command option is what the command in the host's namespaces needs, and nothing else:
/// the host's PID namespace, root, a privileged container, and the command's env.
#[test]
fn the_host_command_option_adds_only_what_entering_the_host_needs() {
    let base = daemon_set(&with_component("deploy/components/reboot-agent"));
    let mut with = daemon_set(&with_components(&[
        "deploy/components/reboot-agent",
        "deploy/components/reboot-agent/host-command",
    ]));
    let pod = &mut with["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    pod.as_object_mut().expect("a pod spec").remove("hostPID");
    let security = &mut pod["securityContext"];
    assert_eq!(
        (
            &security["runAsUser"],
            &security["runAsGroup"],
            &security["runAsNonRoot"]
        ),
        (&0.into(), &0.into(), &false.into())
    );
    security["runAsUser"] = 65534.into();
    security["runAsGroup"] = 65534.into();
    security["runAsNonRoot"] = true.into();
    let container = &mut pod["containers"][0];
    let security = &mut container["securityContext"];
    assert_eq!(security["privileged"], true);
    security
        .as_object_mut()
        .expect("a securityContext")
        .remove("privileged");
    security["allowPrivilegeEscalation"] = false.into();
    let env = container["env"].as_array_mut().expect("env");
    let added: Vec<serde_json::Value> = env.drain(..2).collect();
    assert_eq!(
        added,
        [
            serde_json::json!({"name": "SLIPWAY_AGENT_SENTINEL_COMMAND", "value": "sh -c '! needs-restarting -r'"}),
            serde_json::json!({"name": "SLIPWAY_AGENT_SENTINEL_IN_HOST", "value": "true"}),
        ]
    );
    assert_eq!(
        with, base,
        "the option changes only the PID namespace, the user, the privilege and the env"
    );
}

/// The leading comment lines of a manifest, and its objects.
fn header_and_objects(manifest: &str) -> (String, Vec<serde_json::Value>) {
    let header: String = manifest
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let objects = serde_saphyr::from_multiple(manifest).expect("manifest parses");
    (header, objects)
}

#[test]
fn the_release_manifest_is_deploy_built() {
    let out = Command::new(repo().join("scripts/release-manifest.sh"))
        .output()
        .expect("scripts/release-manifest.sh (needs kubectl)");
    assert!(
        out.status.success(),
        "scripts/release-manifest.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (want_header, want) = header_and_objects(&String::from_utf8_lossy(&out.stdout));
    assert!(want_header.contains(&format!("slipway {}", env!("CARGO_PKG_VERSION"))));
    // Objects, not bytes: another kubectl may lay out the same objects differently.
    let (header, objects) = header_and_objects(&read("dist/slipway.yaml"));
    assert!(
        header == want_header && objects == want,
        "dist/slipway.yaml is out of date with deploy/: run `just release-manifest` and commit it"
    );
    let crds: Vec<&serde_json::Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(
        crds,
        ["disruptionbudgets.slipway.dev", "plans.upgrade.cattle.io"],
        "the Plan and DisruptionBudget CRDs"
    );
}
