//! The Plan's spec, read and checked once per decision: the typed values the rollout decides with.
//! Every message of the `Validated` condition comes from this one read, so what the rollout uses
//! is exactly what was checked; the rest of the core never reads `plan.spec` to decide (rendering
//! a Job copies fields of the spec into it, which is what a Job is).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::Secret;

use super::config::JobConfig;
use super::failure::FailurePolicy;
use super::reboot::{self, RebootSettings};
use crate::common::duration::GoDuration;
use crate::common::selector::{self as selection, Selector};
use crate::common::window::TimeWindow;
use crate::node::disruption::DisruptionSpec;
use crate::plan::api::{HealthCheckSpec, NodeOrder, Plan, PlanSpec, labels};

/// etcd's default `--max-request-bytes`, which bounds every object the API server stores.
const MAX_OBJECT_BYTES: usize = 1_572_864;
/// What a Job adds to what it copies from the Plan: labels, environment, volumes, affinity.
const JOB_OVERHEAD_BYTES: usize = 16 * 1024;

/// Where the Plan's version comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source<'a> {
    /// `spec.version`, as written (munged into a label when it is used).
    Version(&'a str),
    /// `spec.channel`: the URL the shell asks.
    Channel(&'a str),
    /// Neither: SUC's "cannot resolve plan".
    Unresolvable,
}

/// A Plan of `spec.after`: another Plan of the namespace that must have completed a version, and
/// soaked, before this one starts a node of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage<'a> {
    pub plan: &'a str,
    pub soak: Duration,
}

/// `spec.hooks`, as Job specs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    pub pre: Option<JobSpec>,
    pub post: Option<JobSpec>,
}

/// The Plan's spec as the rollout decides with it.
#[derive(Debug, Clone)]
pub struct PlanSettings<'a> {
    /// `spec.nodeSelector`; a Plan without one selects nothing (as in SUC).
    pub selector: Selector,
    pub source: Source<'a>,
    /// `spec.concurrency` as written (SUC's int64): messages quote it; [`Self::slots`] counts.
    pub concurrency: i64,
    /// Whether the Plan's Jobs cordon their node (`spec.cordon` or `spec.drain`).
    pub cordons: bool,
    pub order: NodeOrder,
    /// `spec.postCompleteDelay`; zero when unset.
    pub post_complete_delay: Duration,
    pub failure: FailurePolicy,
    /// `spec.reboot` with its defaults; `None` when the Plan does not reboot (SUC's behaviour).
    pub reboot: Option<RebootSettings>,
    pub window: Option<TimeWindow>,
    pub health_checks: &'a [HealthCheckSpec],
    pub hooks: Hooks,
    pub after: Vec<Stage<'a>>,
    /// `spec.minVersionAge`: how long a channel's version waits before it rolls out.
    pub min_version_age: Option<Duration>,
    /// `spec.disruption.prePull`.
    pub pre_pulls: bool,
    /// `spec.disruption.preferNoSchedule`.
    pub taints_next: bool,
    pub post_complete_labels: Option<&'a BTreeMap<String, String>>,
}

