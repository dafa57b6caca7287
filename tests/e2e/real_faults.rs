//! Faults on real nodes ([`crate::support::real`]): a guest killed in the middle of its upgrade
//! Job, and a reboot after which the kubelet does not come back in time. A pair of the shared
//! cluster's workers, the controller as a process; one scene at a time on each pair, as in
//! [`crate::real`].

use crate::support;

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use slipway::plan::api::{NodePhase, Plan};

use crate::real::jobs_by_node;
use crate::support::budgets::PoolChecker;
use crate::support::controller::ControllerProcess;
use crate::support::plans::{complete_message, condition_reason, plan_from_yaml, wait_complete};
use crate::support::scene::{POOL_LABEL, Scene};

/// The node's boot ID and whether it is Ready, read now.
async fn node_now(client: &Client, name: &str) -> (String, bool) {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    let ready = (node.status.as_ref().and_then(|s| s.conditions.as_ref()))
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (support::boot_id(&node), ready)
}

/// The node's `kubernetes.io/hostname`, the name a Plan's status uses.
async fn hostname(client: &Client, name: &str) -> String {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    node.labels()
        .get("kubernetes.io/hostname")
        .cloned()
        .unwrap_or_else(|| name.to_string())
}

/// The Plan's label on node `name` (`plan.upgrade.cattle.io/<plan>`): the hash it is done at.
async fn done_hash(client: &Client, name: &str, plan: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    node.labels()
        .get(&format!("plan.upgrade.cattle.io/{plan}"))
        .cloned()
}

/// A short version of the scene's own, so that a Plan of an earlier run never finds its nodes done.
fn version_of(s: &Scene) -> String {
    format!("r{}", &s.ns.name()[s.ns.name().len() - 5..])
}

/// A Plan at concurrency 1 whose Job runs 30 s on its node; the guest of the first node is killed
/// (SIGKILL of its QEMU: a power cut) while the Job runs there. The node goes NotReady and keeps
/// the Plan's slot: once the controller has settled on the node being down, the Plan still applies
/// to it alone and the other node has no Job; an independent checker of the pool never sees two
/// nodes unavailable at once (a live Job or NotReady). Started again, the node runs its Job again
/// (the lost pod is replaced rather than left to the Job's deadline: by the job controller when
/// the kubelet fails it on its way back, else by slipway recreating the Job, `JobKilledByReboot`) and the rollout finishes on both nodes, the second node's
/// Job created only after the first's completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_in_the_middle_of_its_job_holds_its_slot_until_it_is_back() {
    let Some(s) = Scene::new("real-kill").real_nodes().start().await else {
        return;
    };
    let workers = s.workers();
    let controller = ControllerProcess::start_metered(&s.cluster, s.ns.name(), &[]);
    let checker = PoolChecker::start(s.client.clone(), s.ns.name().to_string(), s.pool.clone());
    let plan: Plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: killed
spec:
  concurrency: 1
  version: {version}
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
    matchExpressions:
    - {{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}}
  upgrade:
    image: busybox:1.37
    command: [sh, -c, "sleep 30; echo upgraded"]
