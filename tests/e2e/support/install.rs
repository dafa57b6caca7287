//! slipway installed as a user would (`kubectl apply -k deploy/`, an overlay of it with a
//! component, `dist/slipway.yaml`), for the scenes that test the install itself. Such a scene
//! runs alone: the install has fixed names (the namespace `system-upgrade`, ClusterRoles).
//!
//! [`Install`] records what was applied and removes it when dropped, passed or failed: every
//! object but the CRDs (every scene uses them) and the namespaces other than `system-upgrade`
//! (medik8s' Lease namespace is shared with other scenes), each gone before the scene ends (so no
//! DaemonSet of it puts pods on the nodes of the scenes after it); then the namespace, whose
//! deletion the next install waits for.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::Cluster;

/// The install's namespace.
pub const NS: &str = "system-upgrade";

/// What a scene installed; removed when dropped (see the module's documentation).
pub struct Install {
    kubeconfig: PathBuf,
    /// `apiVersion`, `kind` and `metadata` (name, namespace) of each object applied.
    objects: Vec<Value>,
}

/// Waits while an earlier install's namespace is being deleted: a scene about to install calls it
/// before it takes the cluster alone, so that other scenes run meanwhile.
pub async fn wait_for_earlier_removal(cluster: &Cluster) {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces = kube::Api::<Namespace>::all(cluster.client().await);
    super::wait_for(
        &format!("the namespace {NS} of an earlier install to go"),
        // Its pods on real nodes end at an emulated kubelet's pace: minutes beside CI's scenes.
        std::time::Duration::from_secs(600),
        || async {
            let ns = namespaces.get_opt(NS).await?;
            match ns.and_then(|n| n.status).and_then(|s| s.phase).as_deref() {
                Some("Terminating") => Err(anyhow::anyhow!("Terminating")),
                _ => Ok(()),
            }
        },
    )
    .await;
}

impl Install {
    /// Nothing installed yet: an earlier install's namespace, if one is left, is gone.
    pub async fn new(cluster: &Cluster) -> Install {
        super::remove_namespace(&cluster.client().await, NS).await;
        Install {
            kubeconfig: cluster.kubeconfig_path().to_path_buf(),
            objects: Vec::new(),
        }
    }

    /// `kubectl apply -k <dir>`, as a user types it; its objects are removed at the end.
    pub async fn apply_kustomization(&mut self, cluster: &Cluster, dir: &Path) {
        let dir = dir.display().to_string();
        let rendered = cluster
            .kubectl(&["kustomize", &dir])
            .await
            .unwrap_or_else(|e| panic!("kubectl kustomize {dir}: {e}"));
        self.record(&rendered);
        cluster
            .kubectl(&["apply", "-k", &dir])
            .await
            .unwrap_or_else(|e| panic!("kubectl apply -k {dir}: {e}"));
    }

    /// `kubectl apply -f <manifest>` (`what` names it) for a cluster whose nodes reach no
    /// registry (the real nodes): the same objects, but the ConfigMap's
    /// `SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY` is `IfNotPresent`, as an operator of an air-gapped
    /// cluster sets it (SUC's manifest's `Always` would ask a registry for every Job's images).
    /// Its objects are removed at the end.
    pub async fn apply_air_gapped(&mut self, cluster: &Cluster, manifest: &str, what: &str) {
        let air_gapped = air_gapped(manifest);
        self.record(&air_gapped);
        cluster
            .kubectl_stdin(&["apply", "-f", "-"], Some(&air_gapped))
            .await
            .unwrap_or_else(|e| panic!("kubectl apply the air-gapped {what}: {e}"));
    }

    /// `helm install slipway <chart> --namespace system-upgrade --create-namespace`, as a user
    /// installs the chart, for a cluster whose nodes reach no registry: the value
    /// `config.SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY=IfNotPresent`. `--take-ownership`, because
    /// the CRDs the chart holds are there already (every scene applies them; a user upgrading
    /// from SUC or `kubectl apply` has them too). Its objects (from `helm template` of the same
    /// values) are removed at the end; Helm's release record goes with the namespace.
    pub async fn helm_install_air_gapped(&mut self, cluster: &Cluster, chart: &Path) {
        const AIR_GAPPED: &str = "config.SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY=IfNotPresent";
        let chart = chart.display().to_string();
        let helm = |args: Vec<String>| run_helm(cluster, args);
        let args = |verb: &str| -> Vec<String> {
            [
                verb,
                "slipway",
                &chart,
                "--namespace",
                NS,
                "--set",
                AIR_GAPPED,
            ]
            .map(str::to_string)
            .to_vec()
        };
        let rendered = helm(args("template")).await;
        assert!(
            rendered.contains("SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY: \"IfNotPresent\""),
            "the chart's config value sets the Jobs' pull policy"
        );
        self.record(&rendered);
        let mut install = args("install");
        install.extend(["--create-namespace", "--take-ownership"].map(str::to_string));
        helm(install).await;
    }

