//! The Plan-level rules around the node state machines: which nodes hold a slot, how the states'
//! actions become Jobs, pods and patches, which Jobs no node owns, and what the Plan reports.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::disruption;
use super::facts::{Facts, Steps, slots_taken};
use super::gates::{Gates, Situation};
use super::jobs::PlanJobs;
use super::node_labels::NodeLabels;
use super::node_state::{self, NodeAction, NodeState};
use super::notices;
use super::report::{Said, report};
use super::settings::PlanSettings;
use super::{JobDeletion, PlanInput, Rollout, holder, rfc3339};
use crate::common::decision::EventType;
use crate::node::NodeInfo;
use crate::node::budget::Refusal;
use crate::node::change::NodeChange;
use crate::node::cordon;
use crate::node::handoff::Handoff;
use crate::plan::api::{NodeProgress, Plan, PlanStatus, labels};
use crate::plan::core::conditions::Stamp;
use crate::plan::core::expansion::expand_post_complete_labels;
use crate::plan::core::failure;
use crate::plan::core::hooks;
use crate::plan::core::reboot;
use crate::plan::core::selection::{self, Eligibility};

/// Steps the applying nodes, fills free slots, and turns the states into the decision.
pub(super) fn roll<'a>(
    input: &'a PlanInput<'a>,
    settings: &'a PlanSettings<'a>,
    read: &'a [NodeLabels<'a>],
    now: Timestamp,
    old: &PlanStatus,
    st: &mut PlanStatus,
    out: &mut Rollout,
) {
    let mut facts = Facts::new(input, settings, read, now, st);
    let now_text = rfc3339(now);
    let at = Stamp::new(&now_text, facts.ctx.generation);
    // SUC's eligibility rule, built as SUC builds it for its errors; the labels read once apply it.
    if let Err(e) = Eligibility::of(facts.name, &settings.selector, &facts.hash, &old.applying) {
        let message = format!("Failed to select nodes: {e}");
        let said = Said::failed(st, "SelectNodesFailed", message);
        return said.write(st, out, at);
    }
    let (released, forgotten) = release_quarantines(&facts);
    out.node_patches.extend(released);
    out.delete_jobs.extend(forgotten);
    let (quarantined, eligible_read) = split_quarantined(&facts, read);
    let eligible: Vec<&NodeInfo> = eligible_read.iter().map(|r| r.node).collect();
    // The phases: the nodes under way step; then what holds the whole Plan; then, if nothing
    // does, new nodes start; then their actions, and the status built from steps and gates.
    let mut steps = step_applying(&mut facts, old, &eligible_read);
    record_reset(input.plan, st, out);
    let gates = Gates::read(&facts, old, &steps, input.checks, input.stages);
    st.health_checks = gates.check.status.clone();
    if let Some(after) = gates.check.recheck {
        out.requeue(after);
    }
    let started = match gates.open() {
        true => start_nodes(&mut facts, input, old, &eligible, &mut steps, st, out),
        false => Started::default(),
    };
    let Started {
        pulling,
        pre_hook,
        refused,
    } = started;
    if gates.window.is_none() && !gates.stopped {
        out.next = disruption::next_batch(&facts, &eligible, &steps);
    }
    let unmade = apply_actions(&mut facts, &mut steps, out);
    let (create, delete) = reboot_pods(&facts, &steps, input.reboot_pods);
    out.create_pods.extend(create);
    out.delete_pods.extend(delete);
    let (swept, recheck) = sweep_jobs(&facts, &steps);
    out.delete_jobs.extend(swept);
    if let Some(after) = recheck {
        out.requeue(after);
    }
    (st.applying, st.nodes) = written_nodes(&steps);
    let quarantined = quarantined_hosts(&quarantined, &steps);
    let situation = Situation {
        gates: &gates,
        eligible: &eligible,
        quarantined: &quarantined,
        pre_hook: pre_hook.as_ref(),
        pulling: pulling.as_ref(),
        refused: &refused,
        settled: input.settled,
    };
    let report = report(&facts, old, st, &steps, &situation, &out.node_patches);
    report.write(st, out, at);
    // After the report, which would say the node's step goes on: its Job cannot be made.
    if let Err(message) = unmade {
        Said::failed(st, "ValidationFailed", message).write(st, out, at);
    }
    if input.explain {
        out.waiting = super::report::explain(&facts, &steps, &situation);
    }
    hooks::after_nodes(&facts, input.hook_jobs, old, st).write(out);
    out.learned = std::mem::take(&mut facts.learned);
}

