//! The README's quick start, with slipway's image as the controller.
//!
//! `scripts/image.sh` builds the image archive (twice: the digest must not change), ocicheck
//! reads it as `docker load` and containerd would, and the test unpacks its one layer into a root
//! filesystem holding nothing but the image. Then it runs the README's quick-start commands (the
//! ```bash blocks after a `<!-- quickstart -->` line) against the local cluster, and after the
//! first block (the install) it plays the kubelet for the controller's pod: the image's entrypoint
//! and user, the pod's arguments and environment resolved from its spec, a service-account token
//! and the cluster's CA where a pod has them, `KUBERNETES_SERVICE_HOST/PORT` set, in a chroot of
//! that root filesystem. kwok only pretends to run the pod; this process is the controller. The
//! quick start's Plan must complete, `/metrics` must answer, and a channel given by host name
//! must resolve inside the image (no glibc NSS there).
//!
//! One scene, on a cluster of its own (the install's fixed names; the quick start's Plan runs on
//! every node); the image is built before it takes the cluster, and the install is removed when
//! it ends.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::install::{self, Install, NS};
use crate::support::process::ChildProcess;
use crate::support::scene::Scene;
use kube::api::{Api, PostParams};
use serde_json::Value;
use slipway::plan::api::Plan;

const CONTROLLER_LABEL: &str = "upgrade.cattle.io/controller=system-upgrade-controller";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The quick start's command blocks, in order: each ```bash block right after a
/// `<!-- quickstart -->` line, as the lines a shell would run (continuations joined).
pub(crate) fn quickstart_blocks(readme: &str) -> Vec<Vec<String>> {
    marked_blocks(readme, "<!-- quickstart -->")
}

/// The ```bash blocks right after a `marker` line, as [`quickstart_blocks`] reads them.
pub(crate) fn marked_blocks(readme: &str, marker: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line.trim() != marker {
            continue;
        }
        let fence = lines.next().unwrap_or_default();
        assert_eq!(
            fence.trim(),
            "```bash",
            "a {marker} line must be followed by a ```bash block"
        );
        let mut commands = Vec::new();
        let mut pending = String::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.strip_suffix('\\') {
                Some(head) => pending.push_str(&format!("{} ", head.trim_end())),
                None => {
                    commands.push(format!("{pending}{line}"));
                    pending.clear();
                }
            }
        }
        blocks.push(commands);
    }
    blocks
}

#[test]
fn quickstart_blocks_are_read_as_a_shell_would() {
    let readme = "intro\n<!-- quickstart -->\n```bash\n# install\nkubectl apply \\\n  -f x.yaml\n\nkubectl get y\n```\n```bash\nnot this\n```\n<!-- quickstart -->\n```bash\necho two\n```\n";
    assert_eq!(
        quickstart_blocks(readme),
        vec![
            vec![
                "kubectl apply -f x.yaml".to_string(),
                "kubectl get y".to_string()
            ],
            vec!["echo two".to_string()],
        ]
    );
}

/// Runs `scripts/image.sh OUT`; the manifest digest it prints last.
///
/// Without the variables `cargo test` gives this process: build scripts (ring's, through `cc`)
/// ask to run again when `CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR` and the like change, so image.sh's
/// cargo, seeing the test's, compiled ring and everything above it again (minutes of CPU at the
/// start of a run, taken from the real nodes booting) instead of finding CI's compile fresh.
fn build_image(out: &Path) -> String {
    let mut cmd = Command::new(repo().join("scripts/image.sh"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let from_cargo_test = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_EXE_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || [
                "CARGO",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref());
        if from_cargo_test {
            cmd.env_remove(name.as_ref());
        }
    }
    let output = cmd
        .arg(out)
        .current_dir(repo())
        .output()
        .expect("run scripts/image.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scripts/image.sh failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let digest = last.strip_prefix("digest: ").unwrap_or_else(|| {
        panic!("scripts/image.sh must print `digest: sha256:...` last, printed:\n{stdout}")
    });
    assert!(stdout.contains(&format!("archive: {}", out.display())));
    digest.to_string()
}

