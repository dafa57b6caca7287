//! End-to-end scenes of running slipway in production: /healthz, /readyz and the metrics of a
//! finished rollout; a failed node in the phase gauges until its Plan is deleted; leader election
//! with failover after a crash; a clean SIGTERM that hands the Lease over; a deposed leader that
//! exits. Each controller works in its scene's namespace only: every scene shares the cluster.

use crate::support;

use std::time::{Duration, Instant};

use crate::support::controller::{ControllerProcess, sample};
use crate::support::plans::wait_complete;
use crate::support::scene::Scene;
use crate::support::{Cluster, TestNamespace};
use anyhow::anyhow;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use slipway::plan::api::Plan;

/// A `slipway run` replica `id` with a metrics port of its own; under leader election (with
/// short timing) when `leader_elect`.
fn controller(cluster: &Cluster, ns: &str, id: &str, leader_elect: bool) -> ControllerProcess {
    let builder = ControllerProcess::builder(cluster.kubeconfig_path())
        .namespace(ns)
        .replica(id)
        .metrics_port();
    if leader_elect {
        builder.leader_elect().start()
    } else {
        builder.start()
    }
}

fn plan(name: &str, pool: &str, concurrency: i64, delay: &str, source: &str) -> Plan {
    serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
  annotations:
    slipway.test/complete-delay: "{delay}"
spec:
  concurrency: {concurrency}
  {source}
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
  upgrade:
    image: rancher/k3s-upgrade
    command: [sh, -c]
    args: ["echo upgrading"]
"#
    ))
    .expect("test plan parses")
}

async fn holder(leases: &Api<Lease>, name: &str) -> anyhow::Result<Option<String>> {
    Ok(leases
        .get_opt(name)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

async fn wait_holder(leases: &Api<Lease>, name: &str, want: &str, timeout: Duration) {
    support::wait_for(
        &format!("{want} to hold the lease {name}"),
        timeout,
        || async {
            match holder(leases, name).await? {
                Some(h) if h == want => Ok(()),
                other => Err(anyhow!("holder {other:?}")),
            }
        },
    )
    .await
}

/// A controller of a Plan of its own: `solo`, with a metrics port; a failed Job fails its node at
/// once (for the phase gauges).
fn solo(s: &Scene) -> ControllerProcess {
    ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(s.ns.name())
        .replica("solo")
        .metrics_port()
        .envs([("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")])
        .start()
}

/// A running controller is healthy and ready, and its metrics show the rollout it finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_controller_is_healthy_ready_and_measured() {
    let Some(s) = Scene::new("metrics").nodes(2).start().await else {
        return;
    };
    let controller = solo(&s);
    healthy_and_ready(&controller).await;
    roll_out_from_a_channel(&s.ns, &s.pool).await;
    the_metrics_show_the_finished_rollout(&controller, &s.ns).await;
}

/// A Plan whose Job fails shows its node in the phase gauges; deleting the Plan drops its
/// gauges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_shows_in_the_phase_gauges_until_its_plan_is_deleted() {
    let Some(s) = Scene::new("gauges").nodes(2).start().await else {
        return;
    };
    let controller = solo(&s);
    a_failed_node_shows_in_the_phase_gauges(&controller, &s.ns, &s.pool).await;
    deleting_the_plan_drops_its_gauges(&controller, &s.ns, &s.pool).await;
}

/// `/healthz` answers `ok`, and `/readyz` 200.
async fn healthy_and_ready(controller: &ControllerProcess) {
    support::wait_for("/healthz", Duration::from_secs(30), || async {
        match controller.get("/healthz").await? {
            (200, body) if body == "ok" => Ok(()),
            other => Err(anyhow!("{other:?}")),
        }
    })
    .await;
    support::wait_for("/readyz", Duration::from_secs(30), || async {
        match controller.get("/readyz").await? {
            (200, body) => Ok(body),
            other => Err(anyhow!("{other:?}")),
        }
    })
    .await;
}

/// A Plan `measured` of two nodes, two at a time, whose version comes from a channel; until it
/// is complete.
async fn roll_out_from_a_channel(ns: &TestNamespace, pool: &str) {
    let url = support::channel_server(std::sync::Arc::new(std::sync::Mutex::new(
        "v1.30.1+k3s1".to_string(),
    )))
    .await;
    ns.api::<Plan>()
        .create(
            &PostParams::default(),
            &plan("measured", pool, 2, "1s", &format!("channel: {url}")),
        )
        .await
        .expect("create plan");
    wait_complete(&ns.api(), "measured", Duration::from_secs(90)).await;
}

