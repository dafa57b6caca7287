//! Property tests over random worlds: Jobs that succeed or fail, nodes that reboot, controllers
//! killed in the middle of applying a decision, and time. After every decision the promises hold:
//! never more nodes in progress than `concurrency`, never a second Job on a node, no node started
//! after a failure under `stopOnFailure`; and once the world is calm, every node ends.

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    /// Decide, and apply the first `n` writes of the decision (a crash cuts the rest).
    Decide {
        cut: Option<usize>,
    },
    /// A running Job ends.
    Finish {
        pick: usize,
        fail: bool,
    },
    /// A node whose reboot pod found its sentinel comes back on a new boot.
    Reboot {
        pick: usize,
    },
    Wait {
        secs: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::of(0usize..6).prop_map(|cut| Op::Decide { cut }),
        3 => (0usize..8, proptest::bool::weighted(0.15)).prop_map(|(pick, fail)| Op::Finish { pick, fail }),
        1 => (0usize..8).prop_map(|pick| Op::Reboot { pick }),
        1 => (1u32..120).prop_map(|secs| Op::Wait { secs }),
    ]
}

struct World {
    op: NodeOp,
    nodes: Vec<NodeInfo>,
    seen: Seen,
    /// Jobs by node: every name ever created.
    created: BTreeMap<String, BTreeSet<String>>,
    /// The node each Job runs on.
    job_node: BTreeMap<String, String>,
    now: Timestamp,
    failed_once: bool,
}

impl World {
    fn new(op: NodeOp, n: usize) -> World {
        let mut nodes: Vec<NodeInfo> = (0..n).map(|i| node(&format!("n{i}"))).collect();
        if let Some(last) = nodes.last_mut() {
            last.labels.insert(
                "node-role.kubernetes.io/control-plane".into(),
                String::new(),
            );
        }
        World {
            op,
            nodes,
            seen: Seen::default(),
            created: BTreeMap::new(),
            job_node: BTreeMap::new(),
            now: t(T0),
            failed_once: false,
        }
    }

    fn decide(&mut self, cut: Option<usize>) -> Result<(), TestCaseError> {
        let d = decide_with(&self.op, &self.nodes, &self.seen, &self.now.to_string());
        let started_before: BTreeSet<String> = self
            .op
            .status
            .iter()
            .flat_map(|s| s.node_statuses.keys().cloned())
            .collect();
        check(self, &d, &started_before)?;
        let (first, then): (Vec<_>, Vec<_>) = d.effects.iter().partition(|e| e.before_status());
        let mut budget = cut.unwrap_or(usize::MAX);
        for e in first {
            if budget == 0 {
                return Ok(());
            }
            budget -= 1;
            self.apply(e);
        }
        if budget == 0 {
            return Ok(());
        }
        budget -= 1;
        self.op.status = Some(d.status.clone());
        for e in then {
            if budget == 0 {
                return Ok(());
            }
            budget -= 1;
            self.apply(e);
        }
        Ok(())
    }

    fn apply(&mut self, e: &NodeOpEffect) {
        match e {
            NodeOpEffect::Uncordon(c) | NodeOpEffect::Cordon(c) => {
                if let Some(n) = self.nodes.iter_mut().find(|n| n.name == c.node) {
                    c.apply_to(n);
                }
            }
            NodeOpEffect::Evict { .. } | NodeOpEffect::DeletePods { .. } => {}
            NodeOpEffect::CreatePod(pod) => {
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                self.seen.reboot_pods.insert(node);
            }
            NodeOpEffect::DeletePod(_) => {}
            NodeOpEffect::CallOffReboot(name) => {
                self.seen
                    .reboot_pods
                    .retain(|n| !name.contains(&format!("-{n}-")));
            }
            NodeOpEffect::CreateJob(job) => {
                let name = job.metadata.name.clone().unwrap_or_default();
                let node = job
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kairos.io/node").cloned())
                    .unwrap_or_default();
                self.created
                    .entry(node.clone())
                    .or_default()
                    .insert(name.clone());
                self.job_node.insert(name.clone(), node);
                self.seen.jobs.entry(name).or_insert(JobView::Running);
            }
        }
    }

    fn finish(&mut self, pick: usize, fail: bool) {
        let running: Vec<String> = self
            .seen
            .jobs
            .iter()
            .filter(|(_, v)| **v == JobView::Running)
            .map(|(k, _)| k.clone())
            .collect();
        if let Some(job) = running.get(pick % running.len().max(1)) {
            let view = if fail {
                JobView::Failed(String::new())
            } else {
                JobView::Succeeded
            };
            self.failed_once |= fail;
            self.seen.jobs.insert(job.clone(), view);
        }
    }

    /// A node whose Job succeeded and whose reboot pod waits reboots.
    fn reboot(&mut self, pick: usize) {
        let due: Vec<String> = self
            .seen
            .jobs
            .iter()
            .filter(|(_, v)| **v == JobView::Succeeded)
            .filter_map(|(j, _)| self.job_node.get(j).cloned())
            .filter(|n| self.seen.reboot_pods.contains(n))
            .collect();
        if let Some(name) = due.get(pick % due.len().max(1))
            && let Some(n) = self.nodes.iter_mut().find(|n| &n.name == name)
        {
            n.boot_id = format!("{}-boot-{}", n.name, self.now.as_second());
        }
    }
}

