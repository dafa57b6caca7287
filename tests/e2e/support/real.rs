//! The run's real nodes: QEMU guests (`tests/nodes/`) with a real kubelet, containerd and
//! kube-proxy, joined to the run's cluster. The first scene that asks for them
//! ([`super::scene::SceneBuilder::real_nodes`]) boots them; the scenes on real nodes then take them
//! one at a time, and the last process of the run stops them with the cluster
//! (`tests/cluster/down.sh`).
//!
//! Each cluster gets its own guests: the run's shared cluster one or two pairs of workers
//! ([`pairs`]), for the scenes that start their controller as a process (a scene takes whichever
//! pair is free);
//! the installs' cluster ([`INSTALLS`]) a control-plane node ([`CONTROL_PLANE`], labelled and
//! tainted as kubeadm and kind do) and a worker ([`INSTALL_WORKER`]), for the scenes that install
//! slipway as a user would (its controller a real pod on the control-plane node). Each guest pulls
//! slipway's image by its published name ([`published_image`]) from a registry on the host that
//! its containerd takes as a mirror of the name's registry, as an air-gapped cluster's nodes do:
//! before the first boot, `tests/tools/registry/up.sh` starts the cluster's registry and
//! `scripts/publish.sh` pushes the image (`SLIPWAY_IMAGE_ARCHIVE`, else the archive
//! `scripts/image.sh` writes) to it. Each set runs its own chain of scenes ([`super::turns`] says
//! which runs when). Waits on real nodes bound a hang, not a speed: beside a full load of scenes an
//! emulated guest once took 447 s to come back from a restart and a drain Job 6.5 minutes, so
//! they are generous (the scenes' times are in the run's report).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

use super::Cluster;

/// The own cluster ([`super::own_cluster`]) of the scenes that install slipway.
pub const INSTALLS: &str = "installs";
/// The installs' control-plane node: label `node-role.kubernetes.io/control-plane` and its
/// `NoSchedule` taint.
pub const CONTROL_PLANE: &str = "real-cp";
/// The control-plane role's label and taint.
const ROLE: &str = "node-role.kubernetes.io/control-plane";
/// The installs' worker.
pub const INSTALL_WORKER: &str = "real-w";

/// A set of guests that one scene at a time takes: its turn group and its nodes.
pub struct Set {
    pub group: &'static str,
    pub nodes: &'static [&'static str],
    /// Which of [`BOOTED`] says it is up.
    index: usize,
}

/// The installs' guests.
pub const OF_INSTALLS: Set = Set {
    group: INSTALLS,
    nodes: &[CONTROL_PLANE, INSTALL_WORKER],
    index: 0,
};

/// The shared cluster's guests: two pairs of workers.
pub const PAIRS: [Set; 2] = [
    Set {
        group: "real nodes 1-2",
        nodes: &["real-1", "real-2"],
        index: 1,
    },
    Set {
        group: "real nodes 3-4",
        nodes: &["real-3", "real-4"],
        index: 2,
    },
];

/// The pairs this run uses: `SLIPWAY_E2E_REAL_PAIRS` (1 or 2; 1 by default). Under emulation the
/// guests are most of a run's CPU (73% of it in a run with three sets: an idle guest with its
/// kubelet, containerd and kube-proxy costs an eighth of a core, a working one more), so a second pair splits
/// the chain of scenes but slows every guest; with KVM it is worth it.
pub fn pairs() -> &'static [Set] {
    let n = std::env::var("SLIPWAY_E2E_REAL_PAIRS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, PAIRS.len());
    &PAIRS[..n]
}

/// Whether each set is up: booted by the first scene that takes it.
static BOOTED: [OnceCell<Result<(), String>>; 3] = [const { OnceCell::const_new() }; 3];

/// The set whose turn group is `group`.
pub fn set(group: &str) -> &'static Set {
    match PAIRS.iter().find(|p| p.group == group) {
        Some(pair) => pair,
        None => &OF_INSTALLS,
    }
}

/// The turn group of the set the guest `name` belongs to.
fn group_of(name: &str) -> &'static str {
    (PAIRS.iter())
        .find(|p| p.nodes.contains(&name))
        .map_or(INSTALLS, |p| p.group)
}

/// What a NodeMaintenance puts on its node, as medik8s's operator does: removed when a scene
/// gives the nodes back.
const MAINTENANCE_TAINT: &str = "medik8s.io/drain";
const MAINTENANCE_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";