/// The Plan's gauges, the counters of Jobs, reconciles, channel requests and node patches, in
/// OpenMetrics.
async fn the_metrics_show_the_finished_rollout(controller: &ControllerProcess, ns: &TestNamespace) {
    let n = ns.name();
    let plan_labels = format!("namespace=\"{n}\",plan=\"measured\"");
    let metrics = support::wait_for(
        "the metrics to show the finished rollout",
        Duration::from_secs(30),
        || async {
            let (code, text) = controller.get("/metrics").await?;
            let ok = code == 200
                && sample(&text, &format!("slipway_plan_complete{{{plan_labels}}}")) == Some(1.0)
                && sample(
                    &text,
                    &format!("slipway_plan_nodes{{{plan_labels},state=\"complete\"}}"),
                ) == Some(2.0);
            if ok {
                Ok(text)
            } else {
                Err(anyhow!("{code}: {text}"))
            }
        },
    )
    .await;
    for (name, want) in [
        (
            format!("slipway_plan_nodes{{{plan_labels},state=\"applying\"}}"),
            0.0,
        ),
        (
            format!("slipway_plan_nodes{{{plan_labels},state=\"failed\"}}"),
            0.0,
        ),
        ("slipway_jobs_created_total".to_string(), 2.0),
        ("slipway_leader".to_string(), 1.0),
        ("slipway_channel_request_errors_total".to_string(), 0.0),
    ] {
        assert_eq!(sample(&metrics, &name), Some(want), "{name} in\n{metrics}");
    }
    for (name, at_least) in [
        ("slipway_reconciles_total{kind=\"plan\"}", 3.0),
        (
            "slipway_reconcile_duration_seconds_count{kind=\"plan\"}",
            3.0,
        ),
        ("slipway_channel_requests_total", 1.0),
        ("slipway_node_patches_total", 2.0),
        ("slipway_jobs_deleted_total", 0.0),
        ("slipway_channel_cache_hits_total", 0.0),
        ("slipway_channel_request_duration_seconds_count", 1.0),
    ] {
        let v = sample(&metrics, name).unwrap_or_else(|| panic!("{name} in\n{metrics}"));
        assert!(v >= at_least, "{name} = {v} < {at_least}");
    }
    assert!(
        metrics.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );
    // The whole rollout, and no node in a phase once it is done.
    assert_eq!(
        sample(
            &metrics,
            &format!("slipway_plan_targeted_nodes{{{plan_labels}}}")
        ),
        Some(2.0)
    );
    assert!(
        !metrics.contains(&format!("slipway_plan_phase_nodes{{{plan_labels}")),
        "{metrics}"
    );
    // The build and the process.
    // CI's builds carry the commit (scripts/static-env.sh), a plain `cargo test` none.
    let version = env!("CARGO_PKG_VERSION");
    let build_labels = match option_env!("SLIPWAY_COMMIT").filter(|c| !c.is_empty()) {
        Some(commit) => format!("version=\"{version}\",commit=\"{commit}\""),
        None => format!("version=\"{version}\""),
    };
    assert_eq!(
        sample(&metrics, &format!("slipway_build_info{{{build_labels}}}")),
        Some(1.0),
        "{metrics}"
    );
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
    ] {
        let v = sample(&metrics, name).unwrap_or_else(|| panic!("{name} in\n{metrics}"));
        assert!(v > 0.0, "{name} = {v}");
    }
    let started = sample(&metrics, "process_start_time_seconds").expect("start time");
    let now = jiff::Timestamp::now().as_second() as f64;
    assert!(
        started <= now && started > now - 3600.0,
        "started at {started}, now {now}"
    );
}