fn run(cmd: &mut Command) -> String {
    let output = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        output.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    layout.join("blobs/sha256").join(hex)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Unpacks the archive's image (index → manifest → config and layer) into `rootfs`; the image's
/// config.
fn unpack(archive: &Path, work: &Path, rootfs: &Path) -> Value {
    let layout = work.join("layout");
    std::fs::create_dir_all(&layout).expect("layout dir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(&layout));
    let index = read_json(&layout.join("index.json"));
    let manifest_digest = index["manifests"][0]["digest"].as_str().expect("manifest");
    let manifest = read_json(&blob(&layout, manifest_digest));
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest}");
    let config = read_json(&blob(
        &layout,
        manifest["config"]["digest"].as_str().expect("config"),
    ));
    std::fs::create_dir_all(rootfs).expect("rootfs dir");
    let layer = blob(&layout, layers[0]["digest"].as_str().expect("layer"));
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(rootfs));
    let listing = run(Command::new("tar").arg("-tzf").arg(&layer));
    let mut files: Vec<&str> = listing.lines().filter(|l| !l.ends_with('/')).collect();
    files.sort();
    assert_eq!(
        files,
        ["etc/passwd", "etc/ssl/certs/ca-certificates.crt", "slipway"],
        "the image holds the binary, CA certificates and /etc/passwd, nothing else"
    );
    config
}

/// Whether an ELF file asks for a program interpreter (a dynamic loader): a static binary
/// has no PT_INTERP program header.
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "a 64-bit ELF file");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes")) == 3
    })
}

/// The pod's environment as the kubelet gives it: `envFrom` ConfigMaps, then `env` (values,
/// the pod's own fields, ConfigMap keys).
async fn pod_env(
    cluster: &support::Cluster,
    pod: &Value,
    container: &Value,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let config_map = |name: String| async move {
        let json = cluster
            .kubectl(&["-n", NS, "get", "configmap", &name, "-o", "json"])
            .await
            .unwrap_or_else(|e| panic!("ConfigMap {name}: {e}"));
        let cm: Value = serde_json::from_str(&json).expect("ConfigMap JSON");
        cm["data"].as_object().cloned().unwrap_or_default()
    };
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let name = source["configMapRef"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("only configMapRef sources are resolved here: {source}"));
        for (k, v) in config_map(name.to_string()).await {
            env.insert(k, v.as_str().unwrap_or_default().to_string());
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().expect("env name").to_string();
        let value = if let Some(v) = var["value"].as_str() {
            v.to_string()
        } else if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            let meta = &pod["metadata"];
            match path {
                "metadata.name" => meta["name"].as_str(),
                "metadata.namespace" => meta["namespace"].as_str(),
                "spec.nodeName" => pod["spec"]["nodeName"].as_str(),
                "spec.serviceAccountName" => pod["spec"]["serviceAccountName"].as_str(),
                _ => path
                    .strip_prefix("metadata.labels['")
                    .and_then(|p| p.strip_suffix("']"))
                    .and_then(|label| meta["labels"][label].as_str()),
            }
            .unwrap_or_else(|| panic!("cannot resolve fieldPath {path} of the pod"))
            .to_string()
        } else if let Some(key) = var["valueFrom"]["configMapKeyRef"].as_object() {
            let cm = config_map(key["name"].as_str().expect("name").to_string()).await;
            cm[key["key"].as_str().expect("key")]
                .as_str()
                .unwrap_or_default()
                .to_string()
        } else {
            panic!("env var {name}: a source this test does not resolve: {var}")
        };
        env.insert(name, value);
    }
    env
}

/// What a pod finds in its filesystem besides the image: the service account's token, CA and
/// namespace, /etc/hosts and /etc/resolv.conf, and an empty /tmp.
fn mount_pod_files(rootfs: &Path, token: &str, ca: &[u8], hosts: &str) {
    let sa = rootfs.join("var/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&sa).expect("service account dir");
    std::fs::write(sa.join("token"), token.trim()).expect("token");
    std::fs::write(sa.join("ca.crt"), ca).expect("ca.crt");
    std::fs::write(sa.join("namespace"), NS).expect("namespace");
    std::fs::write(rootfs.join("etc/hosts"), hosts).expect("hosts");
    // No server listens there: names in /etc/hosts resolve before any query is sent.
    std::fs::write(rootfs.join("etc/resolv.conf"), "nameserver 127.0.0.1\n").expect("resolv");
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    run(Command::new("chmod").arg("1777").arg(&tmp));
    // Readable by the image's non-root user, as the kubelet's projected volume is.
    run(Command::new("chmod")
        .arg("-R")
        .arg("a+rX")
        .arg(rootfs.join("var")));
}

/// The command that runs `argv` as `user` in `rootfs` alone, with the devices a container
/// runtime gives every container (`/dev/urandom` among them): as root, chroot(8) over device nodes
/// made in the root filesystem; otherwise in a user and mount namespace with the host's /dev
/// bound there (the image's user is then the caller's).
fn chroot_command(rootfs: &Path, user: &str, log: PathBuf, argv: &[String]) -> ChildProcess {
    let dev = rootfs.join("dev");
    std::fs::create_dir_all(&dev).expect("dev dir");
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n");
    if matches!(root, Ok(true)) {
        for (name, minor) in [
            ("null", "3"),
            ("zero", "5"),
            ("random", "8"),
            ("urandom", "9"),
        ] {
            let node = dev.join(name);
            if !node.exists() {
                run(Command::new("mknod")
                    .args(["-m", "666"])
                    .arg(&node)
                    .args(["c", "1", minor]));
            }
        }
        ChildProcess::new(which("chroot"), log)
            .arg(format!("--userspec={user}"))
            .arg(rootfs.display().to_string())
            .args(argv)
    } else {
        ChildProcess::new(which("unshare"), log)
            .args(["--user", "--map-root-user", "--mount"])
            .arg(which("sh").display().to_string())
            .arg("-c")
            .arg(format!(
                "{} --rbind /dev \"$0/dev\" && exec {} \"$0\" \"$@\"",
                which("mount").display(),
                which("chroot").display()
            ))
            .arg(rootfs.display().to_string())
            .args(argv)
    }
}

/// The program's path (the controller's environment is cleared, PATH included).
fn which(program: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} not found (util-linux, coreutils)"))
}

