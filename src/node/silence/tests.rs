use super::*;

const ME: &str = "slipway/system-upgrade@cluster-1";

fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

const T0: &str = "2026-11-26T10:00:00Z";

fn plan(name: &str) -> Holder {
    Holder::Plan {
        namespace: "system-upgrade".into(),
        name: name.into(),
    }
}

fn reboot() -> Holder {
    Holder::Reboot {
        policy: "weekly".into(),
    }
}

fn spec(max: Option<&str>) -> SilenceSpec {
    SilenceSpec {
        matchers: vec![
            Matcher {
                name: "instance".into(),
                value: "$(NODE_NAME):9100".into(),
                is_regex: false,
                is_equal: true,
            },
            Matcher {
                name: "node".into(),
                value: "$(NODE_NAME)".into(),
                is_regex: true,
                is_equal: true,
            },
        ],
        max_duration: max.map(str::to_string),
        comment: None,
    }
}

fn wanted(holder: &Holder, node: &str, max: Option<&str>) -> Wanted {
    Wanted::of(holder, node, &spec(max)).expect("a valid spec")
}

/// A silence of ours, as Alertmanager would list it after `reconcile` asked for it.
fn listed(id: &str, w: &Wanted, since: &str, starts: &str, ends: &str) -> Silence {
    let key = w.key(t(since));
    Silence {
        id: id.into(),
        status: SilenceStatus {
            state: SilenceState::Active,
        },
        matchers: w.matchers.clone(),
        starts_at: t(starts),
        ends_at: t(ends),
        created_by: ME.into(),
        comment: w.comment_with(&key),
    }
}

fn expired(mut s: Silence) -> Silence {
    s.status.state = SilenceState::Expired;
    s
}

fn none() -> HeldSince {
    BTreeMap::new()
}

fn run(wanted: &[Wanted], current: &[Silence], now: &str) -> Vec<Action> {
    reconcile(wanted, current, ME, &none(), t(now))
}

#[test]
fn a_node_taken_gets_a_silence_with_its_name_filled_in_ending_a_few_minutes_ahead() {
    let w = wanted(&plan("server"), "n1.example", None);
    let actions = run(std::slice::from_ref(&w), &[], T0);
    let [Action::Create { key, silence }] = actions.as_slice() else {
        panic!("one create: {actions:?}");
    };
    assert_eq!(key.holder, plan("server"));
    assert_eq!(key.node, "n1.example");
    assert_eq!(key.since, t(T0));
    assert_eq!(silence.id, None);
    assert_eq!(silence.matchers[0].value, "n1.example:9100");
    assert_eq!(silence.matchers[1].value, r"n1\.example");
    assert_eq!(silence.starts_at, t(T0));
    assert_eq!(silence.ends_at, t("2026-11-26T10:05:00Z"));
    assert_eq!(silence.created_by, ME);
    assert_eq!(
        silence.comment,
        "plan system-upgrade/server disrupts node n1.example \
         [slipway holder=plan/system-upgrade/server node=n1.example since=2026-11-26T10:00:00Z]"
    );
}

