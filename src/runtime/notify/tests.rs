//! The notifier against a fake webhook: a tiny HTTP/1.1 server on a loopback port that can be
//! down (nothing listens: connections are refused), answer a script of statuses, and records the
//! requests it took.

use std::collections::VecDeque;
use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::node::notify::{TargetFlags, targets};
use crate::runtime::leader::LeaseGuard;
use crate::runtime::testing::{self, ApiServer};

/// What the fake webhook took (answered 2xx), in order.
#[derive(Clone, Default)]
struct Hook {
    taken: Arc<Mutex<Vec<Value>>>,
    /// Statuses to answer, in order; 200 once they are used up.
    script: Arc<Mutex<VecDeque<u16>>>,
    headers: Arc<Mutex<Vec<String>>>,
    /// The requests it took, as they came.
    raw: Arc<Mutex<Vec<Taken>>>,
}

impl Hook {
    fn taken(&self) -> Vec<Value> {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Serves on `addr` until the test ends.
    async fn serve(&self, addr: SocketAddr) {
        let listener = TcpListener::bind(addr)
            .await
            .expect("the port is free again");
        let hook = self.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let hook = hook.clone();
                tokio::spawn(async move {
                    let Some((raw, head, body)) = read_request(&mut stream).await else {
                        return;
                    };
                    let status = hook
                        .script
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .pop_front()
                        .unwrap_or(200);
                    if (200..300).contains(&status) {
                        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        hook.taken
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(value);
                        hook.headers
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(head);
                        hook.raw
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(Taken::of(&raw, &body));
                    }
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
    }
}

/// The request's head as sent and lower-cased, and its body.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let raw = String::from_utf8_lossy(&buf[..end]).to_string();
            let head = raw.to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some((raw, head, buf[end + 4..end + 4 + length].to_vec()));
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A loopback address nothing listens on (yet).
async fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

fn settings(addr: SocketAddr, queue: usize, extra: TargetFlags) -> NotifySettings {
    let flags = TargetFlags {
        targets: vec![format!("hook=http://{addr}/hook?token=s3cret")],
        headers: vec!["hook=Authorization: Bearer t0ken".into()],
        ..extra
    };
    NotifySettings {
        targets: targets(&flags, |_| None).expect("valid"),
        queue,
        failing_after: Duration::ZERO,
        timeout: Duration::from_secs(5),
    }
}

fn policy() -> ObjectReference {
    ObjectReference {
        api_version: Some("slipway.dev/v1alpha1".into()),
        kind: Some("RebootPolicy".into()),
        name: Some("weekly".into()),
        ..Default::default()
    }
}

/// A node's steps, as a RebootPolicy tells them.
fn steps(node: &str) -> Vec<Event> {
    vec![
        Event::normal("Draining", format!("Node {node} asked for a reboot")).on(node),
        Event::normal("Drained", format!("Node {node} drained")).on(node),
        Event::normal("Rebooting", format!("Rebooting Node {node}")).on(node),
        Event::normal("Rebooted", format!("Node {node} rebooted and is back")).on(node),
    ]
}

fn kinds_and_nodes(bodies: &[Value]) -> Vec<(String, String)> {
    bodies
        .iter()
        .map(|b| {
            (
                b["kind"].as_str().unwrap_or("?").to_string(),
                b["node"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// Waits (without a deadline of its own: the test's timeout bounds it) until `done`.
async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn started(notifier: &Notifier, api: &ApiServer) -> CancellationToken {
    let shutdown = CancellationToken::new();
    let chores = testing::chores(&api.client());
    tokio::spawn(notifier.clone().run(chores, shutdown.clone()));
    shutdown
}

#[tokio::test]
async fn a_target_down_then_up_gets_every_notification_in_order_and_telling_never_waits() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = free_addr().await;
    let metrics = Arc::new(Metrics::new());
    let notifier = Notifier::new(settings(addr, 100, TargetFlags::default()), metrics.clone())
        .expect("client");
    let api = ApiServer::new();
    let shutdown = started(&notifier, &api);
    // The target is down: telling returns at once all the same (it is not async).
    for node in ["n1", "n2"] {
        for event in steps(node) {
            notifier.tell(&policy(), &event);
        }
    }
    // An event no table row names is not told.
    notifier.tell(&policy(), &Event::normal("FailuresReset", "reset"));
    until(|| metrics.notifications().counted("hook", Delivery::Retried) >= 2).await;
    // Failing (failing_after is zero here): a Warning Event on the policy whose notification waits,
    // naming the target but neither its token nor its header.
    let warned: Vec<Value> = api
        .events()
        .into_iter()
        .map(|s| s.body)
        .filter(|b| b["reason"] == NOTIFICATION_FAILING)
        .collect();
    assert_eq!(warned.len(), 1, "said once per failing spell: {warned:?}");
    assert_eq!(warned[0]["type"], "Warning");
    assert_eq!(warned[0]["regarding"]["name"], "weekly");
    let note = warned[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("hook") && note.contains("8 waiting"),
        "{note}"
    );
    assert!(
        !note.contains("s3cret") && !note.contains("t0ken"),
        "{note}"
    );
    assert!(
        metrics
            .render()
            .contains("slipway_notification_target_failing{target=\"hook\"} 1")
    );

    // Up, first answering 503 (retried), then taking everything.
    let hook = Hook::default();
    hook.script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(503);
    hook.serve(addr).await;
    until(|| hook.taken().len() >= 8).await;
    let want: Vec<(String, String)> = ["n1", "n2"]
        .iter()
        .flat_map(|n| {
            [
                "node-started",
                "node-drained",
                "node-rebooting",
                "node-back",
            ]
            .map(|k| (k.to_string(), n.to_string()))
        })
        .collect();
    assert_eq!(
        kinds_and_nodes(&hook.taken()),
        want,
        "none lost, order kept"
    );
    let first = &hook.taken()[0];
    assert_eq!(first["object"]["kind"], "RebootPolicy");
    assert_eq!(first["object"]["name"], "weekly");
    assert_eq!(first["reason"], "Draining");
    assert!(
        hook.headers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .all(|h| h.contains("authorization: bearer t0ken")
                && h.contains("content-type: application/json"))
    );
    until(|| metrics.notifications().counted("hook", Delivery::Delivered) == 8).await;
    let rendered = metrics.render();
    assert!(rendered.contains("slipway_notification_target_failing{target=\"hook\"} 0"));
    assert!(rendered.contains("slipway_notification_queue_length{target=\"hook\"} 0"));
    assert_eq!(metrics.notifications().counted("hook", Delivery::Failed), 0);
    assert_eq!(
        metrics.notifications().counted("hook", Delivery::Dropped),
        0
    );
    shutdown.cancel();
}

#[tokio::test]
async fn a_refusal_is_given_up_and_the_next_notification_goes_on() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = free_addr().await;
    let hook = Hook::default();
    hook.script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(400);
    hook.serve(addr).await;
    let metrics = Arc::new(Metrics::new());
    let only_back = TargetFlags {
        kinds: vec!["hook=node-back".into()],
        formats: vec!["hook=slack".into()],
        templates: vec!["hook/node-back={node} is back".into()],
        ..Default::default()
    };
    let notifier = Notifier::new(settings(addr, 10, only_back), metrics.clone()).expect("client");
    let api = ApiServer::new();
    let shutdown = started(&notifier, &api);
    for node in ["n1", "n2"] {
        for event in steps(node) {
            notifier.tell(&policy(), &event);
        }
    }
    until(|| metrics.notifications().counted("hook", Delivery::Delivered) == 1).await;
    assert_eq!(metrics.notifications().counted("hook", Delivery::Failed), 1);
    assert_eq!(
        metrics.notifications().counted("hook", Delivery::Retried),
        0
    );
    // Only node-back was wanted; n1's was refused, n2's taken, in the Slack shape.
    assert_eq!(
        hook.taken(),
        vec![serde_json::json!({"text": "n2 is back"})]
    );
    shutdown.cancel();
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest_even_while_it_is_being_sent() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = free_addr().await;
    let metrics = Arc::new(Metrics::new());
    let notifier =
        Notifier::new(settings(addr, 2, TargetFlags::default()), metrics.clone()).expect("client");
    let api = ApiServer::new();
    let shutdown = started(&notifier, &api);
    let events = steps("n1");
    notifier.tell(&policy(), &events[0]);
    // The first is on the wire (and retried) when the queue overflows.
    until(|| metrics.notifications().counted("hook", Delivery::Retried) >= 1).await;
    for event in &events[1..] {
        notifier.tell(&policy(), event);
    }
    assert_eq!(
        metrics.notifications().counted("hook", Delivery::Dropped),
        2
    );
    assert!(
        metrics
            .render()
            .contains("slipway_notification_queue_length{target=\"hook\"} 2")
    );
    let hook = Hook::default();
    hook.serve(addr).await;
    until(|| hook.taken().len() >= 2).await;
    until(|| metrics.notifications().counted("hook", Delivery::Delivered) == 2).await;
    assert_eq!(
        kinds_and_nodes(&hook.taken()),
        [
            ("node-rebooting".to_string(), "n1".to_string()),
            ("node-back".to_string(), "n1".to_string())
        ],
        "the newest two, in order"
    );
    shutdown.cancel();
}

#[tokio::test]
async fn only_the_leader_tells_and_publishing_queues_what_is_worth_telling() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = free_addr().await;
    let metrics = Arc::new(Metrics::new());
    let notifier =
        Notifier::new(settings(addr, 10, TargetFlags::default()), metrics.clone()).expect("client");
    let api = ApiServer::new();
    let queued = |n: &Notifier| {
        n.lanes[0]
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    };
    let follower =
        testing::chores_with(&api.client(), LeaseGuard::default()).with_notifier(notifier.clone());
    follower.publish_on(&policy(), &steps("n1")[0]).await;
    assert_eq!(
        queued(&notifier),
        0,
        "a replica that does not lead tells nothing"
    );
    let leader = testing::chores(&api.client()).with_notifier(notifier.clone());
    for event in steps("n1") {
        leader.publish_on(&policy(), &event).await;
    }
    leader
        .publish_on(&policy(), &Event::normal("Pending", "not told"))
        .await;
    assert_eq!(queued(&notifier), 4);
    assert_eq!(api.events().len(), 5, "the Events are published as before");
}

/// A request as the fake webhook took it.
#[derive(Debug, Clone)]
struct Taken {
    /// `METHOD /path?query`.
    line: String,
    /// Names lower-cased, values as sent.
    headers: Vec<(String, String)>,
    body: String,
}

impl Taken {
    /// From the head as sent and the body.
    fn of(head: &str, body: &[u8]) -> Taken {
        let mut lines = head.lines();
        let line = lines
            .next()
            .unwrap_or_default()
            .trim_end_matches(" HTTP/1.1")
            .to_string();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_string()))
            .collect();
        Taken {
            line,
            headers,
            body: String::from_utf8_lossy(body).to_string(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Hook {
    fn requests(&self) -> Vec<Taken> {
        self.raw
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Targets told only `node-back`, as "{node} is back".
fn back_only(targets_: &[String]) -> NotifySettings {
    let names = targets_
        .iter()
        .filter_map(|t| t.split_once('=').map(|(n, _)| n.to_string()));
    let flags = TargetFlags {
        targets: targets_.to_vec(),
        kinds: names.clone().map(|n| format!("{n}=node-back")).collect(),
        templates: names
            .map(|n| format!("{n}/node-back={{node}} is back"))
            .collect(),
        ..Default::default()
    };
    NotifySettings {
        targets: targets(&flags, |_| None).expect("valid"),
        queue: 10,
        failing_after: Duration::from_secs(3600),
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn shoutrrr_urls_that_can_point_at_loopback_are_sent_as_their_services_take_them() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = free_addr().await;
    let hook = Hook::default();
    hook.serve(addr).await;
    let metrics = Arc::new(Metrics::new());
    let settings = back_only(&[
        format!("gen=generic+http://user:pwS3cret@{addr}/hook/gen?b=2&a=1&@xCustom=yes"),
        format!(
            "gotify=gotify://{addr}/sub/AS3cretGotify.x?disabletls=yes&title=Reboots&priority=4"
        ),
        format!(
            "ntfy=ntfy://alice:ntfyS3cret@{addr}/reboots?scheme=http&title=Reboots&tags=warning"
        ),
        format!("put=generic://{addr}/put?disabletls=yes&method=put&template=json&$source=slipway"),
    ]);
    let notifier = Notifier::new(settings, metrics.clone()).expect("client");
    let api = ApiServer::new();
    let shutdown = started(&notifier, &api);
    for event in steps("n1") {
        notifier.tell(&policy(), &event);
    }
    until(|| hook.requests().len() >= 4).await;
    let taken = hook.requests();
    let find = |prefix: &str| {
        taken
            .iter()
            .find(|t| t.line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {taken:?}"))
    };

    // generic+http: the URL's query forwarded (sorted, as Go encodes it), its user as basic
    // authentication, its `@` header, the text as the body with shoutrrr's JSON content type.
    let generic = find("POST /hook/gen");
    assert_eq!(generic.line, "POST /hook/gen?a=1&b=2");
    assert_eq!(generic.header("content-type"), Some("application/json"));
    assert_eq!(generic.header("accept"), Some("application/json"));
    assert_eq!(generic.header("x-custom"), Some("yes"));
    assert_eq!(
        generic.header("authorization"),
        Some("Basic dXNlcjpwd1MzY3JldA==")
    );
    assert_eq!(generic.body, "n1 is back");

    // gotify with disabletls: http, /message under the URL's path, the token in the query.
    let gotify = find("POST /sub/message");
    assert_eq!(gotify.line, "POST /sub/message?token=AS3cretGotify.x");
    assert_eq!(gotify.header("content-type"), Some("application/json"));
    assert_eq!(
        serde_json::from_str::<Value>(&gotify.body).ok(),
        Some(serde_json::json!({"message": "n1 is back", "title": "Reboots", "priority": 4}))
    );

    // ntfy with scheme=http: the text to the topic, its options as headers.
    let ntfy = find("POST /reboots");
    assert_eq!(ntfy.line, "POST /reboots");
    assert_eq!(
        ntfy.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(ntfy.header("title"), Some("Reboots"));
    assert_eq!(ntfy.header("tags"), Some("warning"));
    assert_eq!(
        ntfy.header("authorization"),
        Some("Basic YWxpY2U6bnRmeVMzY3JldA==")
    );
    assert_eq!(ntfy.body, "n1 is back");

    // generic with method=put and the JSON template: the message and the `$` fields.
    let put = find("PUT /put");
    assert_eq!(put.line, "PUT /put");
    assert_eq!(
        serde_json::from_str::<Value>(&put.body).ok(),
        Some(serde_json::json!({"message": "n1 is back", "source": "slipway"}))
    );
    for name in ["gen", "gotify", "ntfy", "put"] {
        until(|| metrics.notifications().counted(name, Delivery::Delivered) == 1).await;
    }
    shutdown.cancel();
}

#[tokio::test]
async fn a_target_of_several_requests_retries_each_and_sends_none_twice() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = free_addr().await;
    let hook = Hook::default();
    hook.serve(addr).await;
    let mut settings = back_only(&[
        "tg=telegram://123456:T3legramS3cret@telegram?chats=@first,@second".to_string(),
    ]);
    // Telegram's API is not on loopback: the two chats' requests are pointed at the fake one.
    for request in settings.targets[0]
        .service
        .as_mut()
        .map(|s| s.requests.as_mut_slice())
        .unwrap_or_default()
    {
        request.url = format!("http://{addr}/bot/sendMessage");
    }
    // The first chat takes it; the second answers 503 once, then takes it.
    hook.script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend([200, 503]);
    let metrics = Arc::new(Metrics::new());
    let notifier = Notifier::new(settings, metrics.clone()).expect("client");
    let api = ApiServer::new();
    let shutdown = started(&notifier, &api);
    let chats = |hook: &Hook| -> Vec<String> {
        hook.taken()
            .iter()
            .map(|b| b["chat_id"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    let rebooted = |node: &str| steps(node).remove(3);
    notifier.tell(&policy(), &rebooted("n1"));
    until(|| metrics.notifications().counted("tg", Delivery::Delivered) == 1).await;
    assert_eq!(chats(&hook), ["@first", "@second"], "the first chat once");
    assert_eq!(metrics.notifications().counted("tg", Delivery::Retried), 1);
    assert_eq!(hook.taken()[1]["text"], "n1 is back");

    // The first chat refuses the next one for good: the second still gets it, and it counts as
    // failed.
    hook.script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(400);
    notifier.tell(&policy(), &rebooted("n2"));
    until(|| metrics.notifications().counted("tg", Delivery::Failed) == 1).await;
    assert_eq!(chats(&hook), ["@first", "@second", "@second"]);
    assert_eq!(hook.taken()[2]["text"], "n2 is back");
    assert_eq!(
        metrics.notifications().counted("tg", Delivery::Delivered),
        1
    );
    shutdown.cancel();
}
