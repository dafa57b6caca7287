//! What `slipway agent` says about its own Node: whether the node wants a reboot, from every
//! source it watches, and whether it runs Kairos. Pure: the agent reads its host and its Node,
//! and this says which annotation and label to change.
//!
//! Sources of a reboot request: the sentinel ([`super::request`]) and, with `--update-engine`,
//! Flatcar's update engine. Any source that wants a reboot makes the node want one; the request is
//! withdrawn only once every source says no, so a source that cannot be read (a bus that is down)
//! never withdraws a request another source, or itself before, made. A request from an earlier
//! boot is removed whatever the sources say: the node has rebooted since.

use serde_json::{Value, json};

use super::request::{self, AnnotationChange, REBOOT_REQUIRED_ANNOTATION, Sentinel};

/// The label kairos-operator's node labeller puts on a node that runs Kairos, and that Kairos's
/// NodeOps select by.
pub const KAIROS_MANAGED_LABEL: &str = "kairos.io/managed";
/// The `current_operation` of Flatcar's update engine once an update is installed and only a
/// reboot is missing.
pub const UPDATE_ENGINE_NEED_REBOOT: &str = "UPDATE_STATUS_UPDATED_NEED_REBOOT";

/// What the agent read of Flatcar's update engine (`com.coreos.update1` on the system bus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateEngine {
    /// The `current_operation` of its latest status, from `GetStatus` or a `StatusUpdate`.
    Status(String),
    /// The bus answers, but nothing owns `com.coreos.update1`: this host runs no update engine
    /// (or it is masked), and it asks for nothing.
    NotRunning,
    /// The bus cannot be reached, refused, or did not answer; why.
    Unreadable(String),
}

impl UpdateEngine {
    /// What it says, as a sentinel does.
    pub fn sentinel(&self) -> Sentinel {
        match self {
            UpdateEngine::Status(op) if op == UPDATE_ENGINE_NEED_REBOOT => Sentinel::Present,
            UpdateEngine::Status(_) | UpdateEngine::NotRunning => Sentinel::Absent,
            UpdateEngine::Unreadable(why) => Sentinel::Unknown(format!("update engine: {why}")),
        }
    }
}

/// One file of the host, as the agent read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostFile {
    Missing,
    Read(String),
    /// Any error but "not found"; why.
    Unreadable(String),
}

/// The host's `/etc/kairos-release` and `/etc/os-release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRelease {
    pub kairos_release: HostFile,
    pub os_release: HostFile,
}

impl HostRelease {
    /// Whether the host runs Kairos, decided as kairos-operator's node labeller decides it: a
    /// readable `kairos-release` (even empty), or, only when there is none, an `os-release`
    /// whose `ID` contains `kairos` in any case. A file that cannot be read says no.
    pub fn is_kairos(&self) -> bool {
        match (&self.kairos_release, &self.os_release) {
            (HostFile::Read(_), _) => true,
            (HostFile::Missing, HostFile::Read(text)) => {
                os_release_id(text).is_some_and(|id| id.to_ascii_lowercase().contains("kairos"))
            }
            _ => false,
        }
    }
}

/// The `ID` of an os-release file, read as kairos-operator reads it: `KEY=VALUE` lines, blank
/// and `#` lines skipped, the value's quotes trimmed, the last `ID` winning.
fn os_release_id(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| *k == "ID")
        .map(|(_, v)| v.trim_matches(['"', '\'']))
        .next_back()
}

/// What the agent read on its host this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSeen {
    pub sentinel: Sentinel,
    /// `None`: the agent does not watch the update engine.
    pub update_engine: Option<UpdateEngine>,
    /// `None`: the agent was not given the host's /etc.
    pub release: Option<HostRelease>,
}

/// The agent's Node as it read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSeen<'a> {
    /// `status.nodeInfo.bootID`.
    pub boot_id: &'a str,
    /// The value of [`REBOOT_REQUIRED_ANNOTATION`].
    pub reboot_required: Option<&'a str>,
    /// The value of [`KAIROS_MANAGED_LABEL`].
    pub kairos_managed: Option<&'a str>,
}

/// What the agent changes on its Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStep {
    /// The reboot request, from every source together.
    pub request: AnnotationChange,
    /// Label the node `kairos.io/managed: "true"`.
    pub label_kairos: bool,
    /// What all the sources together say (for the log).
    pub wanted: Sentinel,
}

impl AgentStep {
    /// The merge patch of the Node; `None` when nothing changes.
    pub fn merge_patch(&self) -> Option<Value> {
        let mut metadata = serde_json::Map::new();
        let request = match &self.request {
            AnnotationChange::Keep => None,
            AnnotationChange::Set(boot) => Some(json!(boot)),
            AnnotationChange::Remove => Some(Value::Null),
        };
        if let Some(value) = request {
            metadata.insert(
                "annotations".into(),
                json!({ REBOOT_REQUIRED_ANNOTATION: value }),
            );
        }
        if self.label_kairos {
            metadata.insert("labels".into(), json!({ KAIROS_MANAGED_LABEL: "true" }));
        }
        (!metadata.is_empty()).then(|| json!({ "metadata": metadata }))
    }
}