/// The label prefix of the Plans' node labels (`plan.upgrade.cattle.io/<plan>`), removed when a
/// scene gives the nodes back: a later scene's Plan of the same name and spec would otherwise find
/// them done.
const PLAN_LABELS: &str = "plan.upgrade.cattle.io/";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of a cluster started by `tests/cluster/up.sh`: its kubeconfig's.
pub fn cluster_dir(cluster: &Cluster) -> PathBuf {
    cluster
        .kubeconfig_path()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// slipway's image archive, which the registry the guests pull from serves.
fn image_archive() -> PathBuf {
    if let Some(path) = std::env::var_os("SLIPWAY_IMAGE_ARCHIVE") {
        return PathBuf::from(path);
    }
    let version = env!("CARGO_PKG_VERSION");
    repo().join(format!("target/image/slipway-{version}.oci.tar"))
}

/// The real nodes of `set`, the control-plane node first; booted by the first call for it.
pub async fn nodes(cluster: &Cluster, set: &Set) -> Vec<String> {
    let dir = cluster_dir(cluster);
    let names = set.nodes.to_vec();
    let booting = names.clone();
    let booted = BOOTED[set.index]
        .get_or_init(|| async move {
            let signed = set.group == INSTALLS;
            tokio::task::spawn_blocking(move || boot(&dir, &booting, signed))
                .await
                .unwrap_or_else(|e| Err(format!("booting the real nodes panicked: {e}")))
        })
        .await;
    if let Err(e) = booted {
        panic!("no real nodes: {e}");
    }
    names.into_iter().map(str::to_string).collect()
}

/// The name the manifests and the chart run slipway's image by: Cargo.toml's
/// `[package.metadata.slipway] image`, tagged with the version.
pub fn published_image() -> String {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let name = (manifest.lines())
        .find_map(|l| l.strip_prefix("image = \"")?.strip_suffix('"'))
        .expect("Cargo.toml names the published image");
    format!("{name}:{}", env!("CARGO_PKG_VERSION"))
}

/// Starts the cluster's registry once and publishes slipway's image to it as a release does
/// (`scripts/publish.sh`); returns the registry's port on the host's loopback and the published
/// name's registry (`ghcr.io`), which the guests take it as a mirror of. `signed`: for the
/// cluster where slipway is installed as a user installs it, the image is signed (a key pair of
/// the cluster's own, as an operator signs their mirror) and `cosign verify` checks the published
/// name before any node boots; the release check shows that an unsigned or re-signed image fails
/// the same command.
fn registry(dir: &Path, signed: bool) -> Result<(String, String), String> {
    let image = image_archive();
    if !image.is_file() {
        return Err(format!(
            "{} is missing: build slipway's image first (`./dev image`, or \
             `SLIPWAY_IMAGE_PROFILE=dev scripts/image.sh` as CI does)",
            image.display()
        ));
    }
    let published = published_image();
    let host = published.split('/').next().unwrap_or_default().to_string();
    let tools = super::tool("tests/tools/registry/build.sh");
    let run = |cmd: &mut Command| -> Result<String, String> {
        let out = (cmd.stdin(Stdio::null()).stderr(Stdio::inherit()))
            .output()
            .map_err(|e| format!("{cmd:?}: {e}"))?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(format!("{cmd:?} failed")),
        }
    };
    let port = run(Command::new(repo().join("tests/tools/registry/up.sh")).arg(dir))?;
    let mut publish = Command::new(repo().join("scripts/publish.sh"));
    publish
        .arg(&image)
        .arg(format!("127.0.0.1:{port}"))
        .env("CRANE", tools.join("crane"));
    if !signed {
        run(&mut publish)?;
        return Ok((port, host));
    }
    let cosign = super::tool("tests/tools/cosign/build.sh");
    let keys = dir.join("cosign");
    if !keys.join("cosign.pub").is_file() {
        std::fs::create_dir_all(&keys).map_err(|e| format!("{}: {e}", keys.display()))?;
        run(Command::new(&cosign)
            .args(["generate-key-pair", "--output-key-prefix"])
            .arg(keys.join("cosign"))
            .env("COSIGN_PASSWORD", ""))?;
    }
    run(publish
        .env("COSIGN", &cosign)
        .env("COSIGN_KEY", keys.join("cosign.key"))
        .env("COSIGN_PASSWORD", ""))?;
    // As installation.md has a mirror's image checked: by its name, as the nodes pull it.
    let mirrored = format!(
        "127.0.0.1:{port}/{}",
        published.split_once('/').unwrap_or_default().1
    );
    run(Command::new(&cosign)
        .args([
            "verify",
            "--insecure-ignore-tlog=true",
            "--allow-http-registry",
            "--key",
        ])
        .arg(keys.join("cosign.pub"))
        .arg(&mirrored)
        .stdout(Stdio::null()))
    .map_err(|e| format!("the signature of {mirrored} does not verify: {e}"))?;
    Ok((port, host))
}