"#,
        version = version_of(&s),
        pool = s.pool,
    ));
    let plans = s.ns.api::<Plan>();
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    let started = Instant::now();

    // The first node's Job runs: its pod is Running on the node.
    let pods = s.ns.api::<Pod>();
    let first = support::wait_for(
        "the first Job's pod to run",
        Duration::from_secs(600),
        || async {
            let Some((node, job)) = jobs_by_node(&s, "killed").await.into_iter().next() else {
                bail!("no Job yet");
            };
            let list = pods
                .list(&ListParams::default().labels(&format!("job-name={}", job.name_any())))
                .await?;
            let phases: Vec<_> = (list.items.iter())
                .map(|p| p.status.as_ref().and_then(|st| st.phase.clone()))
                .collect();
            match phases.iter().any(|p| p.as_deref() == Some("Running")) {
                true => Ok(node),
                false => Err(anyhow!("{node}'s Job's pods: {phases:?}")),
            }
        },
    )
    .await;
    let second = workers
        .iter()
        .find(|n| **n != first)
        .expect("two workers")
        .to_string();
    let (boot_before, _) = node_now(&s.client, &first).await;
    let running_after = started.elapsed();

    support::real::kill(&s.cluster, &first);
    let killed = Instant::now();
    support::wait_for(
        &format!("{first} to turn NotReady"),
        Duration::from_secs(480),
        || async {
            assert!(
                !jobs_by_node(&s, "killed").await.contains_key(&second),
                "{second}'s Job was created while {first} was down"
            );
            match node_now(&s.client, &first).await {
                (_, false) => Ok(()),
                (_, true) => Err(anyhow!("still Ready")),
            }
        },
    )
    .await;
    let not_ready_after = killed.elapsed();
    // What the controller does about the node being down, it has done once it settles.
    controller.settled("plan").await;
    let down = plans.get("killed").await.expect("the Plan");
    let status = down.status.clone().unwrap_or_default();
    let host = hostname(&s.client, &first).await;
    assert_eq!(
        status.applying,
        vec![host.clone()],
        "the Plan holds {first}, and only it, while it is down; {}",
        complete_message(&down)
    );
    let progress = (status.nodes.iter()).find(|p| p.name == host);
    assert_eq!(
        progress.map(|p| &p.phase),
        Some(&NodePhase::Upgrading),
        "{first} is still upgrading: {:?}",
        status.nodes
    );
    assert!(
        !jobs_by_node(&s, "killed").await.contains_key(&second),
        "{second} was not started while {first} is down"
    );
    eprintln!(
        "real-kill: {first} down; the Plan says: {}; {:?}",
        complete_message(&down),
        status.nodes
    );

    support::real::start(&s.cluster, &first).await;
    let back_after = killed.elapsed();
    let done = wait_complete(&plans, "killed", Duration::from_secs(900)).await;
    let took = started.elapsed();

    let jobs = jobs_by_node(&s, "killed").await;
    let completed = (jobs.get(&first).and_then(|j| j.status.as_ref()))
        .and_then(|st| st.completion_time.clone())
        .unwrap_or_else(|| panic!("{first}'s Job completed: {:?}", jobs.get(&first)));
    let second_created = (jobs.get(&second))
        .and_then(|j| j.metadata.creation_timestamp.clone())
        .unwrap_or_else(|| panic!("{second} had a Job"));
    assert!(
        second_created.0 >= completed.0,
        "{second}'s Job ({second_created:?}) was created before {first}'s completed ({completed:?})"
    );
    // The lost pod is replaced one of two ways, both before the Job's deadline: the kubelet fails
    // it once back (it may, when it admits its pods again after a boot) and the job controller
    // starts another; or it stays Running with nothing in it and slipway recreates the Job.
    let reasons = s.ns.event_reasons().await;
    let recreated = reasons.iter().any(|r| r == "JobKilledByReboot");
    let replaced = (jobs.get(&first).and_then(|j| j.status.as_ref()))
        .is_some_and(|st| st.failed.unwrap_or(0) >= 1 && st.succeeded.unwrap_or(0) >= 1);
    assert!(
        recreated || replaced,
        "{first}'s lost pod was replaced (by the job controller or by slipway recreating the Job), \
         not left to the Job's deadline: {reasons:?}; {:?}",
        jobs.get(&first).and_then(|j| j.status.as_ref())
    );
    eprintln!(
        "real-kill: the lost pod was replaced by {}",
        match recreated {
            true => "slipway (JobKilledByReboot)",
            false => "the job controller (the kubelet failed it)",
        }
    );
    let most = checker.most();
    assert!(
        most.len() <= 1,
        "at most one node of the pool unavailable at once (concurrency 1): {most:?}"
    );
    let hash = done.status.as_ref().and_then(|st| st.latest_hash.clone());
    for n in workers {
        assert_eq!(
            done_hash(&s.client, n, "killed").await,
            hash,
            "{n} is done at the Plan's hash"
        );
        assert!(node_now(&s.client, n).await.1, "{n} is Ready");
    }
    assert_ne!(
        node_now(&s.client, &first).await.0,
        boot_before,
        "{first} booted again"
    );
    eprintln!(
        "real-kill: {first}'s Job running {running_after:?} after the Plan, killed; NotReady \
         {not_ready_after:?} later, Ready again {back_after:?} after the kill; both done {took:?} \
         after the Plan"
    );
}

