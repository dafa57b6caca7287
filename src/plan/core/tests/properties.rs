//! Property tests over random worlds: random Job outcomes, reboots, crashes in the middle of
//! applying a decision, TTL deletions, Plan edits and time. After every write the invariants the
//! operators rely on are checked; at the end, with the world calm, the rollout must finish.

use proptest::prelude::*;

use super::*;
use crate::node::change::NodeChange;

#[derive(Debug, Clone)]
enum Op {
    /// Decide, and apply the first `n` writes of the decision (a crash cuts the rest).
    Decide { cut: Option<usize> },
    /// A running Job ends.
    Finish { pick: usize, fail: bool },
    /// A node that was asked to reboot comes back on a new boot.
    Reboot { pick: usize },
    /// Time passes.
    Wait { secs: u32 },
    /// The TTL controller deletes finished Jobs. Their TTL (15 minutes) is far longer than the
    /// controller takes to see a Job finish, so a decision has seen them first. (A controller that
    /// is down for longer than the TTL can re-run a node whose Job finished meanwhile, as SUC can.)
    Ttl,
    /// The Plan is edited: a new version.
    Edit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::of(0usize..12).prop_map(|cut| Op::Decide { cut }),
        3 => (0usize..16, proptest::bool::weighted(0.2)).prop_map(|(pick, fail)| Op::Finish { pick, fail }),
        1 => (0usize..16).prop_map(|pick| Op::Reboot { pick }),
        1 => (1u32..400).prop_map(|secs| Op::Wait { secs }),
        1 => Just(Op::Ttl),
        1 => Just(Op::Edit),
    ]
}

/// The writes of a decision in the order the controller applies them.
#[derive(Debug, PartialEq)]
enum Write {
    Patch(NodeChange),
    Status(Box<PlanStatus>),
    DeleteJob(String),
    DeletePod(String),
    CreatePod(Box<Pod>),
    CreateJob(Box<Job>),
}

fn writes(r: &Rollout) -> Vec<Write> {
    let mut w: Vec<Write> = r.node_patches.iter().cloned().map(Write::Patch).collect();
    if r.status_changed {
        w.push(Write::Status(Box::new(r.status.clone())));
    }
    w.extend(
        r.delete_jobs
            .iter()
            .map(|d| Write::DeleteJob(d.name.clone())),
    );
    w.extend(r.delete_pods.iter().cloned().map(Write::DeletePod));
    w.extend(
        r.create_pods
            .iter()
            .cloned()
            .map(|p| Write::CreatePod(Box::new(p))),
    );
    w.extend(
        r.create_jobs
            .iter()
            .cloned()
            .map(|j| Write::CreateJob(Box::new(j))),
    );
    w
}

/// What the checker remembers about the world's history.
#[derive(Default)]
struct History {
    /// Job names that completed: never created again.
    completed: BTreeSet<String>,
    /// Job names that failed, and the Plan generation they were created at.
    failed: BTreeMap<String, Option<i64>>,
    /// The Plan generation each Job was created at.
    created: BTreeMap<String, Option<i64>>,
    /// Failed Jobs the status has reported.
    reported: BTreeSet<String>,
    /// How many times each Job was created at each Plan generation.
    creations: BTreeMap<(String, Option<i64>), i32>,
}

/// The failure policies the properties run under: SUC's (none), and each action.
fn failure_policy(pick: u8) -> Option<crate::plan::api::FailurePolicySpec> {
    use crate::plan::api::{FailureAction, FailurePolicySpec};
    let action = match pick {
        0 => return None,
        1 => FailureAction::Stop,
        2 => FailureAction::Retry,
        _ => FailureAction::Quarantine,
    };
    Some(FailurePolicySpec {
        action: Some(action),
        retries: Some(2),
        backoff: Some("1s".into()),
        then: Some(FailureAction::Stop),
        max_quarantined: Some(1),
        ..Default::default()
    })
}

fn policy_of(w: &World) -> crate::plan::core::failure::FailurePolicy {
    crate::plan::core::failure::FailurePolicy::of(w.plan.spec.failure_policy.as_ref())
        .expect("valid policy")
}

/// A node of the status failed for good at the Plan's generation.
fn failed_now(w: &World, st: &PlanStatus) -> bool {
    st.nodes.iter().any(|p| {
        p.phase == NodePhase::Failed
            && p.reason.as_deref() == Some("JobFailed")
            && p.generation == w.plan.metadata.generation
    })
}

