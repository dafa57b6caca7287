//! A Plan's hooks: a Job run once per version before its first node starts (`pre`: while it runs
//! no node starts; when it fails, none ever does until the Plan changes or its failures are
//! reset) and one after its last node is done (`post`: it holds nothing, its outcome is reported).
//!
//! Each run is recorded in `status.hooks` before its Job is created, under a name that counts the
//! attempts, so a controller killed at any point finds the Job it started and never runs a hook
//! twice for one attempt.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::facts::{Facts, Steps};
use super::jobs::{Outcome, PlanJob};
use super::settings::Hooks;
use super::{JobDeletion, Rollout};
use crate::common::decision::Event;
use crate::common::naming::safe_concat_name;
use crate::node::NodeInfo;
use crate::plan::api::{HookPhase, HookStatus, HooksStatus, Plan, PlanStatus, labels};
use crate::plan::core::conditions::{self as cond, COMPLETE, TRUE};

/// On hook Jobs: the Plan they belong to.
pub const HOOK_PLAN_LABEL: &str = "slipway.dev/hook-of";
/// On hook Jobs: `pre` or `post`.
pub const HOOK_LABEL: &str = "slipway.dev/hook";
/// On hook Jobs: the hash (version) they run for.
pub const HOOK_HASH_LABEL: &str = "slipway.dev/hook-hash";

/// The `Complete` reason while the pre hook runs.
pub const PRE_HOOK: &str = "PreHook";
/// The `Complete` reason once the pre hook failed: the rollout is stopped.
pub const PRE_HOOK_FAILED: &str = "PreHookFailed";

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Pre,
    Post,
}

impl Hook {
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Pre => "pre",
            Hook::Post => "post",
        }
    }
}

/// The name of a hook's Job: `<plan>-<hook>-hook-<hash prefix>-<attempt>`, made safe.
pub fn job_name(plan: &str, hook: Hook, hash: &str, attempt: i32) -> String {
    let short = hash.get(..8).unwrap_or(hash);
    safe_concat_name(&[plan, hook.as_str(), "hook", short, &attempt.to_string()])
}

/// What a hook's Job is rendered from.
pub struct HookTarget<'a> {
    pub plan: &'a Plan,
    pub hook: Hook,
    pub spec: &'a JobSpec,
    pub version: &'a str,
    pub hash: &'a str,
    pub attempt: i32,
    pub controller_name: &'a str,
}

/// The hook's Job: the spec as written, owned by the Plan, labelled for the controller, its
/// containers told which Plan, version and hook they run for.
pub fn render(t: &HookTarget<'_>) -> Job {
    let plan_name = t.plan.metadata.name.clone().unwrap_or_default();
    let labels = [
        (labels::CONTROLLER, t.controller_name),
        (HOOK_PLAN_LABEL, plan_name.as_str()),
        (HOOK_LABEL, t.hook.as_str()),
        (HOOK_HASH_LABEL, t.hash),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut spec = t.spec.clone();
    if let Some(pod) = spec.template.spec.as_mut() {
        pod.restart_policy.get_or_insert_with(|| "Never".into());
        let env = [
            ("SYSTEM_UPGRADE_PLAN_NAME", plan_name.as_str()),
            ("SYSTEM_UPGRADE_PLAN_LATEST_VERSION", t.version),
            ("SYSTEM_UPGRADE_PLAN_LATEST_HASH", t.hash),
            ("SLIPWAY_HOOK", t.hook.as_str()),
        ];
        for c in pod.containers.iter_mut() {
            let vars = c.env.get_or_insert_default();
            for (name, value) in env {
                if !vars.iter().any(|v| v.name == name) {
                    vars.push(EnvVar {
                        name: name.into(),
                        value: Some(value.into()),
                        value_from: None,
                    });
                }
            }
        }
    }
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&plan_name, t.hook, t.hash, t.attempt)),
            namespace: t.plan.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![crate::plan::api::plan_owner_reference(
                &plan_name,
                t.plan.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// What the hooks did in this decision besides `status.hooks`: the hook Jobs to create and to
/// delete, and the events. They touch nothing else.
#[derive(Debug, Default)]
pub(super) struct Hooked {
    pub create: Vec<Job>,
    pub delete: Vec<JobDeletion>,
    pub events: Vec<Event>,
}

impl Hooked {
    /// Hands it to the decision.
    pub(super) fn write(self, out: &mut Rollout) {
        out.create_jobs.extend(self.create);
        out.delete_jobs.extend(self.delete);
        out.events.extend(self.events);
    }
}

/// What one decision knows for the hooks.
pub(super) struct HookContext<'a> {
    pub plan: &'a Plan,
    pub jobs: &'a [&'a Job],
    pub version: &'a str,
    pub hash: &'a str,
    pub now: &'a str,
    pub controller_name: &'a str,
    /// Failures were reset, or the Plan changed: a failed hook runs again.
    pub again: bool,
}

