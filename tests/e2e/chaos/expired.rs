//! Watches ended by etcd's compaction: the API server ends a watch now and then, and a watch that
//! resumes from a revision etcd compacted away is answered `410 Expired`, after which the client
//! must list again. The test's [`ApiProxy`] does both to the controller, three times through a
//! rollout: it ends every watch the controller has open and answers each new watch `410 Expired`
//! for a few seconds (lists and writes go through), then lets watches through again.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::proxy::{ApiProxy, Mode};
use super::{Limits, ROLLOUT_LIMIT, Random, Replicas, Row, Sizes, Stage, rollout_plan, say};
use crate::support;
use crate::support::scene::Scene;

pub(super) async fn watch_expired(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let stage = Stage::new(Scene::new("chaos-410"), sizes, |_| {
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
    let kubeconfig = std::env::temp_dir().join(format!("{ns}-expired.kubeconfig"));
    proxy
        .kubeconfig(&kubeconfig)
        .expect("write the proxy's kubeconfig");
    let replicas = Replicas::start(&ns, &[("a", kubeconfig.as_path())], false);
    // Jobs that take a few seconds: the rollout lasts through the three rounds.
    let mut plan = rollout_plan("up", &stage.s.pool, c, "v1", "");
    (plan.metadata.annotations.get_or_insert_default())
        .insert(support::COMPLETE_DELAY_ANNOTATION.into(), "8s".into());
    stage.create_plan(&plan).await;
    stage.until_done("up", 0.2).await;
    for _ in 0..3 {
        proxy.answer(Mode::Expire);
        tokio::time::sleep(rng.millis(3000, 6000)).await;
        proxy.answer(Mode::Pass);
        tokio::time::sleep(rng.millis(2000, 5000)).await;
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    let _ = std::fs::remove_file(&kubeconfig);
    let expired = proxy.answers.expired.load(Ordering::Relaxed);
    say(&format!(
        "watch-expired: {expired} watches answered 410 Expired"
    ));
    Some(stage.end(finished, expired).await)
}