    /// Runs the uninstall of charts/slipway/README.md (its "Uninstalling" commands, as an
    /// operator pastes them) while the controller runs, then checks that nothing the chart made is
    /// left: every object `helm template` rendered, the CRDs and the namespace are gone.
    pub async fn uninstall_as_the_chart_readme_says(&mut self, cluster: &Cluster) {
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/slipway/README.md");
        let text = std::fs::read_to_string(&readme).expect("the chart's README");
        let section = text
            .split("## Uninstalling")
            .nth(1)
            .expect("the chart's README has an Uninstalling section");
        let block = section
            .split("```bash\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .expect("a bash block in Uninstalling");
        for line in block.lines().map(str::trim) {
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            match words.first().map(String::as_str) {
                None | Some("#") => {}
                Some("kubectl") => {
                    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
                    let done =
                        tokio::time::timeout(Duration::from_secs(600), cluster.kubectl(&args));
                    match done.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => panic!("{line}: {e}"),
                        Err(_) => panic!("{line}: still waiting after 600 s"),
                    }
                }
                Some("helm") => {
                    run_helm(cluster, words[1..].to_vec()).await;
                }
                Some(other) if other.starts_with('#') => {}
                Some(_) => panic!("an unexpected command in the chart's uninstall: {line}"),
            }
        }
        let left = self.left(cluster).await;
        assert!(
            left.is_empty(),
            "left after the chart's uninstall: {left:?}"
        );
        restore_crds(cluster).await;
    }

    /// `kubectl delete -f` of the manifest applied by [`Install::apply_air_gapped`], as
    /// docs/installation.md removes it (`kubectl delete -f dist/slipway.yaml`) while the
    /// controller runs, the Plans in its namespace and CRD left as they are: it must complete
    /// with no finalizer removed by hand, and leave nothing the manifest made.
    pub async fn delete_manifest(&mut self, cluster: &Cluster, manifest: &str, what: &str) {
        let applied = air_gapped(manifest);
        let deleting = cluster.kubectl_stdin(&["delete", "-f", "-"], Some(&applied));
        match tokio::time::timeout(Duration::from_secs(300), deleting).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("kubectl delete -f {what}: {e}"),
            Err(_) => panic!("kubectl delete -f {what}: still waiting after 300 s"),
        }
        let left = self.left(cluster).await;
        assert!(
            left.is_empty(),
            "left after kubectl delete -f {what}: {left:?}"
        );
        restore_crds(cluster).await;
    }

    /// What is left of the install: each object it recorded, its namespace and the CRDs.
    async fn left(&self, cluster: &Cluster) -> Vec<String> {
        let mut left = Vec::new();
        for o in &self.objects {
            let (kind, name) = (
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or(""),
            );
            let mut args = vec!["get", kind, name, "--ignore-not-found", "-o", "name"];
            if let Some(ns) = o["metadata"]["namespace"].as_str() {
                args.extend(["-n", ns]);
            }
            let found = cluster
                .kubectl(&args)
                .await
                .unwrap_or_else(|e| format!("{kind}/{name}: {e}"));
            if !found.trim().is_empty() {
                left.push(found.trim().to_string());
            }
        }
        for (kind, name) in [
            ("namespace", NS),
            ("crd", "plans.upgrade.cattle.io"),
            ("crd", "disruptionbudgets.slipway.dev"),
        ] {
            let found = cluster
                .kubectl(&["get", kind, name, "--ignore-not-found", "-o", "name"])
                .await
                .unwrap_or_else(|e| format!("{kind}/{name}: {e}"));
            if !found.trim().is_empty() {
                left.push(found.trim().to_string());
            }
        }
        left
    }

    /// Records the objects of a manifest that the scene applies itself (the README's commands),
    /// so that they are removed at the end.
    pub fn record_manifest(&mut self, file: &Path) {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        self.record(&text);
    }

    fn record(&mut self, yaml: &str) {
        let docs = serde_saphyr::from_multiple::<Value>(yaml).expect("the install's YAML");
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            self.objects.push(json!({
                "apiVersion": doc["apiVersion"],
                "kind": doc["kind"],
                "metadata": {"name": doc["metadata"]["name"], "namespace": doc["metadata"]["namespace"]},
            }));
        }
    }
}

