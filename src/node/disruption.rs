//! What an operation does around each node it disrupts, the same field in every kind
//! (`spec.disruption` of Plans, RebootPolicies, NodeMaintenances and NodeOps): an Alertmanager
//! silence held while the node is taken ([`super::silence`] decides them), what a drain does past
//! its timeout, and whether it waits for the node's volumes to detach. Pure.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::drain::OnDrainTimeout;
use crate::common::crd::{extend, positive_duration};
use crate::common::duration::GoDuration;

/// The placeholder a matcher's value may hold: replaced by the name of the node the silence is for.
/// Written as Kubernetes writes a variable in a container's command, so that it reads as one.
pub const NODE_NAME: &str = "$(NODE_NAME)";

/// How long a silence may last from its start unless `maxDuration` says otherwise.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(2 * 3600);

/// `spec.disruption`: what slipway does around each node the object disrupts (a slipway
/// extension; absent: nothing).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionSpec {
    /// An Alertmanager silence per node while the node is taken (cordoned, drained, upgraded or
    /// rebooted), expired when it is given back. Needs `slipway run --alertmanager-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence: Option<SilenceSpec>,
    /// What a drain does once its timeout has passed with pods still on the node (the timeout is
    /// the kind's own: a NodeMaintenance's `spec.drainTimeout`, a NodeOp's
    /// `spec.drainOptions.timeoutSeconds`, a RebootPolicy's `spec.drain.timeout`). `Fail` (the
    /// default): the kind's failure. `DeletePods`: the pods left are deleted, as `kubectl drain
    /// --disable-eviction` would, bypassing their PodDisruptionBudgets, with an Event per pod.
    /// Plans drain in their Job: there only `Fail` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_drain_timeout: Option<OnDrainTimeout>,
    /// A drain is over only once the node's VolumeAttachments are gone too (its CSI volumes
    /// detached), so that a reboot or a power-off never cuts a volume still attached. Bounded by
    /// the drain's timeout. Plans drain in their Job: there it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_volume_detach: Option<bool>,
    /// Before the first node of a rollout is taken, the images its Jobs run are pulled on every
    /// node it will take (a pod per node that only pulls); a node that cannot pull holds the
    /// rollout with `PrePullFailed`, naming the node, the image and the kubelet's reason, and no
    /// node is cordoned. Plans, NodeOps and RebootPolicies (their reboot image, whenever it
    /// changes); off unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_pull: Option<bool>,
    /// The nodes the object will take next (its next batch, as many as its concurrency) carry
    /// the taint `slipway.dev/next:PreferNoSchedule` until they are taken or no longer next, so
    /// that new pods prefer other nodes than those about to be drained. Off unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_no_schedule: Option<bool>,
}

impl DisruptionSpec {
    /// What a drain of an object with `spec` does when its timeout passes.
    pub fn on_drain_timeout(spec: Option<&DisruptionSpec>) -> OnDrainTimeout {
        spec.and_then(|d| d.on_drain_timeout)
            .unwrap_or(OnDrainTimeout::Fail)
    }

    /// Whether an object with `spec` pulls its images on its nodes before its first node.
    pub fn pre_pulls(spec: Option<&DisruptionSpec>) -> bool {
        spec.and_then(|d| d.pre_pull).unwrap_or(false)
    }

    /// Whether the nodes an object with `spec` takes next are tainted `PreferNoSchedule`.
    pub fn taints_next(spec: Option<&DisruptionSpec>) -> bool {
        spec.and_then(|d| d.prefer_no_schedule).unwrap_or(false)
    }

    /// Whether a drain of an object with `spec` waits for the node's volumes to detach.
    pub fn waits_for_volumes(spec: Option<&DisruptionSpec>) -> bool {
        spec.and_then(|d| d.wait_for_volume_detach).unwrap_or(false)
    }
}