impl<'a> PlanSettings<'a> {
    /// SUC's `Validate()`, plus the checks slipway makes before touching nodes: the settings, or
    /// the first error, naming its field (the `Validated` condition's message).
    pub fn read(
        plan: &'a Plan,
        secrets: &BTreeMap<String, Secret>,
        config: &JobConfig,
    ) -> Result<PlanSettings<'a>, String> {
        let spec = &plan.spec;
        // The name becomes a node label key and a Job label value: a longer one would fail at
        // the first node, after its status says it started.
        let name = plan.metadata.name.as_deref().unwrap_or_default();
        let key = labels::plan_node_label(name);
        let errors = selection::label_key_errors(&key);
        if !errors.is_empty() {
            return Err(format!(
                "metadata.name {name:?} cannot name the node label {key}: {}",
                errors.join("; ")
            ));
        }
        let selector = Selector::from_label_selector(spec.node_selector.as_ref())
            .map_err(|e| format!("spec.nodeSelector: {e}"))?;
        let source = source(spec)?;
        check_drain(spec)?;
        let failure = FailurePolicy::of(spec.failure_policy.as_ref())?;
        let health_checks = spec.health_checks.as_deref().unwrap_or_default();
        crate::common::check::validate(health_checks, "spec.healthChecks")?;
        let hooks = hooks(spec)?;
        if let Some(disruption) = &spec.disruption {
            crate::node::disruption::validate_for_plan(disruption, "spec.disruption")?;
        }
        let min_version_age = positive_duration(spec.min_version_age.as_deref())
            .map_err(|e| format!("spec.minVersionAge: {e}"))?;
        let after = stages(name, spec)?;
        let window = (spec.window.as_ref())
            .map(|w| TimeWindow::new(w).map_err(|e| e.to_string()))
            .transpose()?;
        let post_complete_delay = match spec.post_complete_delay.as_deref() {
            None => Duration::ZERO,
            Some(delay) => match delay.parse::<GoDuration>() {
                Ok(d) if d.is_negative() => return Err("spec.postCompleteDelay is negative".into()),
                Ok(d) => d.to_std().unwrap_or_default(),
                Err(e) => return Err(format!("spec.postCompleteDelay is invalid: {e}")),
            },
        };
        check_jobs_can_be_made(spec, secrets)?;
        Ok(PlanSettings {
            selector,
            source,
            concurrency: spec.concurrency.unwrap_or(0),
            cordons: cordons(spec),
            order: spec.order.unwrap_or_default(),
            post_complete_delay,
            failure,
            reboot: reboot::settings(plan, config),
            window,
            health_checks,
            hooks,
            after,
            min_version_age,
            pre_pulls: DisruptionSpec::pre_pulls(spec.disruption.as_ref()),
            taints_next: DisruptionSpec::taints_next(spec.disruption.as_ref()),
            post_complete_labels: spec.post_complete_labels.as_ref(),
        })
    }

    /// How many nodes may hold a slot at once: `spec.concurrency`, none when it is 0 or less.
    pub fn slots(&self) -> usize {
        usize::try_from(self.concurrency).unwrap_or(0)
    }
}

/// Whether a Plan's Jobs cordon their node. Read of any Plan, valid or not: a Plan being deleted
/// gives back what it cordoned whatever else its spec says.
pub fn cordons(spec: &PlanSpec) -> bool {
    spec.cordon.unwrap_or(false) || spec.drain.is_some()
}

/// The nodes a Plan selects, read of any Plan, valid or not: an invalid selector selects none (its
/// decision says why), as does a missing one (as in SUC).
pub fn selector(spec: &PlanSpec) -> Selector {
    Selector::from_label_selector(spec.node_selector.as_ref()).unwrap_or(Selector::Nothing)
}

/// `spec.drain`: SUC's one conflict, and a pod selector that parses.
fn check_drain(spec: &PlanSpec) -> Result<(), String> {
    let Some(drain) = &spec.drain else {
        return Ok(());
    };
    if drain.delete_emptydir_data.is_some() && drain.delete_local_data.is_some() {
        return Err("spec.drain cannot specify both deleteEmptydirData and deleteLocalData".into());
    }
    if let Some(sel) = &drain.pod_selector {
        Selector::from_label_selector(Some(sel))
            .map_err(|e| format!("spec.drain.podSelector: {e}"))?;
    }
    Ok(())
}

/// What every Job needs before the first node starts: to fit in one stored object, and the
/// Secrets it mounts (but those whose updates it ignores).
fn check_jobs_can_be_made(
    spec: &PlanSpec,
    secrets: &BTreeMap<String, Secret>,
) -> Result<(), String> {
    // A Job carries the containers and tolerations verbatim; past this it would not be stored.
    let size = serde_json::to_vec(spec).map_or(0, |v| v.len());
    if size + JOB_OVERHEAD_BYTES > MAX_OBJECT_BYTES {
        return Err(format!(
            "spec is {size} bytes: its Jobs would be over the {MAX_OBJECT_BYTES} bytes the API server stores in one object"
        ));
    }
    let missing: Vec<String> = (spec.secrets.iter().flatten())
        .filter(|s| !s.ignore_updates.unwrap_or(false) && !secrets.contains_key(&s.name))
        .map(|s| format!("secret {:?} not found", s.name))
        .collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(missing.join(", ")),
    }
}

