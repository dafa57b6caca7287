use std::collections::BTreeSet;

use super::*;

fn at() -> Timestamp {
    "2026-11-26T05:00:00Z".parse().expect("a timestamp")
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn flags(targets: &[&str]) -> TargetFlags {
    TargetFlags {
        targets: targets.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn one(f: TargetFlags) -> Target {
    let mut t = targets(&f, no_env).expect("valid flags");
    assert_eq!(t.len(), 1);
    t.remove(0)
}

fn back(node: &str) -> Notification {
    notification(
        "RebootPolicy",
        None,
        "weekly",
        &Event::normal("Rebooted", format!("Node {node} rebooted and is back")).on(node),
        at(),
    )
    .expect("told")
}

#[test]
fn the_table_maps_every_kind_of_every_object_and_each_pair_once() {
    let pairs: BTreeSet<(&str, &str)> = TABLE.iter().map(|(k, r, _)| (k.name(), *r)).collect();
    assert_eq!(pairs.len(), TABLE.len(), "a pair is mapped twice");
    // Every notification kind comes from some object.
    for kind in Kind::ALL {
        assert!(TABLE.iter().any(|(_, _, k)| *k == kind), "{kind:?}");
    }
    // Each kind of object that goes through a node's steps tells them.
    for (object, kinds) in [
        (
            RebootPolicy,
            &[
                NodeStarted,
                NodeDrained,
                NodeRebooting,
                NodeBack,
                NodeFailed,
            ][..],
        ),
        (
            NodeMaintenance,
            &[NodeStarted, NodeDrained, NodeBack, NodeFailed],
        ),
        (
            NodeOp,
            &[
                NodeStarted,
                NodeRebooting,
                NodeBack,
                NodeFailed,
                RolloutCompleted,
            ],
        ),
        (Plan, &[NodeFailed, RolloutStopped, RolloutCompleted]),
    ] {
        for kind in kinds {
            assert!(
                TABLE.iter().any(|(o, _, k)| *o == object && k == kind),
                "{object:?} {kind:?}"
            );
        }
    }
}

#[test]
fn events_map_by_object_kind_and_reason_and_the_rest_is_not_told() {
    assert_eq!(kind_of(RebootPolicy, "Rebooting"), Some(NodeRebooting));
    assert_eq!(kind_of(NodeOp, "Rebooting"), Some(NodeRebooting));
    assert_eq!(
        kind_of(NodeMaintenance, "SucceedMaintenance"),
        Some(NodeDrained)
    );
    assert_eq!(kind_of(Plan, "Complete"), Some(RolloutCompleted));
    // The same reason on another kind is not the same thing.
    assert_eq!(kind_of(Plan, "Rebooting"), None);
    assert_eq!(kind_of(NodeOp, "Draining"), None);
    // Reasons no table row names: progress, waits, hooks.
    for reason in [
        "Progress",
        "SyncJob",
        "Waiting",
        "HookStarted",
        "FailuresReset",
    ] {
        assert_eq!(kind_of(Plan, reason), None, "{reason}");
    }
    let e = Event::normal("Rebooted", "x").on("n1");
    assert!(notification("NodeOpUpgrade", Some("ns"), "u", &e, at()).is_none());
    assert!(
        notification(
            "RebootPolicy",
            None,
            "p",
            &Event::normal("Pending", "x"),
            at()
        )
        .is_none()
    );
}

#[test]
fn a_notification_carries_the_event_and_its_object() {
    let e = Event::warning("NodeFailed", "Node n2: Job failed").on("n2");
    let n = notification("NodeOp", Some("ops"), "patch", &e, at()).expect("told");
    assert_eq!(
        n,
        Notification {
            kind: NodeFailed,
            object: Object {
                kind: NodeOp,
                namespace: Some("ops".into()),
                name: "patch".into(),
            },
            node: Some("n2".into()),
            reason: "NodeFailed",
            message: "Node n2: Job failed".into(),
            warning: true,
            time: at(),
        }
    );
    assert_eq!(object_name(&n.object), "ops/patch");
    assert_eq!(object_name(&back("a").object), "weekly");
}

#[test]
fn kinds_have_names_that_parse_back() {
    for kind in Kind::ALL {
        assert_eq!(Kind::parse(kind.name()), Some(kind));
    }
    assert_eq!(Kind::parse("node-gone"), None);
}

#[test]
fn templates_fill_every_placeholder_and_keep_escaped_braces() {
    let t = Template::parse(
        "{kind} {node} {object} {objectKind} {namespace}|{name} {reason} {time} {{literal}} {message}",
    )
    .expect("a template");
    let e = Event::normal("NodeStarted", "go").on("n1");
    let n = notification("NodeOp", Some("ops"), "patch", &e, at()).expect("told");
    assert_eq!(
        t.render(&n),
        "node-started n1 ops/patch NodeOp ops|patch NodeStarted 2026-11-26T05:00:00Z {literal} go"
    );
    // No node, no namespace: empty.
    let done = notification(
        "Plan",
        None,
        "k3s",
        &Event::normal("Complete", "done"),
        at(),
    )
    .expect("told");
    assert_eq!(
        Template::parse("[{node}][{namespace}]")
            .expect("ok")
            .render(&done),
        "[][]"
    );
    assert_eq!(Template::parse("").expect("ok").render(&done), "");
    assert_eq!(
        Template::parse("ünïcode {name}").expect("ok").render(&done),
        "ünïcode k3s"
    );
}

#[test]
fn bad_templates_say_what_is_wrong() {
    assert_eq!(
        Template::parse("Node {host} is back"),
        Err(TemplateError::Unknown("host".into()))
    );
    assert_eq!(
        Template::parse("Node {node"),
        Err(TemplateError::Unclosed(5))
    );
    assert_eq!(Template::parse("a } b"), Err(TemplateError::Unopened(2)));
    assert_eq!(
        Template::parse("{}"),
        Err(TemplateError::Unknown(String::new()))
    );
    let message = TemplateError::Unknown("host".into()).to_string();
    assert!(
        message.contains("{host}") && message.contains("{node}"),
        "{message}"
    );
}

#[test]
fn every_default_template_parses_and_names_the_node_when_there_is_one() {
    for kind in Kind::ALL {
        let t = Template::parse(kind.default_template()).expect("a default template");
        let node_kind = kind.name().starts_with("node-");
        let n = Notification { kind, ..back("n7") };
        let text = t.render(&n);
        assert_eq!(
            text.contains("n7"),
            node_kind || text.contains("Node n7"),
            "{text}"
        );
        assert!(text.contains("RebootPolicy weekly"), "{text}");
    }
    let target = one(flags(&["ops=https://chat.example/hook"]));
    assert_eq!(
        text(&target, &back("n7")),
        "Node n7: back from RebootPolicy weekly. Node n7 rebooted and is back"
    );
}

#[test]
fn a_target_s_own_template_is_used_for_its_kind_only() {
    let target = one(TargetFlags {
        templates: vec!["ops/node-back=:white_check_mark: {node} is back".into()],
        ..flags(&["ops=https://chat.example/hook"])
    });
    assert_eq!(text(&target, &back("n1")), ":white_check_mark: n1 is back");
    let started = Notification {
        kind: NodeStarted,
        ..back("n1")
    };
    assert!(text(&target, &started).starts_with("Node n1: started"));
}

#[test]
fn values_from_the_cluster_neither_ping_nor_link_but_the_template_may() {
    // A hold reason a node wrote reaches the message: in chat it must read as text.
    let hostile = "<!channel> @here see [docs](https://evil.example) *now*\n- x";
    let n = notification(
        "RebootPolicy",
        None,
        "weekly",
        &Event::normal("Rebooted", hostile).on("n1"),
        at(),
    )
    .expect("told");
    let mut target = one(flags(&["ops=https://chat.example/hook"]));
    let template = Template::parse("<!here> {message}").expect("a template");
    target.templates.insert(n.kind, template);

    target.format = Format::Slack;
    let slack = text(&target, &n);
    assert_eq!(
        slack,
        "<!here> &lt;!channel&gt; @\u{200B}here see [docs](https://evil.example) *now* - x"
    );
    target.format = Format::Teams;
    let teams = text(&target, &n);
    assert_eq!(
        teams,
        "<!here> \\<!channel\\> @here see \\[docs\\]\\(https://evil.example\\) \\*now\\* - x"
    );
    // slipway's JSON carries the value as it is: its reader escapes for where it shows it.
    target.format = Format::Json;
    assert_eq!(payload(&target, &n)["message"], hostile);
    assert_eq!(text(&target, &n), format!("<!here> {hostile}"));
}

#[test]
fn each_format_posts_its_own_body() {
    let mut target = one(flags(&["ops=https://chat.example/hook"]));
    let n = back("n1");
    let text = "Node n1: back from RebootPolicy weekly. Node n1 rebooted and is back";

    target.format = Format::Slack;
    assert_eq!(payload(&target, &n), json!({ "text": text }));

    target.format = Format::Teams;
    let teams = payload(&target, &n);
    assert_eq!(teams["type"], "message");
    let attachment = &teams["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(attachment["content"]["type"], "AdaptiveCard");
    assert_eq!(attachment["content"]["body"][0]["type"], "TextBlock");
    assert_eq!(attachment["content"]["body"][0]["text"], text);
    assert_eq!(attachment["content"]["body"][0]["color"], "Default");
    let failed = Notification {
        warning: true,
        ..n.clone()
    };
    assert_eq!(
        payload(&target, &failed)["attachments"][0]["content"]["body"][0]["color"],
        "Attention"
    );

    target.format = Format::Json;
    assert_eq!(
        payload(&target, &n),
        json!({
            "kind": "node-back",
            "object": {"kind": "RebootPolicy", "namespace": null, "name": "weekly"},
            "node": "n1",
            "reason": "Rebooted",
            "message": "Node n1 rebooted and is back",
            "warning": false,
            "time": "2026-11-26T05:00:00Z",
            "text": text,
        })
    );
}

#[test]
fn the_flags_make_targets_with_defaults() {
    let got = targets(
        &TargetFlags {
            targets: vec![
                "slack=https://hooks.slack.example/services/T/B/secret".into(),
                "pager=http://pager.ops.svc:8080/hook".into(),
            ],
            formats: vec!["slack=slack".into()],
            headers: vec!["pager=X-Team:  platform ".into()],
            header_envs: vec!["pager=Authorization=PAGER_TOKEN".into()],
            kinds: vec!["pager=node-failed, rollout-stopped".into()],
            templates: vec!["slack/node-back={node} is back".into()],
        },
        |v| (v == "PAGER_TOKEN").then(|| "Bearer s3cret\n".to_string()),
    )
    .expect("valid");
    assert_eq!(got.len(), 2);
    let (slack, pager) = (&got[0], &got[1]);
    assert_eq!(slack.format, Format::Slack);
    assert_eq!(slack.kinds.len(), Kind::ALL.len(), "every kind by default");
    assert!(slack.templates.contains_key(&NodeBack));
    assert_eq!(pager.format, Format::Json, "json by default");
    assert_eq!(
        pager.headers,
        vec![
            ("X-Team".to_string(), "platform".to_string()),
            ("Authorization".to_string(), "Bearer s3cret".to_string()),
        ]
    );
    assert!(pager.wants(NodeFailed) && pager.wants(RolloutStopped) && !pager.wants(NodeBack));
    // Neither the token in the path nor the header's value shows in a log line.
    let debug = format!("{got:?}");
    assert!(
        !debug.contains("secret") && !debug.contains("s3cret"),
        "{debug}"
    );
    assert!(debug.contains("hooks.slack.example") && debug.contains("Authorization"));
    assert!(
        targets(&TargetFlags::default(), no_env)
            .expect("ok")
            .is_empty()
    );
}

#[test]
fn bad_flags_are_refused_naming_the_flag_and_the_target() {
    let cases: Vec<(TargetFlags, &str)> = vec![
        (
            flags(&["https://x.example"]),
            "--notify \"https://x.example\": want NAME=URL",
        ),
        (flags(&["ops="]), "want NAME=URL"),
        (
            flags(&["Ops=https://x.example"]),
            "--notify Ops=...: a target's name",
        ),
        (
            flags(&["ops=https://a.example", "ops=https://b.example"]),
            "--notify ops=...: the target is given twice",
        ),
        (
            flags(&["ops=ftp://x.example/"]),
            "--notify ops=...: the scheme is \"ftp\"",
        ),
        (flags(&["ops=not a url"]), "--notify ops=...: not a URL"),
        (
            TargetFlags {
                formats: vec!["ops=discord".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-format ops=discord: not a format",
        ),
        (
            TargetFlags {
                formats: vec!["chat=slack".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-format chat...: no target chat",
        ),
        (
            TargetFlags {
                formats: vec!["ops=slack".into(), "ops=json".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-format ops=...: given twice",
        ),
        (
            TargetFlags {
                kinds: vec!["ops=node-back,node-gone".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-kinds ops=...: \"node-gone\" is not a notification kind",
        ),
        (
            TargetFlags {
                templates: vec!["ops/node-back={host}".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-template ops/node-back=...: unknown placeholder {host}",
        ),
        (
            TargetFlags {
                templates: vec!["ops=text".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-template \"ops=text\": want NAME/KIND=TEXT",
        ),
        (
            TargetFlags {
                templates: vec!["ops/node-gone=text".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-template ops=...: \"node-gone\" is not a notification kind",
        ),
        (
            TargetFlags {
                templates: vec!["ops/node-back=a".into(), "ops/node-back=b".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-template ops/node-back=...: given twice",
        ),
        (
            TargetFlags {
                headers: vec!["ops=Bad Header: x".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-header ops=...: \"Bad Header\" is not a header name",
        ),
        (
            TargetFlags {
                headers: vec!["ops=NoColon".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-header \"ops=...\": want NAME=Header: value",
        ),
        (
            TargetFlags {
                header_envs: vec!["ops=Authorization=MISSING".into()],
                ..flags(&["ops=https://x.example"])
            },
            "--notify-header-from-env ops=Authorization=MISSING: MISSING is not set",
        ),
    ];
    for (f, want) in cases {
        let err = targets(&f, no_env).expect_err(want).to_string();
        assert!(err.contains(want), "{err:?} does not say {want:?}");
    }
    // A header's value never appears in an error, even a malformed one.
    let f = TargetFlags {
        headers: vec!["ops=Authorization: Bearer s3cret\u{7}".into()],
        ..flags(&["ops=https://x.example"])
    };
    let err = targets(&f, no_env)
        .expect_err("control character")
        .to_string();
    assert!(
        err.contains("Authorization") && !err.contains("s3cret"),
        "{err}"
    );
    let f = TargetFlags {
        headers: vec!["ops=Bearer s3cret".into()],
        ..flags(&["ops=https://x.example"])
    };
    let err = targets(&f, no_env).expect_err("no colon").to_string();
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn success_is_delivered_server_errors_and_throttling_are_retried_other_refusals_given_up() {
    assert_eq!(next_step(Answer::Status(200), 1), Next::Delivered);
    assert_eq!(next_step(Answer::Status(204), 3), Next::Delivered);
    for retried in [
        Answer::Unreachable,
        Answer::Status(500),
        Answer::Status(503),
        Answer::Status(429),
        Answer::Status(408),
    ] {
        assert_eq!(
            next_step(retried, 1),
            Next::Retry(Duration::from_secs(1)),
            "{retried:?}"
        );
    }
    for refused in [400, 401, 403, 404, 410, 413, 301, 302, 100] {
        assert_eq!(
            next_step(Answer::Status(refused), 1),
            Next::GiveUp,
            "{refused}"
        );
    }
}

#[test]
fn backoff_doubles_up_to_its_cap_and_never_overflows() {
    let waits: Vec<u64> = (1..=7).map(|a| backoff(a).as_secs()).collect();
    assert_eq!(waits, vec![1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(backoff(0), FIRST_BACKOFF);
    assert_eq!(backoff(40), MAX_BACKOFF);
    assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    assert_eq!(
        next_step(Answer::Unreachable, 100),
        Next::Retry(MAX_BACKOFF)
    );
}

#[test]
fn a_target_is_failing_once_its_oldest_notification_waited_long_enough() {
    let after = Duration::from_secs(300);
    assert!(!failing(None, after), "nothing waits");
    assert!(!failing(Some(Duration::from_secs(299)), after));
    assert!(failing(Some(Duration::from_secs(300)), after));
}

#[test]
fn a_full_queue_drops_its_oldest_and_keeps_the_order() {
    let mut q = Queue::new(3);
    assert!(q.is_empty());
    for i in 0..3 {
        assert_eq!(q.push(i), None);
    }
    assert_eq!(q.push(3), Some(0), "the oldest goes");
    assert_eq!(q.push(4), Some(1));
    assert_eq!(q.len(), 3);
    let mut out = Vec::new();
    while let Some((id, item)) = q.front() {
        let item = *item;
        assert_eq!(q.done(id), Some(item));
        out.push(item);
    }
    assert_eq!(out, vec![2, 3, 4]);
    assert_eq!(
        Queue::<u8>::new(0).capacity,
        1,
        "a queue holds one at least"
    );
}

#[test]
fn an_item_dropped_while_it_was_sent_does_not_take_the_next_one_with_it() {
    let mut q = Queue::new(2);
    q.push("a");
    q.push("b");
    let (sending, _) = q.front().expect("a");
    // While "a" is on the wire, the queue fills: "a" is dropped.
    assert_eq!(q.push("c"), Some("a"));
    // "a" is answered: "b" stays first.
    assert_eq!(q.done(sending), None);
    assert_eq!(q.front().map(|(_, i)| *i), Some("b"));
}

const SLACK_TOKEN: &str = "T00000000/B00000000/s3cretS3cretS3cretS3cret";

#[test]
fn a_shoutrrr_url_is_a_target_whose_service_decides_the_requests_and_the_body() {
    let got = targets(
        &TargetFlags {
            targets: vec![
                format!("chat=slack://{SLACK_TOKEN}"),
                "tg=telegram://123456:T3legramS3cret@telegram?chats=@ops,-100123".into(),
                "hook=https://hooks.example/x".into(),
            ],
            headers: vec!["tg=X-Proxy: p4ss".into()],
            ..Default::default()
        },
        no_env,
    )
    .expect("valid");
    let (chat, tg, hook) = (&got[0], &got[1], &got[2]);
    assert_eq!(
        chat.service.as_ref().map(|s| s.service),
        Some(Service::Slack)
    );
    assert_eq!(hook.service, None);
    let n = Notification {
        message: "<!channel> *now*".into(),
        ..back("n1")
    };
    // A webhook: one POST of its format's payload, Content-Type first, then its own headers.
    let sent = outgoing(hook, &n);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].url, "https://hooks.example/x");
    assert_eq!(sent[0].body, payload(hook, &n).to_string());
    assert_eq!(
        sent[0].headers,
        vec![("Content-Type".to_string(), "application/json".to_string())]
    );
    // Slack: Slack's escaping of the cluster's values.
    let sent = outgoing(chat, &n);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].url,
        format!("https://hooks.slack.com/services/{SLACK_TOKEN}")
    );
    let body: Value = serde_json::from_str(&sent[0].body).expect("json");
    assert_eq!(
        body,
        json!({"text": "Node n1: back from RebootPolicy weekly. &lt;!channel&gt; *now*"})
    );
    // Telegram: one request per chat, plain text that mentions nobody, the target's own header
    // after the service's.
    let sent = outgoing(tg, &n);
    assert_eq!(sent.len(), 2);
    for (request, chat) in sent.iter().zip(["@ops", "-100123"]) {
        let body: Value = serde_json::from_str(&request.body).expect("json");
        assert_eq!(body["chat_id"], chat);
        assert_eq!(
            body["text"],
            "Node n1: back from RebootPolicy weekly. <\u{200B}!channel> *now*"
        );
        assert_eq!(
            request.headers,
            vec![
                ("Content-Type".to_string(), "application/json".to_string()),
                ("X-Proxy".to_string(), "p4ss".to_string()),
            ]
        );
    }
    // Neither a token nor a header's value shows in a log line.
    let debug = format!("{got:?} {:?}", outgoing(tg, &n));
    for secret in ["s3cretS3cret", "T3legramS3cret", "B00000000", "p4ss"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
    assert!(debug.contains("slack://...") && debug.contains("telegram://..."));
    assert_eq!(redacted_url(&chat.url), "slack://...");
}

#[test]
fn each_service_escapes_the_cluster_s_values_for_its_own_markup() {
    let n = Notification {
        message: "<@U1> *now*".into(),
        ..back("n1")
    };
    for (url, want) in [
        (
            "mattermost://chat.example/t0ken",
            "&lt;@\u{200B}U1&gt; *now*",
        ),
        ("rocketchat://chat.example/a/b", "&lt;@\u{200B}U1&gt; *now*"),
        ("discord://t0ken@123", "\\<@U1\\> \\*now\\*"),
        ("ntfy://ntfy.sh/reboots", "<@U1> *now*"),
        ("generic+https://hooks.example/x", "<@U1> *now*"),
        // Telegram's @username and Google Chat's <users/all> mention from plain text.
        (
            "telegram://123456:t0ken@telegram?chats=1",
            "<\u{200B}@\u{200B}U1> *now*",
        ),
        (
            "googlechat://chat.googleapis.com/v1/spaces/S/messages?key=k&token=t",
            "<\u{200B}@\u{200B}U1> *now*",
        ),
    ] {
        let target = one(flags(&[&format!("ops={url}")]));
        let text = text(&target, &n);
        assert!(text.ends_with(want), "{url}: {text}");
    }
}

#[test]
fn shoutrrr_urls_are_refused_naming_the_flag_the_target_and_the_service() {
    let cases: Vec<(TargetFlags, &str)> = vec![
        (
            TargetFlags {
                formats: vec!["chat=slack".into()],
                ..flags(&[&format!("chat=slack://{SLACK_TOKEN}")])
            },
            "--notify-format chat=...: chat is a shoutrrr slack:// URL, whose service decides the body: drop --notify-format chat",
        ),
        (
            flags(&["mail=smtp://user:pwS3cret@mail.example:587/?to=ops@example.com"]),
            "--notify mail=...: smtp:// is shoutrrr's smtp service, which slipway does not send",
        ),
        (
            flags(&["po=pushover://shoutrrr:pwS3cret@user/"]),
            "(Apprise's API server, a Matrix or mail bridge) instead",
        ),
        (
            flags(&["tg=telegram://123456:pwS3cret@telegram"]),
            "--notify tg=...: telegram://...: no chats",
        ),
        (
            flags(&["chat=slack://xoxb:123456789012-1234567890123-pwS3cretpwS3cretpwS3cret@C1"]),
            "--notify chat=...: slack://...: a Slack API token (xoxb)",
        ),
        (
            flags(&["x=gopher://x.example/"]),
            "--notify x=...: the scheme is \"gopher\": not http, https or a shoutrrr service slipway sends (slack, discord,",
        ),
    ];
    for (f, want) in cases {
        let err = targets(&f, no_env).expect_err(want).to_string();
        assert!(err.contains(want), "{err:?} does not say {want:?}");
        assert!(
            !err.contains("pwS3cret") && !err.contains("s3cretS3cret"),
            "{err}"
        );
    }
}

#[test]
fn each_request_of_a_notification_is_sent_until_answered_for_good_and_once() {
    let retry = Next::Retry(FIRST_BACKOFF);
    let send = |part, attempt| Turn::Send { part, attempt };
    let mut s = Sending::default();
    // One request: retried with a growing attempt, then delivered; then the notification is done.
    assert_eq!(s.turn(1, 1), send(0, 1));
    s.answered(retry);
    assert_eq!(s.turn(1, 1), send(0, 2));
    s.answered(Next::Delivered);
    assert_eq!(s.turn(1, 1), Turn::Done { refused: false });

    // Three requests (three chats): the first delivered is not sent again while the second is
    // retried; the second refused for good does not stop the third; the whole counts as refused.
    assert_eq!(s.turn(2, 3), send(0, 1));
    s.answered(Next::Delivered);
    assert_eq!(s.turn(2, 3), send(1, 1));
    s.answered(retry);
    assert_eq!(s.turn(2, 3), send(1, 2));
    s.answered(Next::GiveUp);
    assert_eq!(s.turn(2, 3), send(2, 1));
    s.answered(Next::Delivered);
    assert_eq!(s.turn(2, 3), Turn::Done { refused: true });

    // The front changed mid-way (dropped from a full queue): the new one starts at its first
    // request, its first attempt, nothing refused.
    assert_eq!(s.turn(3, 2), send(0, 1));
    s.answered(Next::GiveUp);
    assert_eq!(s.turn(4, 2), send(0, 1));
    s.answered(Next::Delivered);
    assert_eq!(s.turn(4, 2), send(1, 1));
    s.answered(Next::Delivered);
    assert_eq!(s.turn(4, 2), Turn::Done { refused: false });

    // A notification of no request is done at once.
    assert_eq!(s.turn(5, 0), Turn::Done { refused: false });
}