/// A Plan whose Job fails: its node shows in phase Failed, since the status says.
async fn a_failed_node_shows_in_the_phase_gauges(
    controller: &ControllerProcess,
    ns: &TestNamespace,
    pool: &str,
) {
    let mut broken = plan("broken", pool, 1, "1s", "version: v1.30.1+k3s1");
    broken.metadata.labels = Some([(support::FAIL_LABEL.to_string(), "true".to_string())].into());
    ns.api::<Plan>()
        .create(&PostParams::default(), &broken)
        .await
        .expect("create plan");
    let labels = format!("namespace=\"{}\",plan=\"broken\"", ns.name());
    let metrics = support::wait_for(
        "the failed node in the phase gauges",
        Duration::from_secs(90),
        || async {
            let (_, text) = controller.get("/metrics").await?;
            let failed = format!("slipway_plan_phase_nodes{{{labels},phase=\"Failed\"}}");
            match sample(&text, &failed) {
                Some(1.0) => Ok(text),
                _ => Err(anyhow!("{text}")),
            }
        },
    )
    .await;
    let status = ns.api::<Plan>().get("broken").await.expect("plan").status;
    let since = status
        .and_then(|s| s.nodes.into_iter().find_map(|n| n.since))
        .expect("the failed node's since");
    let since = since
        .parse::<jiff::Timestamp>()
        .expect("RFC 3339")
        .as_second() as f64;
    for (name, want) in [
        (
            format!("slipway_plan_phase_since_timestamp_seconds{{{labels},phase=\"Failed\"}}"),
            since,
        ),
        (
            format!("slipway_plan_nodes{{{labels},state=\"failed\"}}"),
            1.0,
        ),
        (format!("slipway_plan_targeted_nodes{{{labels}}}"), 2.0),
    ] {
        assert_eq!(sample(&metrics, &name), Some(want), "{name} in\n{metrics}");
    }
}