fn unfinished(w: &World) -> Vec<&Job> {
    w.jobs
        .iter()
        .filter(|j| {
            !j.status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.status == "True")
        })
        .collect()
}

fn check(w: &World, h: &History, concurrency: usize) -> Result<(), TestCaseError> {
    let running = unfinished(w);
    prop_assert!(
        running.len() <= concurrency,
        "{} Jobs run, concurrency {concurrency}",
        running.len()
    );
    let mut per_node = BTreeMap::new();
    for j in &running {
        *per_node.entry(label(j, labels::NODE)).or_insert(0) += 1;
    }
    prop_assert!(
        per_node.values().all(|n| *n <= 1),
        "two live Jobs on one node: {per_node:?}"
    );
    prop_assert!(w.status().applying.len() <= concurrency);
    // A failure, once reported in the status, stays there while the Plan is unchanged.
    let status = w.status();
    for (job, generation) in &h.failed {
        let reported = status
            .nodes
            .iter()
            .any(|p| p.job.as_deref() == Some(job) && p.phase == NodePhase::Failed);
        if reported {
            continue;
        }
        let was_reported = h.reported.contains(job);
        prop_assert!(
            !was_reported || *generation != w.plan.metadata.generation,
            "the failure of {} was forgotten at the same generation: {:#?}",
            job,
            status
        );
    }
    Ok(())
}

fn apply_write(w: &mut World, write: Write, h: &mut History) -> Result<(), TestCaseError> {
    match write {
        Write::Patch(p) => {
            if let Some(n) = w.nodes.iter_mut().find(|n| n.name == p.node) {
                p.apply_to(n);
            }
        }
        Write::Status(s) => {
            // A stopped rollout starts nothing: the nodes it holds can only go.
            let old = w.status();
            if policy_of(w).held_failure_stops() && failed_now(w, &old) {
                let new: Vec<&String> = s
                    .applying
                    .iter()
                    .filter(|n| !old.applying.contains(n))
                    .collect();
                prop_assert!(new.is_empty(), "a stopped rollout started {new:?}: {s:#?}");
            }
            // A Job's failure (a node that did not come back fails with its Job's name too, and
            // is released once it is back).
            let job_failed =
                |p: &&crate::plan::api::NodeProgress| p.reason.as_deref() == Some("JobFailed");
            for p in s
                .nodes
                .iter()
                .filter(|p| p.phase == NodePhase::Failed)
                .filter(job_failed)
            {
                h.reported.extend(p.job.clone());
            }
            w.plan.status = Some(*s);
        }
        Write::DeleteJob(name) => w.jobs.retain(|j| j.metadata.name.as_deref() != Some(&name)),
        Write::DeletePod(name) => w.pods.retain(|p| p.metadata.name.as_deref() != Some(&name)),
        Write::CreatePod(p) => {
            if !w.pods.iter().any(|e| e.metadata.name == p.metadata.name) {
                w.pods.push(*p);
            }
        }
        Write::CreateJob(j) => {
            let name = j.metadata.name.clone().unwrap_or_default();
            h.created
                .entry(name.clone())
                .or_insert(w.plan.metadata.generation);
            prop_assert!(
                !h.completed.contains(&name),
                "{name} completed before and runs again"
            );
            // Never a node twice at one generation, but for the retries the policy allows and
            // those of a Job killed by its node's reboot.
            let times = h
                .creations
                .entry((name.clone(), w.plan.metadata.generation))
                .or_insert(0);
            *times += 1;
            let allowed = 1 + policy_of(w).retries + crate::plan::core::failure::MAX_REBOOT_RETRIES;
            prop_assert!(
                *times <= allowed,
                "{name} created {times} times at one generation"
            );
            prop_assert!(
                policy_of(w).retries > 0
                    || h.failed
                        .get(&name)
                        .is_none_or(|g| *g != w.plan.metadata.generation),
                "{name} failed at this generation and is retried"
            );
            if !w.jobs.iter().any(|e| e.metadata.name == j.metadata.name) {
                w.jobs.push(*j);
            }
        }
    }
    Ok(())
}