/// What the gates before the first nodes said, and the nodes the budgets refused.
#[derive(Default)]
struct Started<'a> {
    pulling: Option<crate::node::prepull::PrePullStatus>,
    pre_hook: Option<crate::plan::api::HookStatus>,
    refused: Vec<(&'a NodeInfo, Refusal)>,
}

/// With nothing holding the rollout: the images are pulled, the pre hook runs, then the free
/// slots are filled.
fn start_nodes<'a>(
    facts: &mut Facts<'_>,
    input: &PlanInput<'_>,
    old: &PlanStatus,
    eligible: &[&'a NodeInfo],
    steps: &mut Steps<'a>,
    st: &mut PlanStatus,
    out: &mut Rollout,
) -> Started<'a> {
    let free: Vec<&NodeInfo> = (eligible.iter().copied())
        .filter(|n| facts.holder_of(n).is_none())
        .collect();
    let recorded = st.pre_pull.as_ref();
    let pulled = disruption::pre_pull(facts, eligible, &free, steps, input.pull_pods, recorded);
    let mut started = Started {
        pulling: pulled.write(st, out),
        ..Started::default()
    };
    if started.pulling.is_none() {
        let (pre_hook, hooked) = hooks::before_nodes(facts, input.hook_jobs, old, &free, steps, st);
        hooked.write(out);
        started.pre_hook = pre_hook;
    }
    if started.pulling.is_none() && started.pre_hook.is_none() {
        started.refused = fill_slots(facts, &free, steps);
    }
    started
}

/// The eligible nodes, split into those quarantined for this hash (left alone unless the Plan
/// was reset) and the rest.
fn split_quarantined<'a>(
    facts: &Facts,
    read: &'a [NodeLabels<'a>],
) -> (Vec<&'a NodeInfo>, Vec<&'a NodeLabels<'a>>) {
    let hash = facts.hash.as_str();
    let (mut quarantined, mut eligible) = (Vec::new(), Vec::new());
    for r in read.iter().filter(|r| r.eligible(hash)) {
        match !facts.ctx.reset && r.quarantine == Some(hash) {
            true => quarantined.push(r.node),
            false => eligible.push(r),
        }
    }
    (quarantined, eligible)
}

/// Hostnames of the nodes quarantined before this decision and by it.
fn quarantined_hosts<'a>(before: &[&'a NodeInfo], steps: &Steps<'a>) -> Vec<&'a str> {
    let now = steps
        .values()
        .filter(|(_, s, _)| *s == NodeState::Quarantined)
        .map(|(n, _, _)| *n);
    before
        .iter()
        .copied()
        .chain(now)
        .map(NodeInfo::hostname)
        .collect()
}

/// Jobs no node of the rollout owns go (finished ones once their TTL is over), and when to look
/// again for those whose TTL is not over.
fn sweep_jobs(facts: &Facts<'_>, steps: &Steps<'_>) -> (Vec<JobDeletion>, Option<Duration>) {
    let owned: BTreeSet<&str> = steps.values().filter_map(|(_, s, _)| s.job()).collect();
    let applying_nodes: BTreeSet<&str> = steps.keys().copied().collect();
    (facts.jobs).sweep(&facts.version, &applying_nodes, &owned, facts.now)
}

/// A new value of the reset annotation is acted on once: recorded in the status, with an event.
fn record_reset(plan: &Plan, st: &mut PlanStatus, out: &mut Rollout) {
    if let Some(token) = failure::reset_requested(plan, st) {
        out.event(
            EventType::Normal,
            "FailuresReset",
            format!(
                "Failures reset ({}={token}): failed nodes start over, quarantined nodes are released",
                failure::RESET_ANNOTATION
            ),
        );
        st.failures_reset = Some(token);
    }
}