/// Deleting the Plan drops its gauges (with the next reconcile of any Plan).
async fn deleting_the_plan_drops_its_gauges(
    controller: &ControllerProcess,
    ns: &TestNamespace,
    pool: &str,
) {
    ns.api::<Plan>()
        .delete("broken", &Default::default())
        .await
        .expect("delete plan");
    ns.api::<Plan>()
        .create(
            &PostParams::default(),
            &plan("second", pool, 1, "1s", "version: v1.30.1+k3s1"),
        )
        .await
        .expect("create plan");
    support::wait_for(
        "the deleted Plan's gauges to go",
        Duration::from_secs(60),
        || async {
            let (_, text) = controller.get("/metrics").await?;
            if !text.contains("plan=\"broken\"") && text.contains("plan=\"second\"") {
                Ok(())
            } else {
                Err(anyhow!("{text}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_crashed_leader_mid_rollout() {
    let Some(s) = Scene::new("failover").nodes(5).start().await else {
        return;
    };
    let (cluster, ns, nodes, pool, client) = (&s.cluster, &s.ns, &s.nodes, &s.pool, &s.client);
    let leases = ns.api::<Lease>();
    let lease = format!("slipway-{}", ns.name());
    let jobs = support::jobwatch::watch_jobs(ns.api::<Job>());

    let mut first = controller(cluster, ns.name(), "replica-a", true);
    wait_holder(&leases, &lease, "replica-a", Duration::from_secs(30)).await;
    let second = controller(cluster, ns.name(), "replica-b", true);
    // The standby is healthy and ready (so a two-replica Deployment rolls out) but does not lead.
    let standby = support::wait_for("the standby's /readyz", Duration::from_secs(30), || async {
        match second.get("/readyz").await? {
            (200, body) => Ok(body),
            other => Err(anyhow!("{other:?}")),
        }
    })
    .await;
    assert!(standby.contains("standby"), "{standby}");
    let (_, standby_metrics) = second.get("/metrics").await.expect("standby metrics");
    assert_eq!(sample(&standby_metrics, "slipway_leader"), Some(0.0));
    assert_eq!(
        sample(&standby_metrics, "slipway_reconciles_total{kind=\"plan\"}"),
        None,
        "a standby reconciles nothing"
    );

    ns.api::<Plan>()
        .create(
            &PostParams::default(),
            &plan("failover", pool, 2, "4s", "version: v1.30.1+k3s1"),
        )
        .await
        .expect("create plan");
    // Crash the leader once the second pair of Jobs is running.
    let job_api = ns.api::<Job>();
    support::wait_for(
        "the rollout to be under way",
        Duration::from_secs(60),
        || async {
            let n = job_api.list(&Default::default()).await?.items.len();
            if n >= 3 {
                Ok(())
            } else {
                Err(anyhow!("{n} jobs"))
            }
        },
    )
    .await;
    first.kill();
    let killed = Instant::now();
    wait_holder(&leases, &lease, "replica-b", Duration::from_secs(30)).await;
    let failover = killed.elapsed();
    eprintln!("failover: the standby holds the lease {failover:?} after the leader was killed");
    assert!(
        failover <= Duration::from_secs(20),
        "the standby took over after {failover:?}"
    );

    let done = wait_complete(&ns.api(), "failover", Duration::from_secs(120)).await;
    let hash = done.status.and_then(|s| s.latest_hash).expect("hash");
    let node_api = Api::<Node>::all(client.clone());
    for n in nodes {
        let labels = node_api
            .get(n)
            .await
            .expect("node")
            .metadata
            .labels
            .unwrap_or_default();
        assert_eq!(
            labels.get("plan.upgrade.cattle.io/failover"),
            Some(&hash),
            "{n}"
        );
    }
    let watch = jobs.snapshot();
    assert!(
        watch.max_unfinished <= 2,
        "at most 2 unfinished jobs at once, saw {}",
        watch.max_unfinished
    );
    assert_eq!(
        watch.uids.len(),
        5,
        "one job per node: {:?}",
        watch.uids.keys()
    );
    for (name, uids) in &watch.uids {
        assert_eq!(uids.len(), 1, "job {name} was created more than once");
    }
    let (_, metrics) = second.get("/metrics").await.expect("metrics");
    assert_eq!(sample(&metrics, "slipway_leader"), Some(1.0), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly_and_hands_the_lease_over() {
    let Some(s) = Scene::new("sigterm").start().await else {
        return;
    };
    let (cluster, ns) = (&s.cluster, &s.ns);
    let leases = ns.api::<Lease>();
    let lease = format!("slipway-{}", ns.name());
    let mut first = controller(cluster, ns.name(), "replica-a", true);
    wait_holder(&leases, &lease, "replica-a", Duration::from_secs(30)).await;
    support::wait_for(
        "the leader to be ready",
        Duration::from_secs(30),
        || async {
            match first.get("/readyz").await? {
                (200, body) if body == "ok" => Ok(()),
                other => Err(anyhow!("{other:?}")),
            }
        },
    )
    .await;
    let second = controller(cluster, ns.name(), "replica-b", true);
    support::wait_for(
        "the standby to be ready",
        Duration::from_secs(30),
        || async {
            match second.get("/readyz").await? {
                (200, _) => Ok(()),
                other => Err(anyhow!("{other:?}")),
            }
        },
    )
    .await;

    first.sigterm();
    let termed = Instant::now();
    let status = first
        .wait_exit(Duration::from_secs(10))
        .await
        .unwrap_or_else(|| {
            panic!(
                "slipway still running 10s after SIGTERM:\n{}",
                first.log_tail()
            )
        });
    let exited = termed.elapsed();
    assert!(
        status.success(),
        "exit status {status}:\n{}",
        first.log_tail()
    );
    assert!(
        first.log_tail().contains("released the leader lease"),
        "{}",
        first.log_tail()
    );
    // Released: no holder (or the standby already). Without the release the standby would wait
    // out the 10 s lease duration.
    let now = holder(&leases, &lease).await.expect("lease");
    assert!(
        now.as_deref() != Some("replica-a"),
        "the lease still names the stopped leader"
    );
    wait_holder(&leases, &lease, "replica-b", Duration::from_secs(5)).await;
    eprintln!(
        "sigterm: exited 0 after {exited:?}; the standby held the lease {:?} after the signal",
        termed.elapsed()
    );
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_exits_at_once() {
    let Some(s) = Scene::new("deposed").start().await else {
        return;
    };
    let (cluster, ns) = (&s.cluster, &s.ns);
    let leases = ns.api::<Lease>();
    let lease = format!("slipway-{}", ns.name());
    let mut leader = controller(cluster, ns.name(), "replica-a", true);
    wait_holder(&leases, &lease, "replica-a", Duration::from_secs(30)).await;
    // Someone else writes itself into the Lease (as a partitioned-away leader would find after
    // the others moved on): the leader must stop at its next renewal, not keep writing.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    leases
        .patch(
            &lease,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {
                "holderIdentity": "intruder",
                "renewTime": now,
                "leaseDurationSeconds": 60,
            }})),
        )
        .await
        .expect("take the lease");
    let status = leader
        .wait_exit(Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("the deposed leader still runs:\n{}", leader.log_tail()));
    assert_eq!(status.code(), Some(1), "{}", leader.log_tail());
    assert!(
        leader
            .log_tail()
            .contains("lost the leader lease: the lease was taken over by intruder"),
        "{}",
        leader.log_tail()
    );
    assert_eq!(
        holder(&leases, &lease).await.expect("lease").as_deref(),
        Some("intruder")
    );
}