fn run(w: &mut World, h: &mut History, op: &Op, concurrency: usize) -> Result<(), TestCaseError> {
    match op {
        Op::Decide { cut } => {
            let r = w.decide();
            w.explain = false;
            let unexplained = w.decide();
            w.explain = true;
            prop_assert_eq!(
                &r.status,
                &unexplained.status,
                "explaining changes no decision"
            );
            prop_assert_eq!(
                writes(&r),
                writes(&unexplained),
                "explaining changes no decision"
            );
            let all = writes(&r);
            let n = cut.map_or(all.len(), |c| c.min(all.len()));
            for write in all.into_iter().take(n) {
                apply_write(w, write, h)?;
                check(w, h, concurrency)?;
            }
        }
        Op::Finish { pick, fail } => {
            let names: Vec<String> = unfinished(w)
                .iter()
                .filter_map(|j| j.metadata.name.clone())
                .collect();
            if !names.is_empty() {
                let name = names[pick % names.len()].clone();
                let at = w.now;
                if *fail {
                    w.finish(&name, "Failed", at, "BackoffLimitExceeded", "boom");
                    let created = h.created.get(&name).copied().flatten();
                    h.failed.insert(name, created);
                } else {
                    w.finish(&name, "Complete", at, "", "");
                    h.completed.insert(name);
                }
            }
        }
        Op::Reboot { pick } => {
            let rebooting: Vec<String> = w
                .status()
                .nodes
                .iter()
                .filter(|p| {
                    p.phase == NodePhase::Rebooting || p.reason.as_deref() == Some("RebootTimedOut")
                })
                .map(|p| p.name.clone())
                .collect();
            if !rebooting.is_empty() {
                let name = rebooting[pick % rebooting.len()].clone();
                reboot(w, &name);
            }
        }
        Op::Wait { secs } => w.now += jiff::SignedDuration::from_secs(i64::from(*secs)),
        Op::Ttl => {
            run(w, h, &Op::Decide { cut: None }, concurrency)?;
            w.jobs.retain(unfinished_one);
        }
        Op::Edit => {
            let g = w.plan.metadata.generation.unwrap_or(1) + 1;
            w.plan.metadata.generation = Some(g);
            w.plan.spec.version = Some(format!("v1.30.{g}+k3s1"));
        }
    }
    Ok(())
}

fn unfinished_one(j: &Job) -> bool {
    !j.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.status == "True")
}

/// With every Job succeeding and every node coming back, the rollout finishes.
fn settle(w: &mut World, h: &mut History, concurrency: usize) -> Result<(), TestCaseError> {
    // Failures hold the Plan until it changes: change it once more, and release the nodes the
    // policy quarantined (a reset).
    let g = w.plan.metadata.generation.unwrap_or(1) + 1;
    w.plan.metadata.generation = Some(g);
    w.plan.metadata.annotations = Some(
        [(
            crate::plan::core::failure::RESET_ANNOTATION.to_string(),
            format!("settle-{g}"),
        )]
        .into(),
    );
    for i in 0..200 {
        run(w, h, &Op::Decide { cut: None }, concurrency)?;
        if cond::is(&w.status(), COMPLETE, TRUE) {
            return Ok(());
        }
        // What an operator does on a rollout that says it stopped, or left nodes quarantined.
        if matches!(
            cond::reason(&w.status(), COMPLETE),
            "RolloutStopped" | "Quarantined"
        ) {
            w.plan.metadata.annotations = Some(
                [(
                    crate::plan::core::failure::RESET_ANNOTATION.to_string(),
                    format!("settle-{g}-{i}"),
                )]
                .into(),
            );
        }
        let names: Vec<String> = unfinished(w)
            .iter()
            .filter_map(|j| j.metadata.name.clone())
            .collect();
        for name in names {
            let at = w.now;
            w.finish(&name, "Complete", at, "", "");
            h.completed.insert(name);
        }
        for _ in 0..w.nodes.len() {
            run(w, h, &Op::Reboot { pick: 0 }, concurrency)?;
        }
        w.now += jiff::SignedDuration::from_secs(30);
    }
    prop_assert!(false, "the rollout did not finish: {:#?}", w.status());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn rollouts_keep_their_promises(
        n in 1usize..7,
        concurrency in 1i64..4,
        rebooting in proptest::bool::ANY,
        policy in 0u8..4,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut p = if rebooting { rebooting_plan(concurrency, false) } else { plan(concurrency) };
        p.spec.failure_policy = failure_policy(policy);
        let mut w = World::new(p, nodes(n));
        let mut h = History::default();
        let c = usize::try_from(concurrency).unwrap_or(0);
        for op in &ops {
            run(&mut w, &mut h, op, c)?;
        }
        settle(&mut w, &mut h, c)?;
    }
}
