use std::sync::Arc;

use serde_json::json;

use super::fake::FakeAlertmanager;
use super::*;
use crate::node::disruption::{DisruptionSpec, Matcher, SilenceSpec};
use crate::node::holders::Hold;
use crate::node::index::NodeIndex;
use crate::node::silence::SilenceState;
use crate::runtime::shared::{HoldSource, HolderObject};
use crate::runtime::testing::{Answer, ApiServer, shared_with};
use crate::runtime::{HoldSources, ReadyFuture};

const ME: &str = "slipway/system-upgrade-controller@test";

fn provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn policy() -> Holder {
    Holder::Reboot {
        policy: "weekly".into(),
    }
}

fn spec() -> SilenceSpec {
    SilenceSpec {
        matchers: vec![Matcher {
            name: "instance".into(),
            value: "$(NODE_NAME)".into(),
            is_regex: false,
            is_equal: true,
        }],
        max_duration: None,
        comment: None,
    }
}

fn wanted(node: &str) -> Wanted {
    Wanted::of(&policy(), node, &spec()).expect("valid")
}

async fn fake() -> (FakeAlertmanager, Alertmanager) {
    provider();
    let fake = FakeAlertmanager::default();
    let url = fake.start().await;
    let am = Alertmanager::new(&url, Credentials::None, None).expect("a client");
    (fake, am)
}

async fn once(
    am: &Alertmanager,
    wanted: &[Wanted],
    metrics: &Metrics,
) -> (Result<Round, AlertmanagerError>, Vec<(Holder, Event)>) {
    let mut events = Vec::new();
    let since = BTreeMap::new();
    let now = Timestamp::now();
    let publish = |h: &Holder, e: Event| events.push((h.clone(), e));
    let result = round(am, wanted, ME, &since, metrics, now, publish).await;
    (result, events)
}

fn live(fake: &FakeAlertmanager) -> Vec<Silence> {
    (fake.silences().into_iter())
        .filter(|s| s.status.state != SilenceState::Expired)
        .collect()
}

