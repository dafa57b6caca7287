//! slipway's silences against Alertmanager itself (built from the Go module proxy by
//! tests/tools/alertmanager/build.sh, cached), on loopback: the v2 API's shapes and rules as the
//! real server has them (a silence created, extended in place, replaced when its matchers change,
//! expired; a restart's reconcile that makes no duplicate; others' silences left alone).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use slipway::node::disruption::{Matcher, SilenceSpec};
use slipway::node::holders::Holder;
use slipway::node::silence::{self, Silence, SilenceState, Wanted};
use slipway::runtime::metrics::Metrics;
use slipway::runtime::silences::{Alertmanager, Credentials, Round, round};

#[path = "../e2e/support/alertmanager.rs"]
mod process;
use process::start;

const ME: &str = "slipway/system-upgrade-controller@offline";

fn nodeop() -> Holder {
    Holder::NodeOp {
        namespace: "default".into(),
        name: "upgrade".into(),
    }
}

fn spec(matchers: &[(&str, &str, bool)]) -> SilenceSpec {
    SilenceSpec {
        matchers: (matchers.iter())
            .map(|(name, value, is_regex)| Matcher {
                name: name.to_string(),
                value: value.to_string(),
                is_regex: *is_regex,
                is_equal: true,
            })
            .collect(),
        max_duration: Some("1h".into()),
        comment: Some("offline test".into()),
    }
}

async fn once(am: &Alertmanager, wanted: &[Wanted]) -> Round {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = Metrics::new();
    round(
        am,
        wanted,
        ME,
        &BTreeMap::new(),
        &metrics,
        Timestamp::now(),
        |_, _| {},
    )
    .await
    .expect("a round against alertmanager")
}

fn ours_live(listed: &[Silence]) -> Vec<&Silence> {
    (listed.iter())
        .filter(|s| s.created_by == ME && s.status.state != SilenceState::Expired)
        .collect()
}

#[tokio::test]
async fn silences_live_and_die_in_alertmanager_itself() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let am_process = start().await;
    let am = Alertmanager::new(&am_process.url, Credentials::None, None).expect("a client");
    let node = "kwok-node-1.example";
    let by_name = spec(&[("instance", "$(NODE_NAME):9100", false)]);
    let w = Wanted::of(&nodeop(), node, &by_name).expect("valid");

    // Someone else's silence, which must stay as it is.
    let now = Timestamp::now();
    let theirs = silence::Postable {
        id: None,
        matchers: w.matchers.clone(),
        starts_at: now,
        ends_at: now.checked_add(Duration::from_secs(3600)).expect("time"),
        created_by: "alice".into(),
        comment: "a person's".into(),
    };
    let theirs_id = am.post("create", &theirs).await.expect("alice's silence");

    // Taken: one silence, active, with the node's name.
    assert_eq!(once(&am, std::slice::from_ref(&w)).await.created, 1);
    let listed = am.list().await.expect("a list");
    let ours = ours_live(&listed);
    assert_eq!(ours.len(), 1, "{listed:?}");
    assert_eq!(ours[0].status.state, SilenceState::Active);
    assert_eq!(ours[0].matchers[0].value, "kwok-node-1.example:9100");
    let key = silence::Key::parse(&ours[0].comment).expect("our key");
    assert_eq!((key.holder, key.node.as_str()), (nodeop(), node));
    let first = ours[0].id.clone();

    // A restart's round: nothing is made twice.
    assert_eq!(once(&am, std::slice::from_ref(&w)).await, Round::default());
    assert_eq!(ours_live(&am.list().await.expect("a list")).len(), 1);

    // Near its end, it is extended, in place (Alertmanager keeps the id).
    let mut short = silence::Postable {
        id: Some(first.clone()),
        matchers: ours[0].matchers.clone(),
        starts_at: ours[0].starts_at,
        ends_at: Timestamp::now()
            .checked_add(Duration::from_secs(60))
            .expect("time"),
        created_by: ME.into(),
        comment: ours[0].comment.clone(),
    };
    let kept = am.post("extend", &short).await.expect("shortened");
    assert_eq!(kept, first, "an active silence's end is updated in place");
    assert_eq!(once(&am, std::slice::from_ref(&w)).await.extended, 1);
    let listed = am.list().await.expect("a list");
    let ours = ours_live(&listed);
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].id, first);
    assert!(ours[0].ends_at > short.ends_at);

    // Changed matchers: Alertmanager replaces the silence; still one of ours, with the same key.
    let regex = spec(&[("instance", "$(NODE_NAME)(:[0-9]+)?", true)]);
    let w2 = Wanted::of(&nodeop(), node, &regex).expect("valid");
    assert_eq!(once(&am, std::slice::from_ref(&w2)).await.extended, 1);
    let listed = am.list().await.expect("a list");
    let ours = ours_live(&listed);
    assert_eq!(ours.len(), 1, "{listed:?}");
    assert_eq!(ours[0].matchers[0].value, r"kwok-node-1\.example(:[0-9]+)?");
    assert_eq!(
        silence::Key::parse(&ours[0].comment).map(|k| k.since),
        Some(key.since),
        "maxDuration still counts from the first"
    );

    // Given back: expired; and a second round expires nothing more.
    assert_eq!(once(&am, &[]).await.expired, 1);
    assert_eq!(once(&am, &[]).await, Round::default());
    let listed = am.list().await.expect("a list");
    assert!(ours_live(&listed).is_empty(), "{listed:?}");
    let alice = listed.iter().find(|s| s.id == theirs_id).expect("alice's");
    assert_eq!(alice.status.state, SilenceState::Active);

    // An unknown id: Alertmanager answers 404, which expiring takes as done.
    am.expire("00000000-0000-0000-0000-000000000000")
        .await
        .expect("an unknown silence is expired already");
    short.id = Some("00000000-0000-0000-0000-000000000000".into());
    assert!(am.post("extend", &short).await.is_err());
}