fn source(spec: &PlanSpec) -> Result<Source<'_>, String> {
    let version = spec.version.as_deref().filter(|v| !v.is_empty());
    let channel = spec.channel.as_deref().filter(|c| !c.is_empty());
    Ok(match (version, channel) {
        (Some(version), _) => {
            version_label(version).map_err(|e| format!("spec.version {e}"))?;
            Source::Version(version)
        }
        (None, Some(url)) => Source::Channel(url),
        (None, None) => Source::Unresolvable,
    })
}

/// A version (before `+` becomes `-`) is the Jobs' `upgrade.cattle.io/version` label: one that
/// cannot be would fail every Job.
pub(super) fn version_label(version: &str) -> Result<(), String> {
    let errors = selection::label_value_errors(&super::image::munge_version(version));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{version:?} cannot be the Jobs' label {}: {}",
            labels::VERSION,
            errors.join("; ")
        ))
    }
}

/// `spec.hooks.pre` and `spec.hooks.post` as Job specs; the error names the field.
fn hooks(spec: &PlanSpec) -> Result<Hooks, String> {
    let Some(hooks) = &spec.hooks else {
        return Ok(Hooks::default());
    };
    let one = |field: &str, spec: Option<&serde_json::Map<String, serde_json::Value>>| {
        spec.map(|s| {
            let job: JobSpec = serde_json::from_value(serde_json::Value::Object(s.clone()))
                .map_err(|e| format!("{field} is not a Job spec: {e}"))?;
            let pod = job.template.spec.as_ref();
            if pod.is_none_or(|p| p.containers.is_empty()) {
                return Err(format!(
                    "{field}.template.spec.containers must not be empty"
                ));
            }
            Ok(job)
        })
        .transpose()
    };
    Ok(Hooks {
        pre: one("spec.hooks.pre", hooks.pre.as_ref())?,
        post: one("spec.hooks.post", hooks.post.as_ref())?,
    })
}

/// `spec.after`: each names another Plan, with a positive soak if any.
fn stages<'a>(name: &str, spec: &'a PlanSpec) -> Result<Vec<Stage<'a>>, String> {
    let mut stages = Vec::new();
    for (i, after) in spec.after.iter().flatten().enumerate() {
        if after.plan.is_empty() || after.plan == name {
            return Err(format!(
                "spec.after[{i}].plan must name another Plan of this namespace"
            ));
        }
        let soak = positive_duration(after.soak.as_deref())
            .map_err(|e| format!("spec.after[{i}].soak: {e}"))?;
        stages.push(Stage {
            plan: &after.plan,
            soak: soak.unwrap_or_default(),
        });
    }
    Ok(stages)
}

/// A Go duration that must be more than zero when set.
fn positive_duration(text: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(text) = text else {
        return Ok(None);
    };
    match text.parse::<GoDuration>().ok().and_then(GoDuration::to_std) {
        Some(d) if !d.is_zero() => Ok(Some(d)),
        _ => Err(format!("{text:?} is not a positive duration")),
    }
}