/// One hook, one step: starts it, follows its Job, records the outcome. `Some(phase)` once it
/// has a run at this hash.
pub(super) fn step(
    cx: &HookContext<'_>,
    hook: Hook,
    spec: &JobSpec,
    st: &mut PlanStatus,
    out: &mut Hooked,
) -> HookPhase {
    let hooks = st.hooks.get_or_insert_with(HooksStatus::default);
    let slot = match hook {
        Hook::Pre => &mut hooks.pre,
        Hook::Post => &mut hooks.post,
    };
    let current = slot.take().filter(|h| h.hash == cx.hash);
    let mut next = match current {
        Some(h) if h.phase == HookPhase::Failed && cx.again => start(cx, hook, h.attempt + 1, out),
        Some(h) => h,
        None => start(cx, hook, 1, out),
    };
    if next.phase == HookPhase::Running {
        follow(cx, hook, spec, &mut next, out);
    }
    next.generation = cx.plan.metadata.generation;
    let phase = next.phase;
    *slot = Some(next);
    phase
}

fn start(cx: &HookContext<'_>, hook: Hook, attempt: i32, out: &mut Hooked) -> HookStatus {
    let name = cx.plan.metadata.name.as_deref().unwrap_or_default();
    let job = job_name(name, hook, cx.hash, attempt);
    out.events.push(Event::normal(
        "HookStarted",
        format!(
            "Running the {} hook (Job {job}) for version {}",
            hook.as_str(),
            cx.version
        ),
    ));
    HookStatus {
        hash: cx.hash.to_string(),
        job,
        attempt,
        generation: cx.plan.metadata.generation,
        phase: HookPhase::Running,
        message: None,
        since: Some(cx.now.to_string()),
    }
}

/// A running hook: its Job is created (again, if it is not there: a create of an existing Job
/// changes nothing), or its outcome recorded.
fn follow(cx: &HookContext<'_>, hook: Hook, spec: &JobSpec, h: &mut HookStatus, out: &mut Hooked) {
    let seen = cx
        .jobs
        .iter()
        .filter(|j| j.metadata.name.as_deref() == Some(h.job.as_str()))
        .find_map(|j| PlanJob::read(j));
    match seen.map(|j| j.outcome) {
        None => out.create.push(render(&HookTarget {
            plan: cx.plan,
            hook,
            spec,
            version: cx.version,
            hash: cx.hash,
            attempt: h.attempt,
            controller_name: cx.controller_name,
        })),
        Some(Outcome::Running) => {}
        Some(Outcome::Complete { .. }) => {
            h.phase = HookPhase::Succeeded;
            h.since = Some(cx.now.to_string());
            out.events.push(Event::normal(
                "HookSucceeded",
                format!(
                    "The {} hook (Job {}) succeeded for version {}",
                    hook.as_str(),
                    h.job,
                    cx.version
                ),
            ));
        }
        Some(Outcome::Failed { message, .. }) => {
            h.phase = HookPhase::Failed;
            h.since = Some(cx.now.to_string());
            h.message = Some(message.clone());
            out.events.push(Event::warning(
                "HookFailed",
                format!(
                    "The {} hook (Job {}) failed for version {}: {message}",
                    hook.as_str(),
                    h.job,
                    cx.version
                ),
            ));
        }
    }
}