/// The silence held while a node is disrupted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SilenceSpec {
    /// The silence's matchers, as Alertmanager takes them; `$(NODE_NAME)` in a value is the node's
    /// name (e.g. `{name: instance, value: "$(NODE_NAME):9100"}`). At least one must not match an
    /// empty value, so that the silence cannot silence everything.
    pub matchers: Vec<Matcher>,
    /// How long the silence may last from its start, however long the node stays taken (a Go
    /// duration; default 2h): past it, alerts fire again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<String>,
    /// Said in the silence's comment, before slipway's own key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// One label matcher of a silence (Alertmanager's v2 API `matcher`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    /// The label's name.
    pub name: String,
    /// The value, or with `isRegex` an RE2 expression anchored at both ends.
    pub value: String,
    #[serde(default)]
    pub is_regex: bool,
    /// `false`: the matcher matches the labels that do not match (`!=`, `!~`).
    #[serde(default = "yes")]
    pub is_equal: bool,
}

fn yes() -> bool {
    true
}

impl Matcher {
    /// The matcher for `node`: `$(NODE_NAME)` replaced by its name (escaped in a regex).
    pub fn for_node(&self, node: &str) -> Matcher {
        let name = match self.is_regex {
            true => escape(node),
            false => node.to_string(),
        };
        Matcher {
            value: self.value.replace(NODE_NAME, &name),
            ..self.clone()
        }
    }

    /// Whether the matcher matches a label that is absent (its value empty), as Alertmanager
    /// judges it; `Err` when the regex does not compile.
    fn matches_empty(&self) -> Result<bool, regex::Error> {
        let hit = match self.is_regex {
            true => regex::Regex::new(&format!("^(?:{})$", self.value))?.is_match(""),
            false => self.value.is_empty(),
        };
        Ok(hit == self.is_equal)
    }
}

/// `text` as a regex that matches it alone, in a syntax RE2 (Alertmanager's) and Rust's regex
/// share; only the metacharacters are escaped, so that `n1\.example` reads as the node's name
/// (`regex::escape` also escapes `-`).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl SilenceSpec {
    /// `maxDuration`, or the default; `Err` names the field.
    pub fn max_duration(&self, field: &str) -> Result<Duration, String> {
        let Some(text) = self.max_duration.as_deref() else {
            return Ok(DEFAULT_MAX_DURATION);
        };
        match text.parse::<GoDuration>().map(GoDuration::to_std) {
            Ok(Some(d)) if !d.is_zero() => Ok(d),
            Ok(_) => Err(format!(
                "{field}.maxDuration must be positive, not {text:?}"
            )),
            Err(e) => Err(format!("{field}.maxDuration is invalid: {e}")),
        }
    }
}

/// Checks what Alertmanager would refuse, and what CEL cannot see: matchers present, each with a
/// name and a regex that compiles, not all of them matching an empty value (a silence of
/// everything), a positive `maxDuration`. `field` is the spec's path (`spec.disruption`); the
/// error names the field.
pub fn validate(spec: &DisruptionSpec, field: &str) -> Result<(), String> {
    let Some(silence) = &spec.silence else {
        return Ok(());
    };
    let at = format!("{field}.silence");
    if silence.matchers.is_empty() {
        return Err(format!("{at}.matchers must name at least one matcher"));
    }
    let mut all_match_empty = true;
    for (i, m) in silence.matchers.iter().enumerate() {
        let m_at = format!("{at}.matchers[{i}]");
        if m.name.is_empty() {
            return Err(format!("{m_at}.name must not be empty"));
        }
        // Checked as it will be sent: for a node whose name is a plain word.
        match m.for_node("node").matches_empty() {
            Ok(empty) => all_match_empty &= empty,
            Err(e) => return Err(format!("{m_at}.value is not a valid regex: {e}")),
        }
    }
    if all_match_empty {
        return Err(format!(
            "{at}.matchers would match every alert: at least one must not match an empty value"
        ));
    }
    silence.max_duration(&at)?;
    Ok(())
}

