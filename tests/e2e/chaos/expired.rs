//! Watches ended by etcd's compaction: the API server ends a watch now and then, and a watch that
//! resumes from a revision etcd compacted away is answered `410 Expired`, after which the client
//! must list again. The test's [`ApiProxy`](super::proxy::ApiProxy) does both to the controller, three times through a
//! rollout: it ends every watch the controller has open and answers each new watch `410 Expired`
//! for a few seconds (lists and writes go through), then lets watches through again.

use std::sync::atomic::Ordering;

use super::proxy::{Mode, Proxied};
use super::{Random, Row, Sizes, say};

pub(super) async fn watch_expired(sizes: Sizes, mut rng: Random) -> Option<Row> {
    // Jobs of 8 s: the rollout lasts through the three rounds.
    let run = Proxied::start("chaos-410", sizes, "8s").await?;
    run.stage.until_done("up", 0.2).await;
    for _ in 0..3 {
        run.proxy.answer(Mode::Expire);
        tokio::time::sleep(rng.millis(3000, 6000)).await;
        run.proxy.answer(Mode::Pass);
        tokio::time::sleep(rng.millis(2000, 5000)).await;
    }
    let expired = run.proxy.answers.expired.load(Ordering::Relaxed);
    say(&format!(
        "watch-expired: {expired} watches answered 410 Expired"
    ));
    Some(run.end(expired).await)
}