/// Hook Jobs of the Plan that are not the current run of a hook go.
pub(super) fn sweep(cx: &HookContext<'_>, st: &PlanStatus, out: &mut Hooked) {
    let name = cx.plan.metadata.name.as_deref().unwrap_or_default();
    let current: Vec<&str> = st
        .hooks
        .iter()
        .flat_map(|h| [h.pre.as_ref(), h.post.as_ref()])
        .flatten()
        .filter(|h| h.hash == cx.hash)
        .map(|h| h.job.as_str())
        .collect();
    for job in cx.jobs {
        let label = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HOOK_PLAN_LABEL));
        let job_name = job.metadata.name.as_deref().unwrap_or_default();
        if label.map(String::as_str) == Some(name)
            && job.metadata.deletion_timestamp.is_none()
            && !current.contains(&job_name)
        {
            out.delete.push(JobDeletion {
                name: job_name.to_string(),
                reason: "a hook run that is not the current one".into(),
            });
        }
    }
}

/// The context of the hooks for this decision.
fn context<'a>(
    facts: &'a Facts<'a>,
    jobs: &'a [&'a Job],
    old: &PlanStatus,
    now: &'a str,
) -> HookContext<'a> {
    let plan = facts.plan;
    HookContext {
        plan,
        jobs,
        version: &facts.version,
        hash: &facts.hash,
        now,
        controller_name: facts.controller_name,
        again: facts.ctx.reset || old.observed_generation != plan.metadata.generation,
    }
}

/// Before nodes start: the pre hook, when a node is about to start (a free slot and a node to
/// take it) or it already runs. `Some(its status)` while it keeps nodes from starting, and what it
/// did besides `status.hooks`.
pub(super) fn before_nodes(
    facts: &Facts<'_>,
    jobs: &[&Job],
    old: &PlanStatus,
    free: &[&NodeInfo],
    steps: &Steps<'_>,
    st: &mut PlanStatus,
) -> (Option<HookStatus>, Hooked) {
    let mut out = Hooked::default();
    let Some(spec) = facts.settings.hooks.pre.as_ref() else {
        return (None, out);
    };
    let starting = facts.starting(free, steps);
    let ran = st
        .hooks
        .as_ref()
        .and_then(|h| h.pre.as_ref())
        .is_some_and(|h| h.hash == facts.hash);
    if !starting && !ran {
        return (None, out);
    }
    let now = crate::common::rfc3339(facts.now);
    let phase = step(
        &context(facts, jobs, old, &now),
        Hook::Pre,
        spec,
        st,
        &mut out,
    );
    let pre = st.hooks.as_ref().and_then(|h| h.pre.clone());
    let holding = (starting && phase != HookPhase::Succeeded)
        .then_some(pre)
        .flatten();
    (holding, out)
}

/// After the nodes: records that this hash's rollout started a node, runs the post hook once it
/// is complete, and removes hook Jobs that are no run of the current hash. What it did besides
/// `status.hooks` comes back.
pub(super) fn after_nodes(
    facts: &Facts<'_>,
    jobs: &[&Job],
    old: &PlanStatus,
    st: &mut PlanStatus,
) -> Hooked {
    let mut out = Hooked::default();
    let now = crate::common::rfc3339(facts.now);
    let cx = context(facts, jobs, old, &now);
    let Hooks { pre, post } = &facts.settings.hooks;
    if pre.is_none() && post.is_none() {
        st.hooks = None;
        sweep(&cx, st, &mut out);
        return out;
    }
    let hooks = st.hooks.get_or_insert_with(HooksStatus::default);
    if !st.applying.is_empty() {
        hooks.rolled_out = Some(facts.hash.clone());
    }
    let rolled_out = hooks.rolled_out.as_deref() == Some(facts.hash.as_str());
    if let Some(spec) = post
        && rolled_out
        && cond::is(st, COMPLETE, TRUE)
    {
        step(&cx, Hook::Post, spec, st, &mut out);
    }
    sweep(&cx, st, &mut out);
    out
}
