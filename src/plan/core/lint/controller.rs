//! What the controller would refuse in one Plan (its own validation, with the Plan's Secrets
//! taken from the input), and warnings for the usual mistakes in one Plan.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;

use crate::common::selector::Selector;
use crate::common::window::TimeWindow;
use crate::plan::api::Plan;

use super::{Options, Severity};

pub(super) fn controller_checks(
    plan: &Plan,
    secrets: &BTreeMap<(String, String), Secret>,
    now: Timestamp,
    options: Options,
    push: &mut impl FnMut(Severity, &[&str], String),
) {
    let spec = &plan.spec;
    let by_name = plan_secrets(plan, secrets, options, push);
    if let Err(e) = crate::plan::core::validate(plan, &by_name) {
        let field = e
            .split_whitespace()
            .next()
            .unwrap_or("spec")
            .trim_end_matches(':');
        let path: Vec<&str> = if field.starts_with("spec.") {
            // `spec.healthChecks[0].expr`: the line of the key (the first item's, for any index).
            field
                .split('.')
                .map(|k| k.split_once('[').map_or(k, |(key, _)| key))
                .collect()
        } else {
            vec!["spec"]
        };
        push(Severity::Error, &path, e.clone());
    }
    match Selector::from_label_selector(spec.node_selector.as_ref()) {
        Err(e) => push(Severity::Error, &["spec", "nodeSelector"], e.to_string()),
        Ok(Selector::Nothing) => push(
            Severity::Warning,
            &["spec"],
            "no nodeSelector: the Plan selects no node ({} selects every node)".into(),
        ),
        Ok(_) => {}
    }
    match spec.concurrency {
        None => push(
            Severity::Warning,
            &["spec"],
            "no concurrency: it defaults to 0 and no node is upgraded".into(),
        ),
        Some(0) => push(
            Severity::Warning,
            &["spec", "concurrency"],
            "0 upgrades no node".into(),
        ),
        _ => {}
    }
    let version = spec.version.as_deref().filter(|v| !v.is_empty());
    let channel = spec.channel.as_deref().filter(|c| !c.is_empty());
    if version.is_none() && channel.is_none() {
        push(
            Severity::Warning,
            &["spec"],
            format!(
                "neither version nor channel: the controller reports {:?}",
                crate::plan::core::ERR_UNRESOLVABLE
            ),
        );
    }
    image_checks(plan, version, push);
    if let Some((timeout, deadline)) = crate::plan::core::job::drain_outlasts_deadline(spec) {
        push(
            Severity::Warning,
            &["spec", "drain", "timeout"],
            format!(
                "{timeout}s is longer than spec.jobActiveDeadlineSecs ({deadline}s): the Job is stopped before its drain gives up"
            ),
        );
    }

    if let Some(w) = &spec.window
        && let Ok(window) = TimeWindow::new(w)
        && window.next_opening(now).is_none()
        && !window.contains(now)
    {
        push(
            Severity::Warning,
            &["spec", "window"],
            "the window never opens".into(),
        );
    }
}

/// The Plan's Secrets by name as the controller would read them. A missing Secret is reported
/// here (an error only with [`Options::require_secrets`]: it is usually sealed or external) and
/// stood in for by an empty one, so that the controller's other checks are not hidden behind it.
fn plan_secrets(
    plan: &Plan,
    secrets: &BTreeMap<(String, String), Secret>,
    options: Options,
    push: &mut impl FnMut(Severity, &[&str], String),
) -> BTreeMap<String, Secret> {
    let namespace = plan.metadata.namespace.clone().unwrap_or_default();
    let mut by_name = BTreeMap::new();
    for s in plan.spec.secrets.iter().flatten() {
        let key = (namespace.clone(), s.name.clone());
        let found = secrets
            .get(&key)
            .or_else(|| secrets.get(&(String::new(), s.name.clone())));
        if found.is_none() && !s.ignore_updates.unwrap_or(false) {
            let (severity, consequence) = if options.require_secrets {
                (
                    Severity::Error,
                    "the controller does not validate a Plan whose Secret is missing",
                )
            } else {
                (
                    Severity::Warning,
                    "the Plan rolls out only once it exists in the Plan's namespace",
                )
            };
            push(
                severity,
                &["spec", "secrets"],
                format!(
                    "secret {:?} not found in the input: {consequence}, and the latestHash depends on its content",
                    s.name
                ),
            );
        }
        by_name.insert(s.name.clone(), found.cloned().unwrap_or_default());
    }
    by_name
}

