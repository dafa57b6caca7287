//! The API server answering 429, then slowly, for minutes, as an overloaded one does: the
//! controller talks to the API server through the test's [`ApiProxy`](super::proxy::ApiProxy). For a minute every new
//! request is answered `429 Too Many Requests` with `Retry-After: 1` (watches already open go
//! on), then for a minute each request is held 1.5 s before it is passed on. The checker and the
//! test talk to the API server directly.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::proxy::{Mode, Proxied, SLOW};
use super::{Random, Row, Sizes, say};

/// How long each of the two answers lasts.
const PHASE: Duration = Duration::from_secs(60);

pub(super) async fn api_throttle(sizes: Sizes, _rng: Random) -> Option<Row> {
    // Jobs of 20 s: the controller has work left (labels, uncordons, the next batch's Jobs) all
    // through both phases.
    let run = Proxied::start("chaos-429", sizes, "20s").await?;
    run.stage.until_done("up", 0.3).await;
    let struck = Instant::now();
    run.proxy.answer(Mode::Reject);
    tokio::time::sleep(PHASE).await;
    run.proxy.answer(Mode::Hold);
    tokio::time::sleep(PHASE).await;
    run.proxy.answer(Mode::Pass);
    let answers = &run.proxy.answers;
    let (rejected, held) = (
        answers.rejected.load(Ordering::Relaxed),
        answers.held.load(Ordering::Relaxed),
    );
    say(&format!(
        "api-throttle: {rejected} requests answered 429, then {held} held {SLOW:?} each, over {:.0} s",
        struck.elapsed().as_secs_f64()
    ));
    // None answered 429: the scenario injected no fault, which `end` reports.
    Some(run.end(rejected).await)
}
