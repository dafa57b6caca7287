//! A hostile channel server on loopback against `slipway run`: every Plan following it reports
//! what went wrong in `LatestResolved` (naming the URL), a Plan following a good channel is not held
//! up by the others, failing channels are asked no more often than the backoff allows, and a body
//! of gigabytes is not read. One scene, sharing the cluster: its Plans select no node.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::controller::ControllerProcess;
use crate::support::scene::Scene;
use anyhow::anyhow;
use kube::api::PostParams;
use slipway::plan::api::Plan;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server saw and did.
#[derive(Default)]
struct Record {
    /// Requests per first path element (`tls` for a TLS ClientHello).
    requests: Mutex<BTreeMap<String, usize>>,
    first_request: Mutex<Option<Instant>>,
    /// Requests held open right now.
    hanging: AtomicUsize,
    /// Held requests the client gave up.
    given_up: AtomicUsize,
    /// Body bytes of the endless answer handed to the kernel.
    body_bytes: AtomicUsize,
}

impl Record {
    fn requests(&self, kind: &str) -> usize {
        let requests = self.requests.lock().expect("record lock");
        requests.get(kind).copied().unwrap_or(0)
    }
}

/// One server, its behaviour chosen by the first element of the path.
async fn hostile_server(record: Arc<Record>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the channel server");
    let addr = listener.local_addr().expect("server address");
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(answer(sock, record.clone()));
        }
    });
    format!("{addr}")
}

fn found(location: &[u8]) -> Vec<u8> {
    let mut reply = b"HTTP/1.1 302 Found\r\nLocation: ".to_vec();
    reply.extend_from_slice(location);
    reply.extend_from_slice(b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    reply
}

async fn answer(mut sock: TcpStream, record: Arc<Record>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.first() != Some(&0x16) {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let kind = if request.first() == Some(&0x16) {
        "tls".to_string()
    } else {
        let line = String::from_utf8_lossy(&request);
        let path = line.split_whitespace().nth(1).unwrap_or_default();
        path.trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    *record
        .requests
        .lock()
        .expect("record lock")
        .entry(kind.clone())
        .or_default() += 1;
    record
        .first_request
        .lock()
        .expect("record lock")
        .get_or_insert_with(Instant::now);
    let reply = match kind.as_str() {
        "ok" => found(b"/releases/tag/v1.30.1+k3s1"),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            found(b"/releases/tag/v1.31.0+k3s1")
        }
        "loop" => found(b"/loop/stable"),
        "garbage" => found(b"/tags/%zz"),
        "binary" => found(b"/tags/v1.2.3-\xff\xfe"),
        "error" => b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "tls" => b"HTTP/1.1 400 Bad Request\r\n\r\nthis is not TLS".to_vec(),
        "reset" => return,
        "hang" => {
            record.hanging.fetch_add(1, Ordering::SeqCst);
            // Until the client gives up and closes.
            while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            record.hanging.fetch_sub(1, Ordering::SeqCst);
            record.given_up.fetch_add(1, Ordering::SeqCst);
            return;
        }
        "huge" => {
            let head = b"HTTP/1.1 302 Found\r\nLocation: /releases/tag/v1.32.0+k3s1\r\nContent-Length: 10000000000\r\n\r\n";
            if sock.write_all(head).await.is_err() {
                return;
            }
            let chunk = vec![b'x'; 64 * 1024];
            while sock.write_all(&chunk).await.is_ok() {
                record.body_bytes.fetch_add(chunk.len(), Ordering::Relaxed);
            }
            return;
        }
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
    };
    let _ = sock.write_all(&reply).await;
}

fn channel_plan(name: &str, url: &str) -> Plan {
    serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
spec:
  concurrency: 1
  channel: "{url}"
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/selects: nothing
  upgrade:
    image: rancher/k3s-upgrade
"#
    ))
    .expect("test plan parses")
}

/// `LatestResolved` of a Plan: status, message; and `status.latestVersion`.
fn resolved(plan: &Plan) -> Option<(String, String, Option<String>)> {
    let status = plan.status.as_ref()?;
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "LatestResolved")?;
    Some((
        c.status.clone(),
        c.message.clone().unwrap_or_default(),
        status.latest_version.clone(),
    ))
}