#[tokio::test]
async fn a_held_node_gets_one_silence_kept_across_rounds_and_expired_when_released() {
    let (fake, am) = fake().await;
    let metrics = Metrics::new();
    let (done, events) = once(&am, &[wanted("n1")], &metrics).await;
    assert_eq!(done.expect("a round").created, 1);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1.reason, "SilenceCreated");
    let silences = live(&fake);
    assert_eq!(silences.len(), 1);
    assert_eq!(silences[0].matchers[0].value, "n1");
    assert_eq!(silences[0].created_by, ME);
    // The next round (as after a restart: no memory) finds it and writes nothing.
    let (done, events) = once(&am, &[wanted("n1")], &metrics).await;
    assert_eq!(done.expect("a round"), Round::default());
    assert!(events.is_empty());
    assert_eq!(fake.silences().len(), 1, "no duplicate");
    // Released: expired.
    let (done, events) = once(&am, &[], &metrics).await;
    assert_eq!(done.expect("a round").expired, 1);
    assert_eq!(events[0].1.reason, "SilenceExpired");
    assert!(live(&fake).is_empty());
    let text = metrics.render();
    assert!(
        text.contains(r#"slipway_silences{state="expired"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"slipway_silences{state="active"} 0"#));
    assert!(text.contains(r#"slipway_alertmanager_requests_total{request="create"} 1"#));
    assert!(text.contains(r#"slipway_alertmanager_requests_total{request="expire"} 1"#));
}

#[tokio::test]
async fn a_silence_near_its_end_is_extended_in_place() {
    let (fake, am) = fake().await;
    let metrics = Metrics::new();
    let w = wanted("n1");
    let now = Timestamp::now();
    // One of ours with a minute left, as a previous round would have made it.
    let key = silence::Key {
        holder: policy(),
        node: "n1".into(),
        since: now,
    };
    let made = silence::reconcile(std::slice::from_ref(&w), &[], ME, &BTreeMap::new(), now);
    let [Action::Create { silence, .. }] = made.as_slice() else {
        panic!("{made:?}");
    };
    let mut s = silence.clone();
    s.ends_at = now.checked_add(Duration::from_secs(60)).expect("time");
    am.post("create", &s).await.expect("created");
    let (done, _) = once(&am, std::slice::from_ref(&w), &metrics).await;
    assert_eq!(done.expect("a round").extended, 1);
    let silences = fake.silences();
    assert_eq!(silences.len(), 1, "updated in place: {silences:?}");
    assert!(silences[0].ends_at > s.ends_at);
    assert_eq!(silence::Key::parse(&silences[0].comment), Some(key));
}

#[tokio::test]
async fn silences_of_others_are_left_alone() {
    let (fake, am) = fake().await;
    let now = Timestamp::now();
    let mut foreign = Silence {
        id: "theirs".into(),
        status: silence::SilenceStatus {
            state: SilenceState::Active,
        },
        matchers: wanted("n1").matchers,
        starts_at: now,
        ends_at: now.checked_add(Duration::from_secs(3600)).expect("time"),
        created_by: "alice".into(),
        comment: "maintenance window".into(),
    };
    fake.add(foreign.clone());
    // Even one with our key, signed by another controller.
    foreign.id = "other-cluster".into();
    foreign.created_by = "slipway/system-upgrade-controller@other".into();
    foreign.comment = format!(
        "x {}",
        silence::Key {
            holder: policy(),
            node: "n1".into(),
            since: now
        }
        .text()
    );
    fake.add(foreign);
    let (done, _) = once(&am, &[], &Metrics::new()).await;
    assert_eq!(done.expect("a round"), Round::default());
    assert_eq!(live(&fake).len(), 2);
    assert!(fake.requests().iter().all(|r| r.starts_with("GET ")));
}

#[tokio::test]
async fn an_unreachable_alertmanager_is_an_error_counted_and_writes_nothing() {
    let (fake, am) = fake().await;
    fake.set_down(true);
    let metrics = Metrics::new();
    let (done, events) = once(&am, &[wanted("n1")], &metrics).await;
    let e = done.expect_err("down");
    assert!(e.to_string().contains("503"), "{e}");
    assert!(events.is_empty());
    assert!(
        metrics
            .render()
            .contains(r#"slipway_alertmanager_request_errors_total{request="list"} 1"#)
    );
    // Back: the silence is made.
    fake.set_down(false);
    let (done, _) = once(&am, &[wanted("n1")], &metrics).await;
    assert_eq!(done.expect("a round").created, 1);
}

#[tokio::test]
async fn nothing_listens_there_is_an_error_too() {
    provider();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    let am = Alertmanager::new(&url, Credentials::None, None).expect("a client");
    let (done, _) = once(&am, &[wanted("n1")], &Metrics::new()).await;
    assert!(matches!(
        done,
        Err(AlertmanagerError::Request {
            request: "list",
            ..
        })
    ));
}

#[tokio::test]
async fn a_bearer_token_is_sent_and_without_it_alertmanager_refuses() {
    let (fake, _) = fake().await;
    fake.require_token("s3cret");
    let url = fake.start().await;
    let without = Alertmanager::new(&url, Credentials::None, None).expect("client");
    let (done, _) = once(&without, &[], &Metrics::new()).await;
    assert!(done.expect_err("refused").to_string().contains("401"));
    let with = Alertmanager::new(&url, Credentials::Bearer("s3cret".into()), None).expect("client");
    let (done, _) = once(&with, &[wanted("n1")], &Metrics::new()).await;
    assert_eq!(done.expect("a round").created, 1);
}

#[tokio::test]
async fn a_route_prefix_is_kept() {
    provider();
    let am = Alertmanager::new(
        "http://am.example:9093/alertmanager",
        Credentials::None,
        None,
    )
    .expect("client");
    assert_eq!(
        am.url("api/v2/silences").expect("url").as_str(),
        "http://am.example:9093/alertmanager/api/v2/silences"
    );
    for bad in ["am.example:9093", "ftp://am", "not a url"] {
        assert!(
            Alertmanager::new(bad, Credentials::None, None).is_err(),
            "{bad}"
        );
    }
    let e = Alertmanager::new(
        "http://am",
        Credentials::None,
        Some(b"not a pem".as_slice()),
    );
    assert!(e.is_err());
}

#[test]
fn the_flags_give_the_settings() {
    let from = AlertmanagerSettings::from_flags;
    assert!(matches!(from("", ""), Ok(None)));
    assert_eq!(
        from(" http://am:9093 ", "am-auth").expect("valid"),
        Some(AlertmanagerSettings {
            url: "http://am:9093".into(),
            secret: Some("am-auth".into()),
        })
    );
    let plain = from("https://am", "").expect("valid").expect("set");
    assert_eq!(plain.secret, None);
    for (url, secret) in [
        ("", "am-auth"),
        ("am:9093", ""),
        ("ftp://am", ""),
        ("http://", ""),
    ] {
        assert!(from(url, secret).is_err(), "{url:?} {secret:?}");
    }
}

#[test]
fn credentials_come_from_the_secret() {
    let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<u8>> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    };
    let read = |pairs: &[(&str, &str)]| Credentials::from_secret(&data(pairs));
    assert_eq!(
        read(&[("token", "t\n")]).expect("ok").0,
        Credentials::Bearer("t".into())
    );
    let (basic, ca) = read(&[("username", "u"), ("password", "p"), ("ca.crt", "PEM")]).expect("ok");
    assert_eq!(
        basic,
        Credentials::Basic {
            username: "u".into(),
            password: "p".into()
        }
    );
    assert_eq!(ca.as_deref(), Some(b"PEM".as_slice()));
    assert_eq!(read(&[]).expect("ok").0, Credentials::None);
    assert!(read(&[("token", "t"), ("username", "u")]).is_err());
    assert!(read(&[("username", "u")]).is_err());
    let mut bad = data(&[]);
    bad.insert("token".into(), vec![0xff, 0xfe]);
    assert!(Credentials::from_secret(&bad).is_err());
}

#[test]
fn the_wait_doubles_while_alertmanager_fails_up_to_a_bound() {
    assert_eq!(backoff(0), PERIOD);
    let waits: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
}

/// Objects of one kind for [`wanted`]: each holds its nodes and says what it asks.
struct Objects(Vec<(Holder, Vec<&'static str>, Option<DisruptionSpec>)>);

impl HoldSource for Objects {
    fn holds(&self, _nodes: &NodeIndex, _now: Timestamp) -> Vec<Hold> {
        (self.0.iter())
            .flat_map(|(h, nodes, _)| nodes.iter().map(|n| Hold::new(*n, h.clone())))
            .collect()
    }
    fn exists(&self, holder: &Holder) -> Option<bool> {
        Some(self.0.iter().any(|(h, ..)| h == holder))
    }
    fn ready(&self) -> (&'static str, ReadyFuture) {
        ("objects", Box::pin(async { Ok(()) }))
    }
    fn object(&self, holder: &Holder) -> Option<HolderObject> {
        let (h, _, disruption) = self.0.iter().find(|(h, ..)| h == holder)?;
        Some(HolderObject {
            disruption: disruption.clone(),
            reference: k8s_openapi::api::core::v1::ObjectReference {
                name: Some(h.key()),
                ..Default::default()
            },
        })
    }
}

#[tokio::test]
async fn the_silences_wanted_are_the_held_nodes_of_the_objects_that_ask() {
    let asks = Some(DisruptionSpec {
        silence: Some(spec()),
        ..Default::default()
    });
    let invalid = Some(DisruptionSpec {
        silence: Some(SilenceSpec::default()),
        ..Default::default()
    });
    let plan = |name: &str| Holder::Plan {
        namespace: "ns".into(),
        name: name.into(),
    };
    let sources: HoldSources = vec![Arc::new(Objects(vec![
        (plan("asks"), vec!["n1", "n2"], asks.clone()),
        (plan("quiet"), vec!["n1"], None),
        (plan("wrong"), vec!["n3"], invalid),
        (policy(), vec!["n4"], asks),
    ]))];
    let api = ApiServer::new();
    let shared = shared_with(&api.client(), vec![], sources);
    let (wanted, asking) = super::wanted(&shared);
    let got: Vec<(String, String)> = (wanted.iter())
        .map(|w| (w.holder.key(), w.node.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("plan/ns/asks".to_string(), "n1".to_string()),
            ("plan/ns/asks".into(), "n2".into()),
            ("rebootpolicy/weekly".into(), "n4".into()),
        ]
    );
    assert_eq!(wanted[1].matchers[0].value, "n2");
    // The invalid one asks (its own status says what is wrong) but wants nothing.
    assert_eq!(
        asking,
        BTreeSet::from([plan("asks"), plan("wrong"), policy()])
    );
}

#[tokio::test]
async fn without_alertmanager_each_object_that_asks_is_told_once() {
    let api = ApiServer::new();
    api.on_matching(|s| s.is_event(), Answer::Echo(201));
    let holder = policy();
    let sources: HoldSources = vec![Arc::new(Objects(vec![(
        holder.clone(),
        vec!["n1"],
        Some(DisruptionSpec {
            silence: Some(spec()),
            ..Default::default()
        }),
    )]))];
    let shared = shared_with(&api.client(), vec![], sources);
    let asking = BTreeSet::from([holder.clone()]);
    let mut told = BTreeSet::new();
    tell_unconfigured(&shared, &asking, &mut told).await;
    tell_unconfigured(&shared, &asking, &mut told).await;
    let events = api.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].body.to_string().contains("SilencesNotConfigured"));
    assert_eq!(told, asking);
    // One that no longer asks is forgotten, and told again if it asks again.
    tell_unconfigured(&shared, &BTreeSet::new(), &mut told).await;
    assert!(told.is_empty());
}

#[tokio::test]
async fn the_credentials_are_read_from_the_secret_by_listing_it_and_used() {
    let (fake, _) = fake().await;
    fake.require_token("from-the-secret");
    let url = fake.start().await;
    let api = ApiServer::new();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "am-auth", "namespace": "system-upgrade", "resourceVersion": "7"},
        "data": {"token": "ZnJvbS10aGUtc2VjcmV0"},
    });
    api.on(
        "GET",
        "/namespaces/system-upgrade/secrets",
        Answer::list(vec![secret]),
    );
    let shared = shared_with(&api.client(), vec![], HoldSources::new());
    let mut cache = ClientCache {
        settings: AlertmanagerSettings {
            url,
            secret: Some("am-auth".into()),
        },
        namespace: "system-upgrade".into(),
        built: None,
    };
    let am = cache.get(&shared).await.expect("a client from the secret");
    let (done, _) = once(&am, &[wanted("n1")], &Metrics::new()).await;
    assert_eq!(done.expect("accepted with the token").created, 1);
    let asked = api.sent();
    assert!(
        asked
            .iter()
            .any(|s| s.is("GET", "/namespaces/system-upgrade/secrets")
                && s.query.contains("fieldSelector=metadata.name%3Dam-auth")),
        "{asked:?}"
    );
    // No such Secret: an error that names it, not a client without credentials.
    let api = ApiServer::new();
    api.on(
        "GET",
        "/namespaces/system-upgrade/secrets",
        Answer::list(vec![]),
    );
    let shared = shared_with(&api.client(), vec![], HoldSources::new());
    cache.built = None;
    let e = cache.get(&shared).await.err().expect("no secret");
    assert!(e.to_string().contains("system-upgrade/am-auth"), "{e}");
}

#[test]
fn holds_found_at_the_first_round_were_there_before_and_later_ones_began_then() {
    let mut held = HeldSince::new();
    let t0: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    let t1: Timestamp = "2026-11-26T10:01:00Z".parse().expect("time");
    remember(&mut held, &[wanted("n1")], true, t0);
    remember(&mut held, &[wanted("n1"), wanted("n2")], false, t1);
    assert_eq!(held[&(policy(), "n1".to_string())], Seen::AtStart);
    assert_eq!(held[&(policy(), "n2".to_string())], Seen::Began(t1));
    // Given back: forgotten.
    remember(&mut held, &[wanted("n2")], false, t1);
    assert_eq!(held.len(), 1);
}