/// The flag file and systemd drop-in of [`a_reboot_whose_kubelet_does_not_come_back_times_out`]:
/// the kubelet starts 90 s late, once, at the next boot.
const LATE_FLAG: &str = "/etc/slipway-test-late-kubelet";
const LATE_DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/50-slipway-test-late.conf";
const LATE_SECS: u32 = 90;

/// A Plan with `spec.reboot` (timeout 45 s) on one worker whose Job adds a systemd drop-in that
/// holds the kubelet back 90 s at the next boot (the reboot itself comes on top, so the node is
/// away well past the timeout even with KVM): the node reboots but does not come back in
/// time, the API server still has its old boot ID; the Plan says `RebootTimedOut` naming the node
/// (its `Complete` condition, the node's status, a Warning event) and keeps holding the node. Once
/// the kubelet starts the node is back with a new boot ID and the rollout finishes; the drop-in
/// removed itself before it let the kubelet start, so the disk later scenes boot is clean.
///
/// It found a bug of slipway's: the reboot pod, made beside the Job, rebooted the node as soon as
/// the Job's sentinel step wrote its file, before the kubelet had reported the Job's pod
/// Succeeded, so the Job was still active when the node went down, the reboot timeout never
/// started, and the evicted Job ran the upgrade again. The reboot pod is now made only once the
/// Job is seen complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_whose_kubelet_does_not_come_back_times_out() {
    let Some(s) = Scene::new("real-late").real_nodes().start().await else {
        return;
    };
    let workers = s.workers();
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    let target = workers[0];
    let (boot_before, _) = node_now(&s.client, target).await;
    // The drop-in acts once: the flag is removed (with the drop-in) before the wait, so a later
    // kubelet restart or boot, even one after a kill in the middle of the wait, starts at once.
    let exec = format!(
        "/bin/sh -c '[ -e {LATE_FLAG} ] || exit 0; rm -f {LATE_FLAG} {LATE_DROP_IN}; sync; \
         sleep {LATE_SECS}'"
    );
    let script = format!(
        "set -e; mkdir -p /host$(dirname {LATE_DROP_IN}); touch /host{LATE_FLAG}; \
         printf '[Service]\\nTimeoutStartSec=infinity\\nExecStartPre=%s\\n' \"{exec}\" \
         > /host{LATE_DROP_IN}; sync; cat /host{LATE_DROP_IN}"
    );
    let plan: Plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: late
spec:
  concurrency: 1
  version: {version}
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
      kubernetes.io/hostname: {host}
  upgrade:
    image: busybox:1.37
    command: [sh, -c]
    args: [{script}]
  reboot:
    timeout: 45s