/// The Plan's errors, as the `Validated` condition gives them ([`PlanSettings::read`]).
pub fn validate(plan: &Plan, secrets: &BTreeMap<String, Secret>) -> Result<(), String> {
    PlanSettings::read(plan, secrets, &JobConfig::default()).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::AfterPlan;

    fn plan(after: &[(&str, Option<&str>)]) -> Plan {
        let mut p = Plan::new("prod", Default::default());
        p.spec.after = Some(
            (after.iter())
                .map(|(plan, soak)| AfterPlan {
                    plan: plan.to_string(),
                    soak: soak.map(str::to_string),
                })
                .collect(),
        );
        p
    }

    fn read(p: &Plan) -> Result<PlanSettings<'_>, String> {
        PlanSettings::read(p, &BTreeMap::new(), &JobConfig::default())
    }

    #[test]
    fn promotion_fields_are_read_naming_the_field() {
        let mut p = plan(&[("prod", None)]);
        assert_eq!(
            validate(&p, &BTreeMap::new()),
            Err("spec.after[0].plan must name another Plan of this namespace".into())
        );
        p = plan(&[("test", Some("soon"))]);
        assert_eq!(
            validate(&p, &BTreeMap::new()),
            Err("spec.after[0].soak: \"soon\" is not a positive duration".into())
        );
        p = plan(&[]);
        p.spec.min_version_age = Some("0s".into());
        assert_eq!(
            validate(&p, &BTreeMap::new()),
            Err("spec.minVersionAge: \"0s\" is not a positive duration".into())
        );
        p.spec.min_version_age = Some("72h".into());
        assert_eq!(validate(&p, &BTreeMap::new()), Ok(()));
        p.spec.disruption = Some(DisruptionSpec {
            silence: Some(Default::default()),
            ..Default::default()
        });
        assert_eq!(
            validate(&p, &BTreeMap::new()),
            Err("spec.disruption.silence.matchers must name at least one matcher".into())
        );
        p.spec.disruption = None;
        let settings = read(&p).expect("valid");
        assert_eq!(
            settings.min_version_age,
            Some(Duration::from_secs(72 * 3600))
        );
        p = plan(&[("test", None), ("stage", Some("1h"))]);
        let settings = read(&p).expect("valid");
        assert_eq!(
            settings.after,
            [
                Stage {
                    plan: "test",
                    soak: Duration::ZERO
                },
                Stage {
                    plan: "stage",
                    soak: Duration::from_secs(3600)
                }
            ]
        );
    }

    #[test]
    fn concurrency_is_counted_once_and_never_below_zero() {
        let mut p = plan(&[]);
        for (written, slots) in [(None, 0), (Some(-3), 0), (Some(0), 0), (Some(4), 4)] {
            p.spec.concurrency = written;
            let settings = read(&p).expect("valid");
            assert_eq!(settings.concurrency, written.unwrap_or(0));
            assert_eq!(settings.slots(), slots, "{written:?}");
        }
    }

    #[test]
    fn durations_are_read_once_with_their_defaults() {
        let mut p = plan(&[]);
        assert_eq!(read(&p).expect("valid").post_complete_delay, Duration::ZERO);
        p.spec.post_complete_delay = Some("1m30s".into());
        assert_eq!(
            read(&p).expect("valid").post_complete_delay,
            Duration::from_secs(90)
        );
        p.spec.post_complete_delay = Some("-1s".into());
        assert_eq!(
            read(&p).map(drop),
            Err("spec.postCompleteDelay is negative".into())
        );
        p.spec.post_complete_delay = Some("soon".into());
        let e = read(&p).map(drop).expect_err("invalid");
        assert!(e.starts_with("spec.postCompleteDelay is invalid: "), "{e}");
    }

    #[test]
    fn the_version_comes_from_the_version_then_the_channel() {
        let mut p = plan(&[]);
        assert_eq!(read(&p).expect("valid").source, Source::Unresolvable);
        p.spec.channel = Some("https://update.k3s.io/v1-release/channels/stable".into());
        assert_eq!(
            read(&p).expect("valid").source,
            Source::Channel("https://update.k3s.io/v1-release/channels/stable")
        );
        p.spec.version = Some("v1.31.2+k3s1".into());
        assert_eq!(
            read(&p).expect("valid").source,
            Source::Version("v1.31.2+k3s1")
        );
        p.spec.version = Some("v1/bad".into());
        let e = read(&p).map(drop).expect_err("invalid");
        assert!(
            e.starts_with("spec.version \"v1/bad\" cannot be the Jobs' label"),
            "{e}"
        );
    }
}
