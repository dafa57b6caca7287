//! Two replicas whose clocks differ by a minute. slipway decides on the API server's time, read
//! off the `Date` of its answers (`slipway::runtime::clock`), so two replicas on hosts whose
//! clocks differ agree; here they must not. A test cannot move a process's clock (the binary is
//! static, so no `LD_PRELOAD`, and a time namespace does not move `CLOCK_REALTIME`), so it moves
//! the time replica `a` decides by: `a` talks to the API server through the test's
//! [`ApiProxy`](super::proxy::ApiProxy), which moves the `Date` of every answer a minute ahead;
//! `b` talks to it directly. The leader is killed three times, back only after the lease, so that
//! each replica leads in turn and judges what the other wrote (each node's start, its Job's soak
//! of `postCompleteDelay`, stamped a minute apart): no node over the Plan's limits, and the
//! rollout finishes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::proxy::ApiProxy;
use super::{
    LEASE, Limits, ROLLOUT_LIMIT, Random, Replicas, Row, Sizes, Stage, lease_holder, rollout_plan,
    say, standby_takes_over,
};
use crate::support;
use crate::support::scene::Scene;

/// How far `a`'s time is from `b`'s.
const SKEW_SECS: i64 = 60;

pub(super) async fn clock_skew(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let stage = Stage::new(Scene::new("chaos-skew"), sizes, |_| {
        Limits::one_plan("up", c)
    })
    .await?;
    let client = stage.client();
    let ns = stage.ns().to_string();
    let proxy = ApiProxy::start(client.clone())
        .await
        .expect("start the proxy in front of the API server");
    proxy.shift_dates(SKEW_SECS);
    let kubeconfig = std::env::temp_dir().join(format!("{ns}-skewed.kubeconfig"));
    proxy
        .kubeconfig(&kubeconfig)
        .expect("write the proxy's kubeconfig");
    let replicas = Replicas::start(
        &ns,
        &[("a", kubeconfig.as_path()), ("b", stage.kubeconfig())],
        true,
    );
    // Jobs of 5 s and a soak of 5 s after each node: a rollout long enough for three leaders, and
    // times recorded by one replica that the other judges.
    let mut plan = rollout_plan("up", &stage.s.pool, c, "v1", "  postCompleteDelay: 5s\n");
    (plan.metadata.annotations.get_or_insert_default())
        .insert(support::COMPLETE_DELAY_ANNOTATION.into(), "5s".into());
    stage.create_plan(&plan).await;
    let mut takeovers = 0;
    for _ in 0..3 {
        if stage.is_rolled_out("up").await {
            break;
        }
        tokio::time::sleep(rng.millis(2000, 5000)).await;
        let Some(leader) = lease_holder(&client, &ns).await else {
            continue;
        };
        replicas.crash_for(&leader, LEASE + Duration::from_secs(5));
        standby_takes_over(&stage, &client, &ns, &leader).await;
        takeovers += 1;
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    let dated = proxy.answers.dated.load(Ordering::Relaxed);
    let told = replicas.log_of("a").contains("the API server's clock is");
    say(&format!(
        "clock-skew: {dated} answers to a dated {SKEW_SECS} s ahead (a took it: {told}), {takeovers} takeovers"
    ));
    replicas.stop();
    let _ = std::fs::remove_file(&kubeconfig);
    // Without a moved Date taken in, the scenario injected no fault, which `end` reports.
    let faults = if dated > 0 && told { takeovers } else { 0 };
    Some(stage.end(finished, faults).await)
}