/// Image references the kubelet cannot pull, and untagged images (the controller adds a tag).
fn image_checks(
    plan: &Plan,
    version: Option<&str>,
    push: &mut impl FnMut(Severity, &[&str], String),
) {
    let spec = &plan.spec;
    for (container, c) in [
        ("upgrade", Some(&spec.upgrade)),
        ("prepare", spec.prepare.as_ref()),
    ] {
        let Some(c) = c.filter(|c| !c.image.is_empty()) else {
            continue;
        };
        match crate::plan::core::image::parse(&c.image) {
            None => push(
                Severity::Warning,
                &["spec", container, "image"],
                format!(
                    "{:?} is not a valid image reference: its pods will not start",
                    c.image
                ),
            ),
            Some(r) if r.tag.is_none() && r.digest.is_none() => {
                let runs = match version {
                    Some(v) => crate::plan::core::image::with_latest_tag(
                        &c.image,
                        &crate::plan::core::image::munge_version(v),
                    ),
                    None => format!("{}:<the channel's version>", c.image),
                };
                push(
                    Severity::Warning,
                    &["spec", container, "image"],
                    format!("{:?} has no tag: the controller runs {runs}", c.image),
                );
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::lint::Source;
    use crate::plan::core::lint::fixtures::*;

    #[test]
    fn controller_checks_and_warnings() {
        let text = PLAN
            .replace("  concurrency: 1\n", "")
            .replace("  nodeSelector: {}\n", "")
            .replace("  version: v1\n", "")
            .replace("busybox:1", "busybox");
        let f = findings(&format!(
            "{text}  secrets:\n  - name: s\n    path: /s\n  window:\n    days: [mo]\n    startTime: \"1\"\n    endTime: \"2\"\n    timeZone: Nowhere/Else\n"
        ));
        let got: Vec<(Severity, Source, &str)> = f
            .iter()
            .map(|f| (f.severity, f.source, f.field.as_str()))
            .collect();
        assert!(
            got.contains(&(Severity::Error, Source::Controller, "spec.window")),
            "{f:?}"
        );
        let advice = got.iter().filter(|g| g.1 == Source::Advice).count();
        // No selector, no concurrency, neither version nor channel, an untagged image, and the
        // Secret that is not in the input.
        assert_eq!(advice, 5, "{f:?}");
        assert!(
            got.contains(&(Severity::Warning, Source::Advice, "spec.secrets")),
            "{f:?}"
        );
        // The Secret in the input satisfies the controller.
        let secret = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n";
        let f = findings(&format!(
            "{PLAN}  secrets:\n  - name: s\n    path: /s\n{secret}"
        ));
        assert_eq!(f, vec![]);
    }

    #[test]
    fn a_drain_longer_than_the_plans_deadline_is_a_warning_on_its_timeout() {
        let f = findings(&format!(
            "{PLAN}  jobActiveDeadlineSecs: 300\n  drain:\n    timeout: 10m\n"
        ));
        let got: Vec<(Severity, &str, &str)> = (f.iter())
            .map(|f| (f.severity, f.field.as_str(), f.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![(
                Severity::Warning,
                "spec.drain.timeout",
                "600s is longer than spec.jobActiveDeadlineSecs (300s): the Job is stopped before its drain gives up"
            )]
        );
        let within = format!("{PLAN}  jobActiveDeadlineSecs: 900\n  drain:\n    timeout: 10m\n");
        assert_eq!(findings(&within), vec![]);
    }

    #[test]
    fn a_secret_missing_from_the_input_is_a_warning_unless_required() {
        let text = format!("{PLAN}  secrets:\n  - name: sealed\n    path: /s\n");
        let lenient = findings(&text);
        assert_eq!(lenient.len(), 1, "{lenient:?}");
        assert_eq!(
            (
                lenient[0].severity,
                lenient[0].source,
                lenient[0].field.as_str()
            ),
            (Severity::Warning, Source::Advice, "spec.secrets")
        );
        assert!(lenient[0].message.contains("\"sealed\""), "{lenient:?}");
        let strict = findings_with(
            &text,
            Options {
                require_secrets: true,
            },
        );
        assert_eq!(strict.len(), 1, "{strict:?}");
        assert_eq!(
            (strict[0].severity, strict[0].source),
            (Severity::Error, Source::Controller)
        );
        // A Secret the Plan ignores the updates of is not needed for the hash.
        let ignored = text.replace("path: /s", "path: /s\n    ignoreUpdates: true");
        let strict = findings_with(
            &ignored,
            Options {
                require_secrets: true,
            },
        );
        assert_eq!(strict, vec![]);
    }
}