/// Starts the guests side by side and waits until each is Ready.
fn boot(dir: &Path, names: &[&str], signed: bool) -> Result<(), String> {
    let (port, host) = registry(dir, signed)?;
    let up = repo().join("tests/nodes/up.sh");
    let since = std::time::Instant::now();
    let mut started = Vec::new();
    for &name in names {
        // A cluster kept between test runs (SLIPWAY_TEST_KUBECONFIG) keeps its guests.
        if guest_running(dir, name) {
            continue;
        }
        let mut cmd = match dir.join("guests").join(name).exists() {
            true => Command::new(repo().join("tests/nodes/start.sh")),
            false => {
                let mut up = Command::new(&up);
                up.arg(dir).arg(name);
                up.arg("--registry-mirror").arg(format!("{host}={port}"));
                if name == CONTROL_PLANE {
                    up.arg("--control-plane");
                }
                up
            }
        };
        if dir.join("guests").join(name).exists() {
            cmd.arg(dir).arg(name);
        }
        // A set's guests boot with nothing else starting beside them (turns.rs); under load a
        // boot takes many times as long. A bound on a hang, not a speed.
        if std::env::var_os("SLIPWAY_NODES_TIMEOUT").is_none() {
            cmd.env("SLIPWAY_NODES_TIMEOUT", "1500");
        }
        let log = dir.join(format!("logs/guest-{name}-up.log"));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("{}: {e}", up.display()))?;
        started.push((name, child, log));
    }
    let mut failed = Vec::new();
    for (name, mut child, log) in started {
        match child.wait() {
            Ok(status) if status.success() => {}
            status => failed.push(format!("{name} ({status:?}):\n{}", super::log_tail(&log))),
        }
    }
    // The run's log says what a boot cost: it is the head of each chain of real scenes.
    eprintln!(
        "real nodes {} up and Ready in {} s",
        names.join(", "),
        since.elapsed().as_secs()
    );
    match failed.is_empty() {
        true => Ok(()),
        false => Err(failed.join("\n")),
    }
}

/// Puts `labels` on the real nodes (a scene's pool label among them).
pub async fn take(client: &Client, names: &[String], labels: &[(&str, &str)]) {
    let labels: Map<String, Value> = (labels.iter())
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    for name in names {
        Api::<Node>::all(client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .unwrap_or_else(|e| panic!("labelling the real node {name}: {e}"));
    }
}

/// Gives the real nodes back after the scene of namespace `ns`: each Ready again (a guest whose
/// QEMU is gone is started again), uncordoned, without the scene's labels, the Plans' labels and
/// a NodeMaintenance's taint and label, and without the scene's pods.
pub async fn give_back(
    cluster: &Cluster,
    client: &Client,
    names: &[String],
    ns: &str,
) -> anyhow::Result<()> {
    let api = Api::<Node>::all(client.clone());
    let dir = cluster_dir(cluster);
    // A guest a scene powered off is started again only for a later scene: the last scene of its
    // set stops the set (or its cluster) right after.
    let names: Vec<String> = (names.iter())
        .filter(|n| guest_running(&dir, n) || super::turns::wanted(group_of(n)))
        .cloned()
        .collect();
    for name in &names {
        if !guest_running(&dir, name) {
            start(cluster, name).await;
        }
        let node = api.get(name).await?;
        let mut labels = Map::new();
        for key in node.labels().keys() {
            if key.starts_with(PLAN_LABELS)
                || key.starts_with("slipway.test/")
                || key == MAINTENANCE_LABEL
            {
                labels.insert(key.clone(), Value::Null);
            }
        }
        let mut spec = json!({"unschedulable": null});
        // A NodeMaintenance whose scene failed leaves its taint, which no controller removes any
        // more and which would hold the node from every later operation.
        let taints = (node.spec.as_ref().and_then(|s| s.taints.clone())).unwrap_or_default();
        let kept = taints.iter().filter(|t| t.key != MAINTENANCE_TAINT);
        let mut kept: Vec<Value> = kept.map(|t| json!(t)).collect();
        if name == CONTROL_PLANE {
            // As kubeadm and kind have it, whatever the scene made of it (a k3s server).
            labels.insert(ROLE.to_string(), json!(""));
            kept = (taints.iter())
                .filter(|t| t.key != ROLE && t.key != MAINTENANCE_TAINT)
                .map(|t| json!(t))
                .collect();
            kept.push(json!({"key": ROLE, "effect": "NoSchedule"}));
            spec["taints"] = json!(kept);
        } else if kept.len() != taints.len() {
            spec["taints"] = json!(kept);
        }
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}, "spec": spec})),
        )
        .await?;
    }
    super::wait_nodes_ready_untainted(client, &names, Duration::from_secs(600)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    super::wait_for(
        &format!("the pods of {ns} to leave the real nodes"),
        Duration::from_secs(240),
        || async {
            let left = pods.list(&ListParams::default()).await?.items.len();
            match left {
                0 => Ok(()),
                n => Err(anyhow::anyhow!("{n} pods left")),
            }
        },
    )
    .await;
    Ok(())
}