/// Quarantines of another hash of the Plan (or all of them, on a reset) are lifted: the node is
/// eligible again, and its new Job would not tolerate the taint. The nodes' patches, and the
/// failed Jobs that go with a reset.
fn release_quarantines(facts: &Facts<'_>) -> (Vec<NodeChange>, Vec<JobDeletion>) {
    let (mut patches, mut deletions) = (Vec::new(), Vec::new());
    let key = failure::quarantine_key(facts.name);
    for r in facts.read {
        let (node, Some(at)) = (r.node, r.quarantine) else {
            continue;
        };
        if facts.ctx.reset || at != facts.hash {
            patches.push(
                NodeChange::of(&node.name)
                    .label(&key, None)
                    .remove_taint(&key),
            );
        }
        // Its failed Job goes too, so that the node's next turn creates it again.
        let job = facts.job_name(node);
        if facts.ctx.reset && facts.jobs.get(&job).is_some() {
            deletions.push(JobDeletion {
                name: job,
                reason: "its node's failures were reset".into(),
            });
        }
    }
    (patches, deletions)
}

/// The nodes of `status.applying` that are still eligible, stepped from their recorded state.
fn step_applying<'a>(
    facts: &mut Facts<'_>,
    old: &PlanStatus,
    eligible: &[&NodeLabels<'a>],
) -> Steps<'a> {
    if old.applying.is_empty() {
        return Steps::new();
    }
    // Only the applying nodes are kept: a map of every eligible node cost more than the rest of a
    // 100,000-node decision.
    let applying: HashSet<&str> = old.applying.iter().map(String::as_str).collect();
    let by_host: BTreeMap<&str, &NodeInfo> = eligible
        .iter()
        .map(|r| (r.hostname(), r.node))
        .filter(|(host, _)| applying.contains(host))
        .collect();
    let recorded: BTreeMap<&str, &NodeProgress> =
        old.nodes.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut steps = Steps::new();
    for host in &old.applying {
        let Some(node) = by_host.get(host.as_str()).copied() else {
            continue;
        };
        let state = recorded
            .get(host.as_str())
            .and_then(|p| NodeState::from_progress(p, &node.boot_id, facts.now))
            .unwrap_or_else(|| NodeState::selected(&facts.job_name(node), facts.now));
        let (next, actions) = facts.step(node, state);
        steps.insert(node.name.as_str(), (node, next, actions));
    }
    steps
}

/// Gives free slots to eligible nodes in the Plan's order, each as the budget lets it start. A
/// node picked whose Job already completed (a crash between its label and the status) is done at
/// once, and its slot goes on. The nodes the DisruptionBudgets refused come back, in order.
fn fill_slots<'a>(
    facts: &mut Facts<'_>,
    eligible: &[&'a NodeInfo],
    steps: &mut Steps<'a>,
) -> Vec<(&'a NodeInfo, Refusal)> {
    let concurrency = facts.settings.slots();
    let mut budget = facts.budget.clone();
    // The nodes whose step ended in this decision give their room back.
    budget.keep_only(|n| steps.get(n).is_some_and(|(_, s, _)| s.holds_slot()));
    let mut refused = Vec::new();
    if budget.is_limited() {
        // Refused nodes are passed over: walk the order until the slots are full.
        let free = concurrency.saturating_sub(slots_taken(steps));
        if free == 0 {
            return refused;
        }
        let fresh: Vec<&'a NodeInfo> = (eligible.iter().copied())
            .filter(|n| !steps.contains_key(n.name.as_str()))
            .collect();
        for node in budgeted_order(facts, free, fresh) {
            if slots_taken(steps) >= concurrency {
                break;
            }
            match budget.take(node) {
                Ok(()) => start(facts, node, steps),
                Err(refusal) => refused.push((node, refusal)),
            }
        }
        return refused;
    }
    loop {
        let free = concurrency.saturating_sub(slots_taken(steps));
        let fresh = eligible
            .iter()
            .copied()
            .filter(|n| !steps.contains_key(n.name.as_str()));
        let picks = selection::first_in_plan_order(
            free,
            facts.uid,
            &facts.hash,
            facts.settings.order,
            fresh,
        );
        if picks.is_empty() {
            return refused;
        }
        let before = slots_taken(steps);
        for node in picks {
            start(facts, node, steps);
        }
        if slots_taken(steps) == before + free {
            return refused;
        }
    }
}