/// What a Plan following each kind of answer ends with.
enum Expect {
    Version(&'static str),
    /// `LatestResolved` False; the message names the URL and holds this.
    Error(&'static str),
}

/// The most requests a channel failing since `elapsed` ago may have had: the first, then one per
/// step of a backoff that starts at 10 s and doubles (one more for a request in flight).
fn allowed_requests(elapsed: Duration) -> usize {
    let (mut at, mut step, mut n) = (0u64, 10u64, 1usize);
    while at + step <= elapsed.as_secs() {
        at += step;
        step *= 2;
        n += 1;
    }
    n + 1
}

/// Waits for the Plan's `LatestResolved` to settle and checks it against `expect`.
async fn assert_outcome(api: &kube::Api<Plan>, name: &str, url: &str, expect: &Expect) {
    let outcome = support::wait_for(
        &format!("LatestResolved of {name}"),
        Duration::from_secs(90),
        || async {
            let plan = api.get(name).await?;
            resolved(&plan)
                .filter(|(s, _, _)| s != "Unknown")
                .ok_or_else(|| anyhow!("no LatestResolved yet"))
        },
    )
    .await;
    match expect {
        Expect::Version(v) => assert_eq!(
            (outcome.0.as_str(), outcome.2.as_deref()),
            ("True", Some(*v)),
            "{name}: {outcome:?}"
        ),
        Expect::Error(fragment) => {
            let (status, message, _) = &outcome;
            assert_eq!(status, "False", "{name}: {outcome:?}");
            assert!(
                message.contains(url) && message.contains(fragment),
                "{name}: the message names neither {url} nor {fragment:?}: {message}"
            );
        }
    }
}

/// Failing channels were asked no more often than the backoff allows; the good one once.
fn assert_within_backoff(record: &Record) {
    let first = record
        .first_request
        .lock()
        .expect("record lock")
        .unwrap_or_else(Instant::now);
    let allowed = allowed_requests(first.elapsed());
    for kind in ["garbage", "binary", "error", "reset", "tls"] {
        let made = record.requests(kind);
        assert!(
            (1..=allowed).contains(&made),
            "{kind}: {made} requests in {:?}, the backoff allows {allowed}",
            first.elapsed()
        );
    }
    // Three Plans, one URL each, a request of 15 s before each retry.
    assert!(record.requests("hang") <= 3 * allowed);
    assert_eq!(record.requests("ok"), 1, "the good channel was asked again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_channel_server_is_reported_and_holds_up_nothing() {
    let Some(s) = Scene::new("channel").start().await else {
        return;
    };
    let ns = &s.ns;
    let record = Arc::new(Record::default());
    let addr = hostile_server(record.clone()).await;
    let url = |kind: &str| format!("http://{addr}/{kind}/stable");
    // Two reconciles at once, as SUC's default: three hanging channels would take every slot if a
    // reconcile waited for its channel.
    let controller = ControllerProcess::start(
        &s.cluster,
        ns.name(),
        &[("SYSTEM_UPGRADE_CONTROLLER_THREADS", "2")],
    );
    let plans = hostile_plans(&url);
    let api = ns.api::<Plan>();
    hanging_requests_take_every_reconcile_slot(&api, &plans, &record).await;
    a_good_channel_resolves_meanwhile(&api, &url("ok"), &record).await;
    for (name, url, expect) in &plans {
        assert_outcome(&api, name, url, expect).await;
    }
    assert_within_backoff(&record);

    let sent = record.body_bytes.load(Ordering::Relaxed);
    assert!(
        sent < 64 << 20,
        "{sent} bytes of the endless body were sent"
    );
    if let Some(kib) = controller.peak_rss_kib() {
        eprintln!("controller peak RSS: {} MiB", kib / 1024);
        assert!(kib < 256 * 1024, "peak RSS {kib} KiB");
    }
}

/// One Plan per kind of hostile answer: its name, channel URL and what it must end with.
fn hostile_plans(url: &dyn Fn(&str) -> String) -> Vec<(&'static str, String, Expect)> {
    vec![
        (
            "hang-a",
            url("hang").replace("stable", "a"),
            Expect::Error("timed out"),
        ),
        (
            "hang-b",
            url("hang").replace("stable", "b"),
            Expect::Error("timed out"),
        ),
        (
            "hang-c",
            url("hang").replace("stable", "c"),
            Expect::Error("timed out"),
        ),
        ("slow", url("slow"), Expect::Version("v1.31.0-k3s1")),
        ("huge", url("huge"), Expect::Version("v1.32.0-k3s1")),
        ("loop", url("loop"), Expect::Version("stable")),
        (
            "garbage",
            url("garbage"),
            Expect::Error("invalid URL escape"),
        ),
        ("binary", url("binary"), Expect::Error("not UTF-8")),
        (
            "error",
            url("error"),
            Expect::Error("HTTP/1.1 503 Service Unavailable"),
        ),
        ("reset", url("reset"), Expect::Error("failed")),
        (
            "tls",
            url("tls").replace("http://", "https://"),
            Expect::Error("failed"),
        ),
    ]
}

/// Creates the hostile Plans; as many hanging requests as there are reconcile slots.
async fn hanging_requests_take_every_reconcile_slot(
    api: &kube::Api<Plan>,
    plans: &[(&str, String, Expect)],
    record: &Record,
) {
    for (name, url, _) in plans {
        api.create(&PostParams::default(), &channel_plan(name, url))
            .await
            .expect("create plan");
    }
    support::wait_for("two hanging requests", Duration::from_secs(60), || {
        let hanging = record.hanging.load(Ordering::SeqCst);
        async move {
            if hanging >= 2 {
                Ok(())
            } else {
                Err(anyhow!("{hanging} hanging"))
            }
        }
    })
    .await;
}

/// A good channel resolves while the hanging requests hold both slots: no Plan waits until a
/// hanging request is given up.
async fn a_good_channel_resolves_meanwhile(api: &kube::Api<Plan>, good_url: &str, record: &Record) {
    api.create(&PostParams::default(), &channel_plan("good", good_url))
        .await
        .expect("create plan");
    let good = support::wait_for("the good channel", Duration::from_secs(60), || async {
        let plan = api.get("good").await?;
        match resolved(&plan) {
            Some((s, _, v)) if s == "True" => Ok(v),
            other => Err(anyhow!("LatestResolved: {other:?}")),
        }
    })
    .await;
    assert_eq!(good.as_deref(), Some("v1.30.1-k3s1"));
    assert_eq!(
        record.given_up.load(Ordering::SeqCst),
        0,
        "the good channel's Plan waited until a hanging request was given up"
    );
}