/// Whether the guest's QEMU runs (its pid file names a live process).
fn guest_running(dir: &Path, name: &str) -> bool {
    std::fs::read_to_string(dir.join(format!("pids/guest-{name}.pid")))
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

/// Stops the set's guests once no scene is left for them ([`super::turns::wanted`]): an idle
/// guest under emulation costs a quarter of a host core. Their Nodes stay, NotReady. A failure is
/// told, not raised: it runs as a scene ends, maybe while it unwinds.
pub fn stop(cluster: &Cluster, set: &Set) {
    let script = repo().join("tests/nodes/kill.sh");
    for name in set.nodes {
        match Command::new(&script)
            .arg(cluster_dir(cluster))
            .arg(name)
            .stdin(Stdio::null())
            .status()
        {
            Ok(status) if status.success() => {
                eprintln!("real nodes: {name} stopped, no scene left for it")
            }
            other => eprintln!("real nodes: stopping {name} failed: {other:?}"),
        }
    }
}

/// Hard-kills the guest (its QEMU), as a power cut would; its disk stays.
pub fn kill(cluster: &Cluster, name: &str) {
    run(&repo().join("tests/nodes/kill.sh"), cluster, name);
}

/// Starts the guest again from its disk and waits until its node is Ready with a new boot ID.
pub async fn start(cluster: &Cluster, name: &str) {
    let (script, cluster, name) = (
        repo().join("tests/nodes/start.sh"),
        cluster.clone(),
        name.to_string(),
    );
    tokio::task::spawn_blocking(move || run(&script, &cluster, &name))
        .await
        .expect("start.sh's thread");
}

fn run(script: &Path, cluster: &Cluster, name: &str) {
    let status = Command::new(script)
        .arg(cluster_dir(cluster))
        .arg(name)
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(status.success(), "{} {name}: {status}", script.display());
}

/// A Deployment `app` of busybox pods that are Ready at once and end at once on SIGTERM (a drain
/// of them is quick), placed by `placement` (pod spec lines, such as a `nodeSelector`, indented
/// by 6), with a PodDisruptionBudget when `min_available` says so: what the real scenes drain.
/// No probe: a pod is Ready once its container runs. An exec probe is a container runtime call
/// each time, which under emulation costs the guest more than the pods themselves
/// (docs/testing.md, "How long a run takes, and why").
pub fn sleepers(
    ns: &str,
    app: &str,
    replicas: u32,
    placement: &str,
    min_available: Option<u32>,
) -> String {
    let mut yaml = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec:
{placement}
      terminationGracePeriodSeconds: 5
      containers:
      - name: {app}
        image: busybox:1.37
        command: [sh, -c, "trap 'exit 0' TERM; sleep 2147483647 & wait"]
"#
    );
    if let Some(min) = min_available {
        yaml.push_str(&format!(
            r#"---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {app}, namespace: {ns}}}
spec:
  minAvailable: {min}
  selector: {{matchLabels: {{app: {app}}}}}
"#
        ));
    }
    yaml
}