#[test]
fn the_objects_comment_comes_before_the_key() {
    let mut s = spec(None);
    s.comment = Some("  kernel upgrade, ticket OPS-12 ".into());
    let w = Wanted::of(&reboot(), "n1", &s).expect("valid");
    let actions = run(&[w], &[], T0);
    let [Action::Create { silence, .. }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert!(
        silence
            .comment
            .starts_with("kernel upgrade, ticket OPS-12 [slipway ")
    );
    assert_eq!(
        Key::parse(&silence.comment).map(|k| k.holder),
        Some(reboot())
    );
}

#[test]
fn a_silence_with_time_left_is_left_alone_and_extended_when_little_is_left() {
    let w = wanted(&plan("server"), "n1", None);
    let s = listed("a", &w, T0, T0, "2026-11-26T10:05:00Z");
    // 3 minutes left: nothing to write.
    assert_eq!(
        run(
            std::slice::from_ref(&w),
            std::slice::from_ref(&s),
            "2026-11-26T10:02:00Z"
        ),
        []
    );
    // 2 minutes left: extended to 5 minutes ahead, the same silence and start.
    let actions = run(&[w], &[s], "2026-11-26T10:03:00Z");
    let [Action::Extend { key, silence }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(key.since, t(T0));
    assert_eq!(silence.id.as_deref(), Some("a"));
    assert_eq!(silence.starts_at, t(T0));
    assert_eq!(silence.ends_at, t("2026-11-26T10:08:00Z"));
}

#[test]
fn a_silence_never_lasts_past_max_duration_from_its_start() {
    let w = wanted(&plan("server"), "n1", Some("1h"));
    // Near the cap, the extension stops at it.
    let s = listed("a", &w, T0, T0, "2026-11-26T10:59:00Z");
    let actions = run(
        std::slice::from_ref(&w),
        std::slice::from_ref(&s),
        "2026-11-26T10:58:00Z",
    );
    let [Action::Extend { silence, .. }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(silence.ends_at, t("2026-11-26T11:00:00Z"));
    // At the cap, nothing more.
    let at_cap = listed("a", &w, T0, T0, "2026-11-26T11:00:00Z");
    assert_eq!(
        run(
            std::slice::from_ref(&w),
            std::slice::from_ref(&at_cap),
            "2026-11-26T10:59:00Z"
        ),
        []
    );
    // Once Alertmanager has expired it, the node still held gets no new one.
    let done = expired(at_cap);
    assert_eq!(run(&[w], &[done], "2026-11-26T11:30:00Z"), []);
}

#[test]
fn a_short_max_duration_caps_the_first_silence_too() {
    let w = wanted(&plan("server"), "n1", Some("2m"));
    let actions = run(&[w], &[], T0);
    let [Action::Create { silence, .. }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(silence.ends_at, t("2026-11-26T10:02:00Z"));
}

#[test]
fn a_node_given_back_has_its_silence_expired() {
    let w = wanted(&plan("server"), "n1", None);
    let s = listed("a", &w, T0, T0, "2026-11-26T10:05:00Z");
    let actions = run(&[], &[s], "2026-11-26T10:01:00Z");
    assert_eq!(
        actions,
        [Action::Expire {
            id: "a".into(),
            key: w.key(t(T0)),
        }]
    );
    // Already expired: nothing.
    let gone = expired(listed("a", &w, T0, T0, "2026-11-26T10:01:00Z"));
    assert_eq!(run(&[], &[gone], "2026-11-26T10:02:00Z"), []);
}

#[test]
fn after_a_restart_the_silence_alertmanager_has_is_kept_not_made_again() {
    let w = wanted(&reboot(), "n1", None);
    let s = listed("a", &w, T0, T0, "2026-11-26T10:05:00Z");
    // A new process: no memory of the hold.
    assert_eq!(
        run(
            std::slice::from_ref(&w),
            std::slice::from_ref(&s),
            "2026-11-26T10:01:00Z"
        ),
        []
    );
    // And one restarted after the node was given back expires it.
    let actions = run(&[], &[s], "2026-11-26T10:01:00Z");
    assert!(matches!(actions.as_slice(), [Action::Expire { id, .. }] if id == "a"));
}

#[test]
fn duplicates_are_expired_keeping_the_oldest() {
    let w = wanted(&reboot(), "n1", None);
    let old = listed("b", &w, T0, T0, "2026-11-26T10:05:00Z");
    let dup = listed(
        "a",
        &w,
        "2026-11-26T10:01:00Z",
        "2026-11-26T10:01:00Z",
        "2026-11-26T10:06:00Z",
    );
    let actions = run(&[w], &[dup, old], "2026-11-26T10:02:00Z");
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(matches!(&actions[0], Action::Expire { id, .. } if id == "a"));
}

#[test]
fn silences_of_others_are_never_touched() {
    let w = wanted(&reboot(), "n1", None);
    let mut person = listed("p", &w, T0, T0, "2026-11-26T12:00:00Z");
    person.created_by = "alice".into();
    let mut other_cluster = listed("o", &w, T0, T0, "2026-11-26T12:00:00Z");
    other_cluster.created_by = "slipway/system-upgrade@cluster-2".into();
    let mut edited = listed("e", &w, T0, T0, "2026-11-26T12:00:00Z");
    edited.comment = "kept by hand".into();
    let current = [person, other_cluster, edited];
    // Wanted: ours is made beside them.
    let actions = run(&[w], &current, "2026-11-26T10:01:00Z");
    assert!(
        matches!(actions.as_slice(), [Action::Create { .. }]),
        "{actions:?}"
    );
    // Not wanted: nothing is expired.
    assert_eq!(run(&[], &current, "2026-11-26T10:01:00Z"), []);
}

#[test]
fn a_silence_that_lapsed_while_the_controller_was_down_is_made_again_within_the_same_cap() {
    let w = wanted(&plan("server"), "n1", Some("1h"));
    let lapsed = expired(listed("a", &w, T0, T0, "2026-11-26T10:05:00Z"));
    let actions = run(&[w], &[lapsed], "2026-11-26T10:40:00Z");
    let [Action::Create { key, silence }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(key.since, t(T0), "the disruption's silencing began then");
    assert_eq!(silence.starts_at, t("2026-11-26T10:40:00Z"));
    assert_eq!(silence.ends_at, t("2026-11-26T10:45:00Z"));
    assert!(silence.comment.contains("since=2026-11-26T10:00:00Z"));
}

#[test]
fn a_capped_silence_is_told_from_a_new_disruption_of_the_node() {
    let w = wanted(&plan("server"), "n1", Some("1h"));
    let capped = expired(listed("a", &w, T0, T0, "2026-11-26T11:00:00Z"));
    let at = (plan("server"), "n1".to_string());
    // This process saw the hold begin before the capped silence: the same disruption.
    let seen = BTreeMap::from([(at.clone(), Seen::Began(t("2026-11-26T09:59:00Z")))]);
    let now = t("2026-11-26T13:00:00Z");
    assert_eq!(
        reconcile(
            std::slice::from_ref(&w),
            std::slice::from_ref(&capped),
            ME,
            &seen,
            now
        ),
        []
    );
    // This process saw the hold begin after it ended: a new disruption.
    let seen = BTreeMap::from([(at, Seen::Began(t("2026-11-26T12:30:00Z")))]);
    let actions = reconcile(
        std::slice::from_ref(&w),
        std::slice::from_ref(&capped),
        ME,
        &seen,
        now,
    );
    assert!(
        matches!(actions.as_slice(), [Action::Create { key, .. }] if key.since == now),
        "{actions:?}"
    );
    // Just restarted (no memory): a cap reached less than maxDuration ago counts as this one's...
    assert_eq!(
        run(
            std::slice::from_ref(&w),
            std::slice::from_ref(&capped),
            "2026-11-26T11:30:00Z"
        ),
        []
    );
    // ...one reached longer ago does not.
    let actions = run(&[w], &[capped], "2026-11-26T12:01:00Z");
    assert!(
        matches!(actions.as_slice(), [Action::Create { .. }]),
        "{actions:?}"
    );
}

#[test]
fn changed_matchers_update_the_silence_in_place() {
    let w = wanted(&reboot(), "n1", None);
    let s = listed("a", &w, T0, T0, "2026-11-26T10:05:00Z");
    let mut changed = spec(None);
    changed.matchers.truncate(1);
    let w2 = Wanted::of(&reboot(), "n1", &changed).expect("valid");
    let actions = run(&[w2], &[s], "2026-11-26T10:01:00Z");
    let [Action::Extend { silence, .. }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(silence.id.as_deref(), Some("a"));
    assert_eq!(silence.matchers.len(), 1);
}

#[test]
fn a_max_duration_lowered_below_what_a_silence_lasted_expires_it() {
    let w = wanted(&reboot(), "n1", Some("2h"));
    let s = listed("a", &w, T0, "2026-11-26T10:40:00Z", "2026-11-26T10:45:00Z");
    let shorter = wanted(&reboot(), "n1", Some("30m"));
    let actions = run(&[shorter], &[s], "2026-11-26T10:41:00Z");
    assert!(matches!(actions.as_slice(), [Action::Expire { id, .. }] if id == "a"));
}

#[test]
fn plans_sharing_a_node_hold_a_silence_each() {
    let a = wanted(&plan("server"), "n1", None);
    let b = wanted(&plan("agent"), "n1", None);
    let actions = run(&[a.clone(), b, a], &[], T0);
    let holders: Vec<&Holder> = actions.iter().map(|a| &a.key().holder).collect();
    assert_eq!(holders, [&plan("server"), &plan("agent")]);
}

#[test]
fn one_holder_on_two_nodes_is_two_silences_and_one_released_is_expired_alone() {
    let n1 = wanted(&reboot(), "n1", None);
    let n2 = wanted(&reboot(), "n2", None);
    let s1 = listed("a", &n1, T0, T0, "2026-11-26T10:05:00Z");
    let s2 = listed("b", &n2, T0, T0, "2026-11-26T10:05:00Z");
    let actions = run(&[n2], &[s1, s2], "2026-11-26T10:01:00Z");
    assert!(matches!(actions.as_slice(), [Action::Expire { id, .. }] if id == "a"));
}

#[test]
fn the_key_reads_back_and_rejects_what_is_not_one() {
    let key = Key {
        holder: Holder::NodeOp {
            namespace: "default".into(),
            name: "upgrade".into(),
        },
        node: "n-1".into(),
        since: t(T0),
    };
    let comment = format!("anything [with brackets] {}", key.text());
    assert_eq!(Key::parse(&comment), Some(key.clone()));
    for bad in [
        "no key",
        "[slipway holder=plan/a/b node=n1]",
        "[slipway holder=nothing/x node=n1 since=2026-11-26T10:00:00Z]",
        "[slipway holder=rebootpolicy/p node= since=2026-11-26T10:00:00Z]",
        "[slipway holder=rebootpolicy/p node=n1 since=yesterday]",
        "[slipway holder=rebootpolicy/p node=n1 since=2026-11-26T10:00:00Z extra=1]",
        "[slipway holder=rebootpolicy/p node=n1 since=2026-11-26T10:00:00Z] and after",
    ] {
        assert_eq!(Key::parse(bad), None, "{bad}");
    }
}

#[test]
fn an_invalid_spec_wants_nothing() {
    let mut s = spec(None);
    s.matchers.clear();
    assert_eq!(Wanted::of(&reboot(), "n1", &s), None);
    let mut s = spec(Some("forever"));
    s.comment = None;
    assert_eq!(Wanted::of(&reboot(), "n1", &s), None);
}

#[test]
fn the_tally_counts_ours_by_state() {
    let w = wanted(&reboot(), "n1", None);
    let a = listed("a", &w, T0, T0, "2026-11-26T10:05:00Z");
    let b = expired(listed("b", &w, T0, T0, "2026-11-26T10:05:00Z"));
    let mut foreign = a.clone();
    foreign.created_by = "alice".into();
    let counts = tally(&[a, b, foreign], ME);
    assert_eq!(counts[&SilenceState::Active], 1);
    assert_eq!(counts[&SilenceState::Expired], 1);
    assert_eq!(counts[&SilenceState::Pending], 0);
}

#[test]
fn a_listed_silence_reads_from_alertmanagers_json() {
    let json = serde_json::json!({
        "id": "5a7b", "status": {"state": "active"}, "updatedAt": "2026-11-26T10:00:00.123Z",
        "matchers": [{"name": "instance", "value": "n1", "isRegex": false, "isEqual": true}],
        "startsAt": "2026-11-26T10:00:00.123Z", "endsAt": "2026-11-26T10:05:00Z",
        "createdBy": ME, "comment": "c"
    });
    let s: Silence = serde_json::from_value(json).expect("a gettable silence");
    assert_eq!(s.status.state, SilenceState::Active);
    assert_eq!(s.ends_at, t("2026-11-26T10:05:00Z"));
}

#[test]
fn a_node_taken_again_soon_after_gets_a_silence_of_its_own_full_length() {
    let w = wanted(&reboot(), "n1", Some("1h"));
    // The last reboot's silence, expired when the node came back at 10:20.
    let before = expired(listed("a", &w, T0, T0, "2026-11-26T10:20:00Z"));
    let at = (reboot(), "n1".to_string());
    let seen = BTreeMap::from([(at, Seen::Began(t("2026-11-26T10:30:00Z")))]);
    let now = t("2026-11-26T10:30:01Z");
    let actions = reconcile(
        std::slice::from_ref(&w),
        std::slice::from_ref(&before),
        ME,
        &seen,
        now,
    );
    let [Action::Create { key, silence }] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(
        key.since, now,
        "a new disruption: maxDuration counts from now"
    );
    assert_eq!(silence.ends_at, t("2026-11-26T10:35:01Z"));
    // Held when the process started, it cannot tell: the earlier start (and cap) are kept.
    let actions = reconcile(&[w], &[before], ME, &none(), now);
    assert!(
        matches!(actions.as_slice(), [Action::Create { key, .. }] if key.since == t(T0)),
        "{actions:?}"
    );
}

#[test]
fn a_silence_made_or_expired_is_told_on_its_object_an_extension_is_not() {
    let w = wanted(&reboot(), "n1", Some("1h"));
    let made = run(std::slice::from_ref(&w), &[], T0);
    let event = event_of(&made[0], "abc", std::slice::from_ref(&w)).expect("an event");
    assert_eq!(event.reason, "SilenceCreated");
    assert!(
        event.message.contains("silence abc for node n1")
            && event.message.contains("until 2026-11-26T11:00:00Z at most"),
        "{}",
        event.message
    );
    let s = listed("abc", &w, T0, T0, "2026-11-26T10:05:00Z");
    let extended = run(
        std::slice::from_ref(&w),
        std::slice::from_ref(&s),
        "2026-11-26T10:04:00Z",
    );
    assert!(matches!(extended.as_slice(), [Action::Extend { .. }]));
    assert_eq!(event_of(&extended[0], "abc", &[w]), None);
    let expired = run(&[], &[s], "2026-11-26T10:04:00Z");
    let event = event_of(&expired[0], "abc", &[]).expect("an event");
    assert_eq!(event.reason, "SilenceExpired");
    assert_eq!(
        event.message,
        "Alertmanager silence abc for node n1 expired"
    );
}
