//! The API server answering 429, then slowly, for minutes, as an overloaded one does: the
//! controller talks to the API server through the test's [`ApiProxy`]. For a minute every new
//! request is answered `429 Too Many Requests` with `Retry-After: 1` (watches already open go
//! on), then for a minute each request is held 1.5 s before it is passed on. The checker and the
//! test talk to the API server directly.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::proxy::{ApiProxy, Mode, SLOW};
use super::{Limits, Random, Replicas, Row, Sizes, Stage, rollout_plan, say};
use crate::support;
use crate::support::scene::Scene;

/// How long each of the two answers lasts.
const PHASE: Duration = Duration::from_secs(60);

pub(super) async fn api_throttle(sizes: Sizes, _rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let stage = Stage::new(Scene::new("chaos-429"), sizes, |_| {
        Limits::one_plan("up", c)
    })
    .await?;
    let ns = stage.ns().to_string();
    let proxy = match ApiProxy::start(stage.client()).await {
        Ok(p) => p,
        Err(e) => {
            stage.checker.violation(format!("no proxy: {e}"));
            return Some(stage.end(Instant::now(), 0).await);
        }
    };
    let kubeconfig = std::env::temp_dir().join(format!("{ns}-throttled.kubeconfig"));
    proxy
        .kubeconfig(&kubeconfig)
        .expect("write the proxy's kubeconfig");
    let replicas = Replicas::start(&ns, &[("a", kubeconfig.as_path())], false);
    // Jobs that take a while: the controller has work left (labels, uncordons, the next
    // batch's Jobs) all through both phases.
    let mut plan = rollout_plan("up", &stage.s.pool, c, "v1", "");
    (plan.metadata.annotations.get_or_insert_default())
        .insert(support::COMPLETE_DELAY_ANNOTATION.into(), "20s".into());
    stage.create_plan(&plan).await;
    stage.until_done("up", 0.3).await;
    let struck = Instant::now();
    proxy.answer(Mode::Reject);
    tokio::time::sleep(PHASE).await;
    proxy.answer(Mode::Hold);
    tokio::time::sleep(PHASE).await;
    proxy.answer(Mode::Pass);
    let finished = stage.finish_rollout("up", super::ROLLOUT_LIMIT).await;
    replicas.stop();
    let _ = std::fs::remove_file(&kubeconfig);
    let (rejected, held) = (
        proxy.answers.rejected.load(Ordering::Relaxed),
        proxy.answers.held.load(Ordering::Relaxed),
    );
    say(&format!(
        "api-throttle: {rejected} requests answered 429, then {held} held {SLOW:?} each, over {:.0} s",
        struck.elapsed().as_secs_f64()
    ));
    // None answered 429: the scenario injected no fault, which `end` reports.
    Some(stage.end(finished, rejected).await)
}