/// [`validate`] for a Plan, whose drain runs in its Job (`kubectl drain`): what only a drain of
/// slipway's can do is refused, naming the field and SUC's way.
pub fn validate_for_plan(spec: &DisruptionSpec, field: &str) -> Result<(), String> {
    validate(spec, field)?;
    if spec.on_drain_timeout == Some(OnDrainTimeout::DeletePods) {
        return Err(format!(
            "{field}.onDrainTimeout: DeletePods is not supported for Plans: their drain runs in \
             the Job (spec.drain.disableEviction deletes instead of evicting)"
        ));
    }
    if spec.wait_for_volume_detach == Some(true) {
        return Err(format!(
            "{field}.waitForVolumeDetach is not supported for Plans: their drain runs in the Job"
        ));
    }
    Ok(())
}

/// [`validate`] for a kind that runs no Job of an image of its own (`why` says what it runs):
/// `prePull` is refused, naming the field.
pub fn validate_without_images(
    spec: &DisruptionSpec,
    field: &str,
    why: &str,
) -> Result<(), String> {
    validate(spec, field)?;
    match spec.pre_pull {
        Some(true) => Err(format!("{field}.prePull is not supported here: {why}")),
        _ => Ok(()),
    }
}

/// The bounds the CRD puts on `spec.disruption` at `pointer` (a JSON pointer into the schema):
/// what the API server can refuse at `kubectl apply`; [`validate`] checks the rest.
pub fn crd_rules(root: &mut Value, pointer: &str, field: &str) {
    let silence = format!("{pointer}/properties/silence");
    extend(root, &format!("{silence}/properties/matchers"), |s| {
        s["minItems"] = json!(1);
        s["maxItems"] = json!(32);
    });
    let matcher = format!("{silence}/properties/matchers/items/properties");
    extend(root, &format!("{matcher}/name"), |s| {
        s["minLength"] = json!(1);
        s["maxLength"] = json!(256);
    });
    extend(root, &format!("{matcher}/value"), |s| {
        s["maxLength"] = json!(1024);
    });
    extend(root, &format!("{silence}/properties/comment"), |s| {
        s["maxLength"] = json!(1024);
    });
    positive_duration(
        root,
        &format!("{silence}/properties/maxDuration"),
        &format!("{field}.silence.maxDuration"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(name: &str, value: &str, is_regex: bool, is_equal: bool) -> Matcher {
        Matcher {
            name: name.into(),
            value: value.into(),
            is_regex,
            is_equal,
        }
    }

    fn silence(matchers: Vec<Matcher>) -> DisruptionSpec {
        DisruptionSpec {
            silence: Some(SilenceSpec {
                matchers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_plan_refuses_what_only_slipways_drains_do() {
        let delete = DisruptionSpec {
            on_drain_timeout: Some(OnDrainTimeout::DeletePods),
            ..Default::default()
        };
        assert_eq!(validate(&delete, "spec.disruption"), Ok(()));
        let e = validate_for_plan(&delete, "spec.disruption").unwrap_err();
        assert!(
            e.starts_with("spec.disruption.onDrainTimeout: DeletePods"),
            "{e}"
        );
        let volumes = DisruptionSpec {
            wait_for_volume_detach: Some(true),
            ..Default::default()
        };
        let e = validate_for_plan(&volumes, "spec.disruption").unwrap_err();
        assert!(e.starts_with("spec.disruption.waitForVolumeDetach"), "{e}");
        let fine = DisruptionSpec {
            on_drain_timeout: Some(OnDrainTimeout::Fail),
            wait_for_volume_detach: Some(false),
            ..Default::default()
        };
        assert_eq!(validate_for_plan(&fine, "spec.disruption"), Ok(()));
    }

    #[test]
    fn no_silence_is_valid() {
        assert_eq!(
            validate(&DisruptionSpec::default(), "spec.disruption"),
            Ok(())
        );
    }

    #[test]
    fn a_node_matcher_is_valid() {
        let spec = silence(vec![matcher("instance", "$(NODE_NAME)", false, true)]);
        assert_eq!(validate(&spec, "spec.disruption"), Ok(()));
    }

    #[test]
    fn an_empty_matcher_list_is_named() {
        let e = validate(&silence(vec![]), "spec.disruption").unwrap_err();
        assert_eq!(
            e,
            "spec.disruption.silence.matchers must name at least one matcher"
        );
    }

    #[test]
    fn a_bad_regex_is_named_with_its_index() {
        let spec = silence(vec![
            matcher("node", "$(NODE_NAME)", false, true),
            matcher("job", "node-(exporter", true, true),
        ]);
        let e = validate(&spec, "spec.disruption").unwrap_err();
        assert!(
            e.starts_with("spec.disruption.silence.matchers[1].value is not a valid regex"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_name_is_named() {
        let e = validate(&silence(vec![matcher("", "x", false, true)]), "spec.d").unwrap_err();
        assert_eq!(e, "spec.d.silence.matchers[0].name must not be empty");
    }

    #[test]
    fn matchers_that_match_everything_are_refused() {
        for everything in [
            vec![matcher("instance", ".*", true, true)],
            vec![matcher("instance", "", false, true)],
            vec![matcher("instance", "x", false, false)],
            vec![
                matcher("a", ".+", true, false),
                matcher("b", "", false, true),
            ],
        ] {
            let e = validate(&silence(everything.clone()), "spec.disruption").unwrap_err();
            assert!(e.contains("would match every alert"), "{everything:?}: {e}");
        }
        // One narrow matcher is enough beside broad ones.
        let spec = silence(vec![
            matcher("severity", ".*", true, true),
            matcher("instance", "$(NODE_NAME):.*", true, true),
        ]);
        assert_eq!(validate(&spec, "spec.disruption"), Ok(()));
    }

    #[test]
    fn max_duration_defaults_and_must_be_positive() {
        let mut spec = silence(vec![matcher("node", "$(NODE_NAME)", false, true)]);
        let s = spec.silence.as_mut().unwrap();
        assert_eq!(s.max_duration("x"), Ok(DEFAULT_MAX_DURATION));
        s.max_duration = Some("90m".into());
        assert_eq!(s.max_duration("x"), Ok(Duration::from_secs(5400)));
        for bad in ["0s", "-1h", "soon"] {
            spec.silence.as_mut().unwrap().max_duration = Some(bad.into());
            let e = validate(&spec, "spec.disruption").unwrap_err();
            assert!(
                e.starts_with("spec.disruption.silence.maxDuration"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_node_is_filled_in_and_escaped_in_a_regex() {
        let plain = matcher("instance", "$(NODE_NAME):9100", false, true);
        assert_eq!(plain.for_node("n1.example").value, "n1.example:9100");
        let re = matcher("instance", "$(NODE_NAME)(:[0-9]+)?", true, true);
        assert_eq!(re.for_node("n1.example").value, r"n1\.example(:[0-9]+)?");
        let odd = matcher("instance", "$(NODE_NAME)", true, true).for_node("a-b.c+(d)");
        assert_eq!(odd.value, r"a-b\.c\+\(d\)");
        let re = regex::Regex::new(&format!("^(?:{})$", odd.value)).unwrap();
        assert!(re.is_match("a-b.c+(d)") && !re.is_match("a-bxc+(d)"));
        let none = matcher("severity", "page", false, false);
        assert_eq!(none.for_node("n1"), none);
    }

    #[test]
    fn is_equal_defaults_to_true_and_is_regex_to_false() {
        let m: Matcher = serde_json::from_value(json!({"name": "a", "value": "b"})).unwrap();
        assert!(m.is_equal);
        assert!(!m.is_regex);
    }
}
