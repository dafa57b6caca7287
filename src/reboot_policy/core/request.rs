//! A node's own request for a reboot, as `slipway agent` records it on its Node.
//!
//! The agent looks at a sentinel every period (kured's file, `/var/run/reboot-required` by default,
//! or a command) and keeps one annotation on its Node in step with it: present while the node
//! wants a reboot, its value the boot ID the agent saw the need at. An annotation, not a node
//! condition, because conditions live in `status` beside the kubelet's and Node Problem
//! Detector's heartbeats, while an annotation is one small patch that slipway's node index keeps
//! cheaply; and the boot ID in the value makes a request from before the last reboot recognisable
//! as stale even while the agent is down.

/// Present on a Node while its agent says it wants a reboot; the value is the node's
/// `status.nodeInfo.bootID` when the agent saw the need.
pub const REBOOT_REQUIRED_ANNOTATION: &str = "slipway.dev/reboot-required";

/// What a sentinel said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sentinel {
    /// A reboot is needed (the file exists, or the command exited 0).
    Present,
    /// No reboot is needed (no file, or the command exited 1).
    Absent,
    /// The sentinel could not be read (another exit code, a command that cannot run, an I/O
    /// error other than "not found"); why.
    Unknown(String),
}

/// What the agent does to its Node's annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnnotationChange {
    /// Nothing: the annotation already says what the sentinel says.
    Keep,
    /// Set it to this boot ID.
    Set(String),
    Remove,
}

/// The change that brings the annotation in step with the sentinel.
///
/// A sentinel that cannot be read changes nothing, except that a request from an earlier boot is
/// removed: the node has rebooted since it was made.
pub fn agent_step(
    sentinel: &Sentinel,
    boot_id: &str,
    annotation: Option<&str>,
) -> AnnotationChange {
    match (sentinel, annotation) {
        (Sentinel::Present, Some(seen)) if seen == boot_id => AnnotationChange::Keep,
        (Sentinel::Present, _) => AnnotationChange::Set(boot_id.to_string()),
        (Sentinel::Absent, Some(_)) => AnnotationChange::Remove,
        (Sentinel::Unknown(_), Some(seen)) if seen != boot_id => AnnotationChange::Remove,
        (Sentinel::Absent | Sentinel::Unknown(_), _) => AnnotationChange::Keep,
    }
}

/// kured's reading of a sentinel command's exit code: 0 wants a reboot, 1 does not, anything else
/// (or no code: killed by a signal) is unknown.
pub fn sentinel_of_exit_code(code: Option<i32>) -> Sentinel {
    match code {
        Some(0) => Sentinel::Present,
        Some(1) => Sentinel::Absent,
        Some(other) => Sentinel::Unknown(format!("the sentinel command exited with {other}")),
        None => Sentinel::Unknown("the sentinel command was killed by a signal".into()),
    }
}

/// A sentinel command's words, split as a shell splits them (kured splits `--reboot-sentinel-command`
/// with shlex): blanks separate words, single quotes keep everything, double quotes keep all but
/// a backslash before `"`, `\`, `$` or `` ` ``, and a backslash outside quotes keeps the next
/// character. Nothing is expanded. `Err` names what is wrong: an unclosed quote, or no words.
pub fn command_words(text: &str) -> Result<Vec<String>, String> {
    let (mut words, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if std::mem::take(&mut in_word) {
                    words.push(std::mem::take(&mut word));
                }
                continue;
            }
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some(c) => word.push(c),
                    None => return Err(format!("{text:?}: a single quote is not closed")),
                }
            },
            '"' => loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                        Some(c) => word.extend(['\\', c]),
                        None => return Err(format!("{text:?}: a double quote is not closed")),
                    },
                    Some(c) => word.push(c),
                    None => return Err(format!("{text:?}: a double quote is not closed")),
                }
            },
            '\\' => word.extend(chars.next()),
            c => word.push(c),
        }
        in_word = true;
    }
    if in_word {
        words.push(word);
    }
    match words.is_empty() {
        true => Err("the sentinel command is empty".into()),
        false => Ok(words),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_as_a_shell_splits_them() {
        let words = |t: &str| command_words(t).map(|w| w.join("|"));
        assert_eq!(
            words("needs-restarting  -r").as_deref(),
            Ok("needs-restarting|-r")
        );
        assert_eq!(
            words("sh -c '! needs-restarting -r'").as_deref(),
            Ok("sh|-c|! needs-restarting -r")
        );
        assert_eq!(
            words(r#"sh -c "test -e \"/var/run/a b\"""#).as_deref(),
            Ok(r#"sh|-c|test -e "/var/run/a b""#)
        );
        assert_eq!(words(r"a\ b c''d ''").as_deref(), Ok("a b|cd|"));
        assert_eq!(words(r#""\n""#).as_deref(), Ok(r"\n"));
        assert!(words("sh -c 'unclosed").is_err());
        assert!(words("\"unclosed").is_err());
        assert!(words("   ").is_err());
    }

    #[test]
    fn the_annotation_follows_the_sentinel_and_the_boot() {
        use AnnotationChange::*;
        let unknown = Sentinel::Unknown("exit 2".into());
        let cases: [(&Sentinel, Option<&str>, AnnotationChange); 9] = [
            (&Sentinel::Present, None, Set("boot-2".into())),
            (&Sentinel::Present, Some("boot-2"), Keep),
            // Still wanted after a reboot (a sentinel that outlives it): a new request.
            (&Sentinel::Present, Some("boot-1"), Set("boot-2".into())),
            (&Sentinel::Absent, None, Keep),
            (&Sentinel::Absent, Some("boot-2"), Remove),
            (&Sentinel::Absent, Some("boot-1"), Remove),
            (&unknown, None, Keep),
            (&unknown, Some("boot-2"), Keep),
            (&unknown, Some("boot-1"), Remove),
        ];
        for (sentinel, annotation, want) in cases {
            assert_eq!(
                agent_step(sentinel, "boot-2", annotation),
                want,
                "{sentinel:?} with {annotation:?}"
            );
        }
    }

    #[test]
    fn exit_codes_read_as_kured_reads_them() {
        assert_eq!(sentinel_of_exit_code(Some(0)), Sentinel::Present);
        assert_eq!(sentinel_of_exit_code(Some(1)), Sentinel::Absent);
        assert_eq!(
            sentinel_of_exit_code(Some(2)),
            Sentinel::Unknown("the sentinel command exited with 2".into())
        );
        assert!(matches!(sentinel_of_exit_code(None), Sentinel::Unknown(_)));
    }
}
