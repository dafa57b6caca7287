//! slipway's silences against Alertmanager itself (built from the Go module proxy by
//! tests/tools/alertmanager/build.sh, cached), on loopback: the v2 API's shapes and rules as the
//! real server has them (a silence created, extended in place, replaced when its matchers change,
//! expired; a restart's reconcile that makes no duplicate; others' silences left alone).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jiff::Timestamp;
use slipway::node::disruption::{Matcher, SilenceSpec};
use slipway::node::holders::Holder;
use slipway::node::silence::{self, Silence, SilenceState, Wanted};
use slipway::runtime::metrics::Metrics;
use slipway::runtime::silences::{Alertmanager, Credentials, Round, round};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// alertmanager: `SLIPWAY_ALERTMANAGER`, else what tests/tools/alertmanager/build.sh builds.
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLIPWAY_ALERTMANAGER") {
        return PathBuf::from(p);
    }
    let out = Command::new(repo().join("tests/tools/alertmanager/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/tools/alertmanager/build.sh");
    assert!(
        out.status.success(),
        "tests/tools/alertmanager/build.sh failed"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A running Alertmanager, killed when dropped.
struct Running {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const CONFIG: &str = "route:\n  receiver: none\nreceivers:\n  - name: none\n";

async fn start() -> Running {
    let bin = binary();
    let dir = std::env::temp_dir().join(format!("slipway-alertmanager-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).expect("a temporary directory");
    std::fs::write(dir.join("alertmanager.yml"), CONFIG).expect("the config");
    // A free loopback port: taken, read, let go (alertmanager binds it next).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port")
        .port();
    let child = Command::new(bin)
        .arg(format!(
            "--config.file={}",
            dir.join("alertmanager.yml").display()
        ))
        .arg(format!("--storage.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).expect("a log file"))
        .spawn()
        .expect("start alertmanager");
    let running = Running {
        child,
        dir,
        url: format!("http://127.0.0.1:{port}"),
    };
    // Ready when it answers: asked a bounded number of times (it starts in well under a second).
    let http = reqwest::Client::new();
    let ready = format!("{}/-/ready", running.url);
    for _ in 0..300 {
        if let Ok(r) = http.get(&ready).send().await
            && r.status().is_success()
        {
            return running;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(running.dir.join("log")).unwrap_or_default();
    panic!("alertmanager did not become ready:\n{log}");
}

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