/// The Plan's order over `fresh` for a decision under DisruptionBudgets. Its first nodes (twice
/// the free slots) come from a bounded pick, as without budgets; only when the budgets refuse
/// enough of them is the rest of the order taken, lazily.
fn budgeted_order<'a>(
    facts: &Facts<'_>,
    free: usize,
    fresh: Vec<&'a NodeInfo>,
) -> impl Iterator<Item = &'a NodeInfo> + use<'a> {
    let (uid, hash, order) = (
        facts.uid.to_string(),
        facts.hash.clone(),
        facts.settings.order,
    );
    let first = selection::first_in_plan_order(
        free.saturating_mul(2),
        &uid,
        &hash,
        order,
        fresh.iter().copied(),
    );
    let picked = first.len();
    let rest = std::iter::once(()).flat_map(move |()| {
        selection::in_plan_order(&uid, &hash, order, fresh.iter().copied()).skip(picked)
    });
    first.into_iter().chain(rest)
}

/// Starts `node`: its first step from `Selected`.
fn start<'a>(facts: &mut Facts<'_>, node: &'a NodeInfo, steps: &mut Steps<'a>) {
    let state = NodeState::selected(&facts.job_name(node), facts.now);
    let (next, actions) = facts.step(node, state);
    steps.insert(node.name.as_str(), (node, next, actions));
}

/// Turns the nodes' actions into Jobs, pods, patches, events and rechecks. A Job that cannot be
/// rendered is not created; its node waits and the error is returned.
fn apply_actions(
    facts: &mut Facts<'_>,
    steps: &mut Steps<'_>,
    out: &mut Rollout,
) -> Result<(), String> {
    let mut error = Ok(());
    for (node, state, actions) in steps.values_mut() {
        for action in std::mem::take(actions) {
            match action {
                NodeAction::CreateJob => match facts.render(node).cloned() {
                    Ok(job) => {
                        record_cordon(facts, node, out);
                        out.create_jobs.push(job);
                    }
                    Err(e) => {
                        *state = NodeState::selected(&facts.job_name(node), facts.now);
                        error = Err(format!("Failed to create job for node {}: {e}", node.name));
                    }
                },
                NodeAction::DeleteJob(reason) => out.delete_jobs.push(JobDeletion {
                    name: facts.job_name(node),
                    reason,
                }),
                NodeAction::MarkDone { uncordon } => {
                    out.node_patches.push(NodeChange {
                        labels: done_labels(facts)
                            .into_iter()
                            .map(|(k, v)| (k, Some(v)))
                            .collect(),
                        annotations: forget_cordon(node, uncordon),
                        unschedulable: uncordon.then_some(false),
                        ..NodeChange::of(&node.name)
                    });
                    out.events.push(notices::done(facts.name, &node.name));
                }
                NodeAction::Quarantine { uncordon } => {
                    let key = failure::quarantine_key(facts.name);
                    out.node_patches.push(NodeChange {
                        annotations: forget_cordon(node, uncordon),
                        unschedulable: uncordon.then_some(false),
                        ..NodeChange::of(&node.name)
                            .label(&key, Some(&facts.hash))
                            .add_taint(failure::quarantine_taint(facts.name, &facts.hash))
                    })
                }
                NodeAction::Uncordon => out.node_patches.push(NodeChange {
                    annotations: forget_cordon(node, true),
                    ..NodeChange::of(&node.name).cordon(false)
                }),
                NodeAction::Warn { reason, message } => {
                    out.node_event(EventType::Warning, reason, message, &node.name)
                }
                NodeAction::Recheck(after) => out.requeue(after),
            }
        }
    }
    error
}

/// Before a Job that cordons its node: who the cordon belongs to (patched before the Job exists).
fn record_cordon(facts: &Facts<'_>, node: &NodeInfo, out: &mut Rollout) {
    let me = holder(facts.plan);
    let Some(owner) = cordon::record_at_plan_start(&me, node).filter(|_| facts.ctx.cordons) else {
        return;
    };
    out.node_patches.push(NodeChange {
        annotations: cordon::record(&owner),
        ..NodeChange::of(&node.name)
    });
}

fn forget_cordon(node: &NodeInfo, uncordon: bool) -> BTreeMap<String, Option<String>> {
    if cordon::plan_forgets(node, uncordon) {
        cordon::forget()
    } else {
        BTreeMap::new()
    }
}