/// The readings of several sources as one: any that wants a reboot wins; else any that cannot be
/// read leaves it unknown; else no reboot is wanted.
pub fn combined(readings: &[Sentinel]) -> Sentinel {
    if readings.contains(&Sentinel::Present) {
        return Sentinel::Present;
    }
    let unknown: Vec<&str> = readings
        .iter()
        .filter_map(|r| match r {
            Sentinel::Unknown(why) => Some(why.as_str()),
            _ => None,
        })
        .collect();
    if unknown.is_empty() {
        Sentinel::Absent
    } else {
        Sentinel::Unknown(unknown.join("; "))
    }
}

/// The agent's decision on its Node.
///
/// The Kairos label is only ever added: a host that is not (or no longer) Kairos leaves the
/// label as it is, as kairos-operator's labeller does, and so does `"false"`, with which an admin
/// keeps kairos-operator's labeller off a node.
pub fn decide(host: &HostSeen, node: NodeSeen<'_>) -> AgentStep {
    let mut readings = vec![host.sentinel.clone()];
    readings.extend(host.update_engine.as_ref().map(UpdateEngine::sentinel));
    let wanted = combined(&readings);
    let request = request::agent_step(&wanted, node.boot_id, node.reboot_required);
    let label_kairos = host.release.as_ref().is_some_and(HostRelease::is_kairos)
        && !matches!(node.kairos_managed, Some("true" | "false"));
    AgentStep {
        request,
        label_kairos,
        wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(op: &str) -> Option<UpdateEngine> {
        Some(UpdateEngine::Status(op.into()))
    }

    #[test]
    fn any_source_that_wants_a_reboot_asks_and_all_must_say_no_to_withdraw() {
        use AnnotationChange::*;
        use Sentinel::{Absent, Present};
        let need = || status(UPDATE_ENGINE_NEED_REBOOT);
        let idle = || status("UPDATE_STATUS_IDLE");
        let down = || Some(UpdateEngine::Unreadable("no bus".into()));
        let unknown = || Sentinel::Unknown("exit 2".into());
        #[rustfmt::skip]
        let cases: Vec<(Sentinel, Option<UpdateEngine>, Option<&str>, AnnotationChange)> = vec![
            // The update engine alone, in each of its states.
            (Absent, need(), None, Set("boot-2".into())),
            (Absent, need(), Some("boot-2"), Keep),
            (Absent, need(), Some("boot-1"), Set("boot-2".into())),
            (Absent, idle(), Some("boot-2"), Remove),
            (Absent, idle(), None, Keep),
            (Absent, status("UPDATE_STATUS_DOWNLOADING"), None, Keep),
            (Absent, status("UPDATE_STATUS_FINALIZING"), None, Keep),
            (Absent, status("UPDATE_STATUS_REPORTING_ERROR_EVENT"), Some("boot-2"), Remove),
            // Matched exactly: a status that only resembles it is not a request.
            (Absent, status("update_status_updated_need_reboot"), None, Keep),
            (Absent, status(""), None, Keep),
            (Absent, Some(UpdateEngine::NotRunning), Some("boot-2"), Remove),
            // A bus that cannot be read withdraws nothing, but a request from before the reboot goes.
            (Absent, down(), Some("boot-2"), Keep),
            (Absent, down(), Some("boot-1"), Remove),
            (Absent, down(), None, Keep),
            // With the sentinel: either asks; both must say no.
            (Present, idle(), None, Set("boot-2".into())),
            (Present, down(), None, Set("boot-2".into())),
            (Present, Some(UpdateEngine::NotRunning), Some("boot-2"), Keep),
            (unknown(), need(), None, Set("boot-2".into())),
            (unknown(), idle(), Some("boot-2"), Keep),
            (Present, need(), Some("boot-2"), Keep),
            // Without --update-engine, the sentinel alone, as before.
            (Present, None, None, Set("boot-2".into())),
            (Absent, None, Some("boot-2"), Remove),
            (unknown(), None, Some("boot-2"), Keep),
        ];
        for (sentinel, update_engine, annotation, want) in cases {
            let host = HostSeen {
                sentinel: sentinel.clone(),
                update_engine: update_engine.clone(),
                release: None,
            };
            let node = NodeSeen {
                boot_id: "boot-2",
                reboot_required: annotation,
                kairos_managed: None,
            };
            let step = decide(&host, node);
            assert_eq!(
                step.request, want,
                "{sentinel:?}, {update_engine:?}, {annotation:?}"
            );
            assert!(!step.label_kairos);
        }
    }

    #[test]
    fn combined_readings_say_why_they_cannot_tell() {
        let a = Sentinel::Unknown("a".into());
        let b = Sentinel::Unknown("b".into());
        assert_eq!(combined(&[]), Sentinel::Absent);
        assert_eq!(
            combined(&[a.clone(), Sentinel::Absent, b]),
            Sentinel::Unknown("a; b".into())
        );
        assert_eq!(combined(&[a, Sentinel::Present]), Sentinel::Present);
        assert_eq!(
            UpdateEngine::Unreadable("refused".into()).sentinel(),
            Sentinel::Unknown("update engine: refused".into())
        );
    }

    fn read(text: &str) -> HostFile {
        HostFile::Read(text.into())
    }

    #[test]
    fn kairos_is_detected_as_kairos_operators_labeller_does() {
        use HostFile::*;
        let denied = || Unreadable("permission denied".into());
        let cases = [
            // kairos-release decides when it exists, whatever it holds and os-release says.
            (read("KAIROS_ID=kairos\n"), read("ID=ubuntu\n"), true),
            (read(""), Missing, true),
            (read("garbage"), denied(), true),
            // A kairos-release that cannot be read says no, without looking at os-release.
            (denied(), read("ID=kairos\n"), false),
            // Otherwise os-release's ID, containing "kairos" in any case.
            (Missing, read("NAME=\"Kairos\"\nID=kairos\n"), true),
            (Missing, read("ID=\"kairos-ubuntu\"\n"), true),
            (Missing, read("ID='Kairos'\n"), true),
            (Missing, read("  ID=KAIROS  \n"), true),
            (Missing, read("ID=ubuntu\nID_LIKE=kairos\n"), false),
            (Missing, read("# ID=kairos\nID=debian\n"), false),
            (Missing, read("ID=flatcar\n"), false),
            (Missing, read("ID=kairos\nID=ubuntu\n"), false),
            (Missing, read("ID=ubuntu\nID=kairos\n"), true),
            // kairos-operator splits at the first '=' and does not trim the key.
            (Missing, read("ID =kairos\n"), false),
            (Missing, read("NAME=\"ID=kairos\"\n"), false),
            (Missing, read(""), false),
            (Missing, Missing, false),
            (Missing, denied(), false),
        ];
        for (kairos_release, os_release, want) in cases {
            let release = HostRelease {
                kairos_release: kairos_release.clone(),
                os_release: os_release.clone(),
            };
            assert_eq!(
                release.is_kairos(),
                want,
                "{kairos_release:?}, {os_release:?}"
            );
        }
    }

    #[test]
    fn the_kairos_label_is_only_added_and_an_admins_false_stays() {
        let kairos = HostRelease {
            kairos_release: read(""),
            os_release: HostFile::Missing,
        };
        let debian = HostRelease {
            kairos_release: HostFile::Missing,
            os_release: read("ID=debian\n"),
        };
        let cases = [
            (Some(&kairos), None, true),
            (Some(&kairos), Some("yes"), true),
            (Some(&kairos), Some(""), true),
            (Some(&kairos), Some("true"), false),
            (Some(&kairos), Some("false"), false),
            // Not Kairos, or not told where the host's /etc is: the label is left alone.
            (Some(&debian), Some("true"), false),
            (Some(&debian), None, false),
            (None, None, false),
        ];
        for (release, label, want) in cases {
            let host = HostSeen {
                sentinel: Sentinel::Absent,
                update_engine: None,
                release: release.cloned(),
            };
            let node = NodeSeen {
                boot_id: "boot-1",
                reboot_required: None,
                kairos_managed: label,
            };
            let step = decide(&host, node);
            assert_eq!(step.label_kairos, want, "{release:?}, {label:?}");
            assert_eq!(step.request, AnnotationChange::Keep);
        }
    }

    #[test]
    fn the_patch_carries_only_what_changes() {
        let step = |request, label_kairos| AgentStep {
            request,
            label_kairos,
            wanted: Sentinel::Absent,
        };
        assert_eq!(step(AnnotationChange::Keep, false).merge_patch(), None);
        assert_eq!(
            step(AnnotationChange::Set("b".into()), true).merge_patch(),
            Some(json!({"metadata": {
                "annotations": {"slipway.dev/reboot-required": "b"},
                "labels": {"kairos.io/managed": "true"},
            }}))
        );
        assert_eq!(
            step(AnnotationChange::Remove, false).merge_patch(),
            Some(json!({"metadata": {"annotations": {"slipway.dev/reboot-required": null}}}))
        );
        assert_eq!(
            step(AnnotationChange::Keep, true).merge_patch(),
            Some(json!({"metadata": {"labels": {"kairos.io/managed": "true"}}}))
        );
    }
}