/// Applies the Plan and DisruptionBudget CRDs again after an uninstall removed them: the scene's
/// own clean-up and the next scenes on the cluster read Plans and budgets. Waited for through the
/// API, not `kubectl wait`: a CRD read just after its creation can have `status.conditions: null`,
/// which `kubectl wait --for=condition=Established` takes for an error, not for "not yet".
async fn restore_crds(cluster: &Cluster) {
    let client = cluster.client().await;
    super::install_crds(
        &client,
        &["plans.upgrade.cattle.io", "disruptionbudgets.slipway.dev"],
    )
    .await;
}

/// `helm <args>` against `cluster`; its output, or a panic naming what failed.
async fn run_helm(cluster: &Cluster, args: Vec<String>) -> String {
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(helm())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("run helm: {e}"));
        assert!(
            out.status.success(),
            "helm {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .expect("helm's thread")
}

/// The cached Helm binary (`tests/tools/helm/build.sh` builds it on first use).
pub fn helm() -> PathBuf {
    static HELM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    (HELM.get_or_init(|| super::tool("tests/tools/helm/build.sh"))).clone()
}

/// The install's manifest with the Jobs' image pull policy `IfNotPresent`.
/// A directory holding an overlay of deploy/ with `components` (paths from the repository, e.g.
/// `deploy/components/maintenance`), as a user writes one; the caller removes it.
pub fn overlay(components: &[&str]) -> PathBuf {
    let overlay = std::env::temp_dir().join(super::unique_name("slipway-overlay"));
    std::fs::create_dir_all(&overlay).expect("overlay directory");
    // kustomize takes a base and a component from anywhere by a relative path.
    let up = "../".repeat(overlay.components().count().saturating_sub(1));
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let rel = |p: &str| {
        format!(
            "{up}{}",
            repo.join(p).display().to_string().trim_start_matches('/')
        )
    };
    let components: Vec<String> = components.iter().map(|c| rel(c)).collect();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{}]\ncomponents: [{}]\n",
            rel("deploy"),
            components.join(", ")
        ),
    )
    .expect("write the overlay");
    overlay
}

pub fn air_gapped(manifest: &str) -> String {
    const ALWAYS: &str = "SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY: Always";
    const QUOTED: &str = "SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY: \"Always\"";
    assert!(
        manifest.contains(ALWAYS) || manifest.contains(QUOTED),
        "the install sets the Jobs' pull policy to Always"
    );
    manifest
        .replace(QUOTED, ALWAYS)
        .replace(ALWAYS, "SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY: IfNotPresent")
}

impl Drop for Install {
    fn drop(&mut self) {
        let removed: Vec<&Value> = (self.objects.iter().rev())
            .filter(|o| o["kind"] != "CustomResourceDefinition" && o["kind"] != "Namespace")
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": removed});
        let kubeconfig = self.kubeconfig.clone();
        // A thread and a runtime of its own: this may run while unwinding inside the scene's.
        let done = std::thread::spawn(move || {
            if let Err(e) = delete_objects(&kubeconfig, &list.to_string()) {
                eprintln!("removing the install: {e}");
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let client = Cluster { kubeconfig }.client().await;
                delete_namespace(&client).await;
            });
        })
        .join();
        if done.is_err() {
            eprintln!("removing the install's namespace {NS} failed");
        }
    }
}

/// Deletes the namespace, without waiting; its Plans' finalizers, which no controller is left to
/// remove, go too.
async fn delete_namespace(client: &kube::Client) {
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(NS, &DeleteParams::background())
        .await;
    let plans = Api::<slipway::plan::api::Plan>::namespaced(client.clone(), NS);
    let Ok(list) = plans.list(&ListParams::default()).await else {
        return;
    };
    for plan in list.items {
        let _ = plans
            .patch(
                &plan.metadata.name.unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
}

/// `kubectl delete` of the objects of `list` (a v1 List), waiting until each is gone.
fn delete_objects(kubeconfig: &Path, list: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["delete", "--ignore-not-found", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("kubectl's stdin")
        .write_all(list.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl delete: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