fn done_labels(facts: &Facts<'_>) -> BTreeMap<String, String> {
    let post_complete = (facts.settings.post_complete_labels)
        .map(|l| expand_post_complete_labels(l, &facts.version, &facts.hash))
        .unwrap_or_default();
    node_state::done_labels(
        &labels::plan_node_label(facts.name),
        &facts.hash,
        post_complete,
    )
}

/// The reboot pod of a node whose Job slipway has seen complete, if the node has none yet. Made
/// only then, never beside a running Job: the pod reboots as soon as the Job's last step writes the
/// sentinel, and a reboot before the kubelet reports the Job's pod Succeeded would leave the Job
/// active through the reboot (no reboot timeout, and a Job that runs the upgrade again).
fn reboot_pod(facts: &Facts<'_>, node: &NodeInfo, job_name: &str, pods: &[&Pod]) -> Option<Pod> {
    let policy = facts.settings.reboot.as_ref()?;
    // Any reboot pod of the node, of whichever hash, waits for the same sentinel: a second one
    // would reboot the node again.
    let has_one = pods.iter().any(|p| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE))
            .is_some_and(|n| *n == node.name)
    });
    if has_one {
        return None;
    }
    let controller = facts.controller_name;
    reboot::render_reboot_pod(&facts.rendered_from, node, job_name, controller, policy)
}

/// Reboot pods are made for the nodes waiting for their reboot, and go once their node no longer
/// needs one: done, failed by its Job, or no longer applying. A node in its hand-off keeps
/// whichever of its pods exists. The pods to create, and the names of those to delete.
fn reboot_pods(facts: &Facts<'_>, steps: &Steps<'_>, pods: &[&Pod]) -> (Vec<Pod>, Vec<String>) {
    if facts.ctx.reboot.is_none() {
        return (Vec::new(), Vec::new());
    }
    let create = (steps.values())
        .filter_map(|(node, state, _)| match state {
            NodeState::Rebooting {
                job,
                handoff: Handoff::AwaitingBoot { .. },
                ..
            } => reboot_pod(facts, node, job, pods),
            _ => None,
        })
        .collect();
    let wanted: BTreeSet<String> = steps
        .values()
        .filter(|(_, s, _)| s.needs_reboot_pod())
        .map(|(n, _, _)| reboot::reboot_pod_name(facts.name, &n.name, &facts.hash))
        .collect();
    let in_handoff: BTreeSet<&str> = steps
        .iter()
        .filter(|(_, (_, s, _))| matches!(s, NodeState::Rebooting { .. }))
        .map(|(name, _)| *name)
        .collect();
    let mut delete = Vec::new();
    for pod in pods {
        let (Some(name), None) = (&pod.metadata.name, &pod.metadata.deletion_timestamp) else {
            continue;
        };
        let node = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE));
        if !wanted.contains(name) && !node.is_some_and(|n| in_handoff.contains(n.as_str())) {
            delete.push(name.clone());
        }
    }
    (create, delete)
}

/// `status.applying` (hostnames, in node-name order, as SUC lists them) and `status.nodes`.
fn written_nodes(steps: &Steps<'_>) -> (Vec<String>, Vec<NodeProgress>) {
    let holding = steps.values().filter(|(_, s, _)| s.holds_slot());
    let applying = holding
        .clone()
        .map(|(n, _, _)| n.hostname().to_string())
        .collect();
    let mut nodes: Vec<_> = holding
        .filter_map(|(n, s, _)| s.to_progress(n.hostname()))
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    (applying, nodes)
}

/// A Plan that is not valid or not resolved starts nothing; Jobs of another version still go.
pub(super) fn sweep_only(
    input: &PlanInput<'_>,
    now: Timestamp,
    st: &PlanStatus,
    out: &mut Rollout,
) {
    let Some(version) = st.latest_version.as_deref() else {
        return;
    };
    let jobs = PlanJobs::new(input.jobs);
    let applying: BTreeSet<&str> = input
        .nodes
        .iter()
        .filter(|n| st.applying.iter().any(|h| h == n.hostname()))
        .map(|n| n.name.as_str())
        .collect();
    let owned: BTreeSet<&str> = jobs.by_name.keys().copied().collect();
    let (deletions, _) = jobs.sweep(version, &applying, &owned, now);
    out.delete_jobs.extend(deletions);
}