"#,
        version = version_of(&s),
        pool = s.pool,
        host = hostname(&s.client, target).await,
        script = serde_json::to_string(&script).expect("a JSON string"),
    ));
    let plans = s.ns.api::<Plan>();
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    let started = Instant::now();

    // The node reboots and its kubelet stays away: NotReady. By then slipway must have seen the
    // Job complete and be waiting for the node in its reboot hand-off, or no timeout applies.
    support::wait_for(
        &format!("{target} to reboot (NotReady)"),
        Duration::from_secs(600),
        || async {
            match node_now(&s.client, target).await {
                (_, false) => Ok(()),
                (_, true) => Err(anyhow!("still Ready")),
            }
        },
    )
    .await;
    let host = hostname(&s.client, target).await;
    support::wait_for(
        &format!("the Plan to have {target} Rebooting"),
        Duration::from_secs(120),
        || async {
            let p = plans.get("late").await?;
            let nodes = p.status.map(|st| st.nodes).unwrap_or_default();
            match (nodes.iter()).find(|n| n.name == host).map(|n| &n.phase) {
                Some(NodePhase::Rebooting | NodePhase::Failed) => Ok(()),
                _ => Err(anyhow!(
                    "{target} rebooted and its kubelet is away, but the Plan has {nodes:?}: \
                     the Job's completion was not recorded before the reboot"
                )),
            }
        },
    )
    .await;

    let timed_out = support::wait_for("RebootTimedOut", Duration::from_secs(600), || async {
        let p = plans.get("late").await?;
        match condition_reason(&p, "Complete").as_deref() {
            Some("RebootTimedOut") => Ok(p),
            Some("JobFailed") => panic!("the Job failed: {}", complete_message(&p)),
            _ if support::plans::is_complete(&p) => panic!(
                "the Plan completed without a RebootTimedOut: {}",
                complete_message(&p)
            ),
            other => Err(anyhow!("Complete: {other:?} {}", complete_message(&p))),
        }
    })
    .await;
    let (boot_at_timeout, ready_at_timeout) = node_now(&s.client, target).await;
    let timed_out_after = started.elapsed();
    assert_eq!(
        boot_at_timeout, boot_before,
        "{target} had not come back with a new boot ID when the reboot timed out"
    );
    let message = complete_message(&timed_out);
    assert!(
        message.contains(&format!("Node {target} did not come back")),
        "the Plan names the node: {message}"
    );
    let status = timed_out.status.clone().unwrap_or_default();
    let progress = (status.nodes.iter()).find(|p| p.name == host);
    assert_eq!(
        progress.map(|p| (&p.phase, p.reason.as_deref())),
        Some((&NodePhase::Failed, Some("RebootTimedOut"))),
        "{:?}",
        status.nodes
    );
    assert_eq!(status.applying, vec![host], "the node keeps its slot");
    let events = support::wait_for(
        "a RebootTimedOut event",
        Duration::from_secs(120),
        || async {
            let list = s.ns.api::<Event>().list(&ListParams::default()).await?;
            let found: Vec<Event> = (list.items.into_iter())
                .filter(|e| e.reason.as_deref() == Some("RebootTimedOut"))
                .collect();
            match found.is_empty() {
                false => Ok(found),
                true => Err(anyhow!("none yet")),
            }
        },
    )
    .await;
    assert!(
        events.iter().any(|e| e.type_.as_deref() == Some("Warning")
            && e.message.as_deref().unwrap_or("").contains(target)),
        "a Warning event names {target}: {events:?}"
    );

    let done = wait_complete(&plans, "late", Duration::from_secs(900)).await;
    let took = started.elapsed();
    let (boot, ready) = node_now(&s.client, target).await;
    assert!(
        ready && boot != boot_before,
        "{target} is back: Ready {ready}, boot {boot}"
    );
    assert_eq!(
        done_hash(&s.client, target, "late").await,
        done.status.as_ref().and_then(|st| st.latest_hash.clone()),
        "{target} is done at the Plan's hash"
    );
    no_late_kubelet_left(&s, target).await;
    eprintln!(
        "real-late: {target} timed out {timed_out_after:?} after the Plan (Ready {ready_at_timeout} \
         then), back and done {took:?} after it"
    );
}

/// A pod on `node` that looks at its disk: neither the flag nor the drop-in is left; and, as the
/// Jobs' kubectl steps do, reaches the API server through the `kubernetes` Service (kube-proxy
/// once gave up on a node whose kubelet came late, and every later Job there failed). No kubectl
/// flag: one would turn off its in-cluster configuration.
async fn no_late_kubelet_left(s: &Scene, node: &str) {
    let check = format!("test ! -e /host{LATE_FLAG} && test ! -e /host{LATE_DROP_IN}");
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{name: disk-check, namespace: {ns}}}
spec:
  nodeName: {node}
  restartPolicy: Never
  containers:
  - name: check
    image: busybox:1.37
    command: [sh, -c, {check}]
    volumeMounts: [{{name: host, mountPath: /host, readOnly: true}}]
  - name: service
    image: rancher/kubectl:v1.30.3
    args: [auth, whoami]
  volumes: [{{name: host, hostPath: {{path: /}}}}]