fn check(
    w: &World,
    d: &NodeOpDecision,
    started_before: &BTreeSet<String>,
) -> Result<(), TestCaseError> {
    let in_flight = d
        .status
        .node_statuses
        .values()
        .filter(|s| NodeState::read(s, w.now).is_some_and(|s| s.in_flight()))
        .count();
    if let Some(c) = w.op.spec.concurrency.filter(|c| *c > 0) {
        prop_assert!(
            in_flight <= usize::try_from(c).unwrap_or(0),
            "{in_flight} in flight: {:#?}",
            d.status
        );
    }
    for (node, jobs) in &w.created {
        prop_assert!(jobs.len() <= 1, "node {node} got Jobs {jobs:?}");
    }
    for e in &d.effects {
        if let NodeOpEffect::CreateJob(job) = e {
            let name = job.metadata.name.clone().unwrap_or_default();
            let named = d
                .status
                .node_statuses
                .values()
                .any(|s| s.job_name.as_deref() == Some(name.as_str()));
            prop_assert!(named, "Job {name} created without the status naming it");
        }
    }
    let stop = w.op.spec.stop_on_failure == Some(true);
    let failed_before =
        w.op.status
            .iter()
            .flat_map(|s| s.node_statuses.values())
            .any(|s| s.phase == "Failed");
    if stop && failed_before {
        let new: Vec<&String> = d
            .status
            .node_statuses
            .keys()
            .filter(|n| !started_before.contains(*n))
            .collect();
        prop_assert!(new.is_empty(), "started {new:?} after a failure");
    }
    Ok(())
}

fn run(w: &mut World, op: &Op) -> Result<(), TestCaseError> {
    match op {
        Op::Decide { cut } => {
            w.decide(*cut)?;
            // A reboot pod is removed before its node's slot goes to another node.
            if let Some(c) = w.op.spec.concurrency.filter(|c| *c > 0) {
                let pods = w.seen.reboot_pods.len();
                prop_assert!(
                    pods <= usize::try_from(c).unwrap_or(0),
                    "reboot pods on {pods} nodes: {:?}",
                    w.seen.reboot_pods
                );
            }
        }
        Op::Finish { pick, fail } => w.finish(*pick, *fail),
        Op::Reboot { pick } => w.reboot(*pick),
        Op::Wait { secs } => {
            w.now = w
                .now
                .checked_add(jiff::SignedDuration::from_secs(i64::from(*secs)))
                .unwrap_or(w.now)
        }
    }
    Ok(())
}

/// With the world calm (every Job succeeds, every reboot happens), the NodeOp ends: every node
/// done, or it failed and (under `stopOnFailure`) nothing is left in progress.
fn settle(w: &mut World) -> Result<(), TestCaseError> {
    for _ in 0..40 {
        w.decide(None)?;
        let running: Vec<String> = w
            .seen
            .jobs
            .iter()
            .filter(|(_, v)| **v == JobView::Running)
            .map(|(k, _)| k.clone())
            .collect();
        for j in running {
            w.seen.jobs.insert(j, JobView::Succeeded);
        }
        w.decide(None)?;
        for i in 0..w.nodes.len() {
            w.reboot(i);
        }
        w.now = w
            .now
            .checked_add(jiff::SignedDuration::from_secs(30))
            .unwrap_or(w.now);
        let status = w.op.status.clone().unwrap_or_default();
        let in_flight = status
            .node_statuses
            .values()
            .any(|s| NodeState::read(s, w.now).is_some_and(|s| s.in_flight()));
        match status.phase.as_deref() {
            Some("Completed") => {
                prop_assert_eq!(status.node_statuses.len(), w.nodes.len());
                w.decide(None)?;
                prop_assert!(
                    w.seen.reboot_pods.is_empty(),
                    "reboot pods left: {:?}",
                    w.seen.reboot_pods
                );
                prop_assert!(w.nodes.iter().all(|n| !n.unschedulable), "a cordon stayed");
                return Ok(());
            }
            Some("Failed")
                if !in_flight
                    && (w.op.spec.stop_on_failure == Some(true)
                        || status.node_statuses.len() == w.nodes.len()) =>
            {
                return Ok(());
            }
            _ => {}
        }
    }
    prop_assert!(false, "the NodeOp did not end: {:#?}", w.op.status);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn nodeops_keep_their_promises(
        n in 1usize..6,
        concurrency in 0i32..3,
        stop in proptest::bool::ANY,
        reboot in proptest::bool::ANY,
        cordon in proptest::bool::ANY,
        ops in proptest::collection::vec(op(), 1..50),
    ) {
        let op = nodeop(NodeOpSpec {
            concurrency: Some(concurrency),
            stop_on_failure: Some(stop),
            reboot_on_success: Some(reboot),
            cordon: Some(cordon),
            ..Default::default()
        });
        let mut w = World::new(op, n);
        for o in &ops {
            run(&mut w, o)?;
        }
        settle(&mut w)?;
        let _ = w.failed_once;
    }
}