pub(crate) async fn shell(cluster: &support::Cluster, command: &str) -> String {
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let command = command.to_string();
    tokio::task::spawn_blocking(move || {
        run(Command::new("bash")
            .args(["-euo", "pipefail", "-c", &command])
            .env("KUBECONFIG", kubeconfig)
            .current_dir(repo()))
    })
    .await
    .expect("shell task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_runs_on_the_image() {
    if support::cluster().await.is_none() {
        return;
    }
    let work = tempdir("slipway-quickstart");

    // The image, twice from the same tree: the same digest, byte for byte the same archive.
    let (first, second) = (work.join("first.oci.tar"), work.join("second.oci.tar"));
    let digest = tokio::task::spawn_blocking({
        let (first, second) = (first.clone(), second.clone());
        move || {
            let digest = build_image(&first);
            assert_eq!(build_image(&second), digest, "two builds, two digests");
            digest
        }
    })
    .await
    .expect("image builds");
    assert_eq!(
        std::fs::read(&first).expect("first archive"),
        std::fs::read(&second).expect("second archive"),
        "two builds of the same tree must write the same archive"
    );
    let ocicheck = run(&mut Command::new(repo().join("tests/tools/ocicheck.sh")));
    let published = crate::support::real::published_image();
    let checked = run(Command::new(ocicheck.trim()).arg(&first).arg(&published));
    assert_eq!(checked.trim(), format!("ok {published} {digest}"));

    let wrong = Command::new(ocicheck.trim())
        .arg(&first)
        .arg("ghcr.io/slipway-dev/slipway:0.0.0")
        .output()
        .expect("run ocicheck");
    assert!(
        !wrong.status.success(),
        "ocicheck must refuse a name the archive does not carry"
    );

    let rootfs = work.join("rootfs");
    let config = unpack(&first, &work, &rootfs);
    let binary = std::fs::read(rootfs.join("slipway")).expect("the binary");
    assert!(
        !has_interpreter(&binary),
        "the image's binary must be static"
    );
    let image = &config["config"];
    let user = image["User"].as_str().expect("the image names its user");
    assert!(!user.starts_with("0:") && user != "0", "a non-root user");

    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let blocks = quickstart_blocks(&readme);
    assert!(
        blocks.len() >= 2,
        "the README's quick start: an install block, then the first Plan (found {blocks:?})"
    );

    // A cluster of its own: the install has fixed names (namespace system-upgrade,
    // ClusterRoles), and the quick start's Plan runs on every Linux node of the cluster, which on
    // the installs' cluster includes real nodes that cannot pull dist/'s Jobs' images (`Always`).
    // The image is built above, before the scene takes its turn.
    let Some(s) = Scene::new("quickstart")
        .own_cluster("quickstart")
        .start()
        .await
    else {
        return;
    };
    install::wait_for_earlier_removal(&s.cluster).await;
    let cluster = &s.cluster;
    // 1. The install, into a cluster without an earlier install; removed when the scene ends.
    let mut install = Install::new(cluster).await;
    install.record_manifest(&repo().join("dist/slipway.yaml"));
    for command in &blocks[0] {
        eprintln!("quickstart$ {command}");
        shell(cluster, command).await;
    }

    // The kubelet's part for the controller's pod.
    let pods: Value = serde_json::from_str(
        &cluster
            .kubectl(&[
                "-n",
                NS,
                "get",
                "pods",
                "-l",
                CONTROLLER_LABEL,
                "-o",
                "json",
            ])
            .await
            .expect("the controller's pod"),
    )
    .expect("pods JSON");
    let pod = pods["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|p| p["metadata"]["deletionTimestamp"].is_null())
        })
        .unwrap_or_else(|| panic!("no controller pod after the install: {pods}"))
        .clone();
    let container = pod["spec"]["containers"][0].clone();
    let mut env = pod_env(cluster, &pod, &container).await;
    let kubeconfig: Value = serde_json::from_str(
        &cluster
            .kubectl(&["config", "view", "--raw", "-o", "json"])
            .await
            .expect("kubeconfig"),
    )
    .expect("kubeconfig JSON");
    let kube_cluster = &kubeconfig["clusters"][0]["cluster"];
    let server = kube_cluster["server"].as_str().expect("server");
    let port = server.rsplit(':').next().expect("the server's port");
    let ca = base64_decode(
        kube_cluster["certificate-authority-data"]
            .as_str()
            .expect("CA data"),
    );
    let service_account = pod["spec"]["serviceAccountName"].as_str().expect("SA");
    let token = cluster
        .kubectl(&[
            "-n",
            NS,
            "create",
            "token",
            service_account,
            "--duration=1h",
        ])
        .await
        .expect("a token for the controller's service account");
    mount_pod_files(
        &rootfs,
        &token,
        &ca,
        // Both families: the resolver asks for both, and a name missing from /etc/hosts goes to
        // the nameserver, which does not exist here (a pod's would answer at once).
        "127.0.0.1 localhost channel.slipway.test\n::1 localhost channel.slipway.test\n",
    );
    env.insert("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into());
    env.insert("KUBERNETES_SERVICE_PORT".into(), port.into());
    // The one change from the pod: the metrics port on loopback, free on this machine.
    let metrics_port = support::free_port();
    env.insert(
        "SLIPWAY_METRICS_ADDR".into(),
        format!("127.0.0.1:{metrics_port}"),
    );
    let argv: Vec<String> = image["Entrypoint"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(container["args"].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let mut controller = chroot_command(&rootfs, user, work.join("controller.log"), &argv)
        .env_clear()
        .envs(env)
        .started();

    // 2. The first Plan, and watching it.
    for block in &blocks[1..] {
        for command in block {
            eprintln!("quickstart$ {command}");
            let out = tokio::time::timeout(Duration::from_secs(400), shell(cluster, command))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "`{command}` did not finish; controller log:\n{}",
                        controller.log_tail()
                    )
                });
            eprint!("{out}");
        }
    }

    let (status, body) = support::controller::http_get(metrics_port, "/metrics")
        .await
        .expect("/metrics answers");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("slipway_"), "slipway's metrics: {body}");

    // A channel by host name: resolved from the pod's /etc/hosts, without glibc's NSS.
    let target = Arc::new(Mutex::new("v1.2.3".to_string()));
    let url = support::channel_server(target)
        .await
        .replace("127.0.0.1", "channel.slipway.test");
    let plans: Api<Plan> = Api::namespaced(s.client.clone(), NS);
    let plan = support::plans::plan_from_yaml(&format!(
        "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata: {{name: quickstart-channel, namespace: {NS}}}\n\
         spec:\n  concurrency: 1\n  channel: {url}\n  serviceAccountName: system-upgrade\n  \
         nodeSelector: {{matchLabels: {{slipway.test/none: none}}}}\n  upgrade: {{image: busybox}}\n"
    ));
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the channel Plan");
    let mut resolved = None;
    let mut last = String::new();
    for _ in 0..120 {
        let plan = plans
            .get("quickstart-channel")
            .await
            .expect("the channel Plan");
        resolved = plan.status.as_ref().and_then(|s| s.latest_version.clone());
        if resolved.is_some() {
            break;
        }
        last = serde_json::to_string(&plan.status).unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let resolved = resolved.unwrap_or_else(|| {
        panic!(
            "the channel Plan never got a latestVersion; its status: {last}\ncontroller log:\n{}",
            controller.log_tail()
        )
    });
    assert_eq!(
        resolved,
        "v1.2.3",
        "controller log:\n{}",
        controller.log_tail()
    );
    plans
        .delete("quickstart-channel", &Default::default())
        .await
        .expect("delete the channel Plan");

    assert!(
        !controller.log().contains("panicked"),
        "controller log:\n{}",
        controller.log()
    );
    controller.stop();
    let _ = std::fs::remove_dir_all(&work);
}

fn tempdir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(support::unique_name(prefix));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn base64_decode(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("base64");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("base64 output");
    assert!(out.status.success(), "base64 -d failed");
    out.stdout
}