"#,
                ns = s.ns.name(),
                check = serde_json::to_string(&check).expect("a JSON string"),
            )),
        )
        .await
        .expect("the disk check pod");
    let pods = s.ns.api::<Pod>();
    support::wait_for(
        "the disk check to succeed",
        Duration::from_secs(600),
        || async {
            let p = pods.get("disk-check").await?;
            match p.status.and_then(|st| st.phase).as_deref() {
                Some("Succeeded") => Ok(()),
                Some("Failed") => panic!(
                    "the late kubelet's flag or drop-in is still on {node}'s disk, or the API \
                     server is out of reach through its Service: {} {}",
                    s.cluster
                        .kubectl(&["-n", s.ns.name(), "logs", "disk-check", "-c", "check"])
                        .await
                        .unwrap_or_default(),
                    s.cluster
                        .kubectl(&["-n", s.ns.name(), "logs", "disk-check", "-c", "service"])
                        .await
                        .unwrap_or_default()
                ),
                other => Err(anyhow!("{other:?}")),
            }
        },
    )
    .await;
}

/// From a real node's own network namespace, the API server's and the registry's forwarded
/// addresses answer and nothing else does: not the host behind the user-mode network's gateway
/// (its loopback, where both listen, without `restrict=on`), not QEMU's DNS, not the internet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_node_reaches_the_api_server_and_the_registry_and_nothing_else() {
    let Some(s) = Scene::new("real-net").real_nodes().start().await else {
        return;
    };
    let node = s.workers()[0];
    // The kubelet's kubeconfig names the API server's forwarded address, containerd's mirror of
    // ghcr.io the registry's; busybox's nc has no -z.
    let check = "set -u; \
        server=$(sed -n 's|^ *server: https://||p' /host/etc/kubernetes/kubelet.kubeconfig); \
        addr=${server%:*}; port=${server##*:}; \
        if echo | nc -w 5 $addr $port; then echo \"api $server: reachable\"; \
        else echo \"api $server: UNREACHABLE\"; exit 1; fi; \
        registry=$(sed -n 's|^\\[host.\"http://\\(.*\\)\"\\]$|\\1|p' /host/etc/containerd/certs.d/ghcr.io/hosts.toml); \
        if wget -q -O /dev/null http://$registry/v2/; then echo \"registry $registry: reachable\"; \
        else echo \"registry $registry: UNREACHABLE\"; exit 1; fi; \
        for target in \"10.0.2.2 $port\" \"10.0.2.2 ${registry##*:}\" '10.0.2.2 22' '10.0.2.3 53' '1.1.1.1 443'; do \
          if echo | nc -w 5 $target; then echo \"$target: REACHABLE\"; exit 1; fi; \
          echo \"$target: unreachable\"; \
        done";
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{name: network, namespace: {ns}}}
spec:
  nodeName: {node}
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: check
    image: busybox:1.37
    command: [sh, -c, {check}]
    volumeMounts: [{{name: host, mountPath: /host, readOnly: true}}]
  volumes: [{{name: host, hostPath: {{path: /}}}}]
"#,
                ns = s.ns.name(),
                check = serde_json::to_string(check).expect("a JSON string"),
            )),
        )
        .await
        .expect("the network check pod");
    let pods = s.ns.api::<Pod>();
    let phase = support::wait_for(
        "the network check to end",
        Duration::from_secs(600),
        || async {
            let p = pods.get("network").await?;
            match p.status.and_then(|st| st.phase).as_deref() {
                Some(phase @ ("Succeeded" | "Failed")) => Ok(phase.to_string()),
                other => Err(anyhow!("{other:?}")),
            }
        },
    )
    .await;
    let log = (s.cluster)
        .kubectl(&["-n", s.ns.name(), "logs", "network"])
        .await
        .unwrap_or_default();
    assert_eq!(phase, "Succeeded", "{node}'s network: {log}");
    assert!(
        log.contains("api ")
            && log.contains("registry 10.0.2.101:")
            && log.contains("1.1.1.1 443: unreachable"),
        "{log}"
    );
    eprintln!("real-net: {node}: {}", log.trim().replace('\n', "; "));
}
