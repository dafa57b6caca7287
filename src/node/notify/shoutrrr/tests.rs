//! Each service's URL forms, as shoutrrr v0.8.0 reads them: the exact endpoint, headers and body,
//! and for each missing or wrong part an error that names it and no secret of the URL. The tokens
//! below are spelled `...S3cret...` so that a test can tell that none leaks.

use serde_json::{Value, json};

use super::*;

/// Every secret the URLs below carry.
const SECRETS: [&str; 12] = [
    "s3cretS3cretS3cretS3cret",
    "D1scordS3cret",
    "gcKeyS3cret",
    "gcTokS3cret",
    "mmS3cret",
    "rcS3cret",
    "T3legramS3cret",
    "Ts3cretTs3cret",
    "AS3cretGotify",
    "ntfyS3cret",
    "genS3cret",
    "pwS3cret",
];

fn no_secret(text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{s} in {text}");
    }
}

fn parse(url: &str) -> Result<Shoutrrr, ShoutrrrError> {
    let url = Url::parse(url).expect("a URL");
    assert!(is_shoutrrr(url.scheme()), "{url}");
    let got = requests(&url);
    if let Ok(s) = &got {
        no_secret(&format!("{s:?}"));
    }
    got
}

fn all(url: &str) -> Vec<Request> {
    parse(url).expect("valid").requests
}

fn one(url: &str) -> Request {
    let mut r = all(url);
    assert_eq!(r.len(), 1, "{url}");
    r.remove(0)
}

fn body(r: &Request, text: &str) -> Value {
    serde_json::from_str(&r.body.render(text)).expect("a JSON body")
}

/// The error of `url`, which says `want` and no secret.
fn refused(url: &str, want: &str) {
    let err = parse(url).expect_err(url).to_string();
    assert!(err.contains(want), "{err:?} does not say {want:?}");
    no_secret(&err);
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

const SLACK: &str = "https://hooks.slack.com/services/T00000000/B00000000/s3cretS3cretS3cretS3cret";

#[test]
fn slack_webhooks_in_the_token_form_and_the_hook_form() {
    for url in [
        "slack://T00000000/B00000000/s3cretS3cretS3cretS3cret",
        "slack://T00000000/B00000000/s3cretS3cretS3cretS3cret/",
        "slack://T00000000-B00000000-s3cretS3cretS3cretS3cret@webhook",
        "slack://hook:T00000000-B00000000-s3cretS3cretS3cretS3cret@webhook",
        "slack://hook-T00000000,B00000000,s3cretS3cretS3cretS3cret@webhook",
    ] {
        let r = one(url);
        assert_eq!(r.url, SLACK, "{url}");
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.content_type, "application/json");
        assert!(r.headers.is_empty() && r.basic_auth.is_none());
        assert_eq!(body(&r, "hi"), json!({"text": "hi"}), "{url}");
    }
    // The bot's name (the old form's user part, or the query), its icon, a title line, a thread.
    let r = one(
        "slack://ops-bot@T00000000/B00000000/s3cretS3cretS3cretS3cret?icon=ghost&title=Reboots&color=good",
    );
    assert_eq!(r.url, SLACK);
    assert_eq!(
        body(&r, "hi"),
        json!({"text": "Reboots\nhi", "username": "ops-bot", "icon_emoji": "ghost"})
    );
    let r = one(
        "slack://hook:T00000000-B00000000-s3cretS3cretS3cretS3cret@ops?BotName=b&icon_url=https://x.example/i.png&thread_ts=1.2",
    );
    assert_eq!(
        body(&r, "hi"),
        json!({"text": "hi", "username": "b", "icon_url": "https://x.example/i.png", "thread_ts": "1.2", "channel": "ops"})
    );
}

#[test]
fn slack_refuses_api_tokens_and_malformed_tokens() {
    refused(
        "slack://xoxb:123456789012-1234567890123-4mt0t4l1YL3g1T5L4cK70k3N@C001CH4NN3L",
        "a Slack API token (xoxb)",
    );
    refused("slack://T00000000/B00000000/short", "the token is not");
    refused(
        "slack://t00000000/B00000000/s3cretS3cretS3cretS3cret",
        "the token is not",
    );
    refused(
        "slack://T0000/B00000000/s3cretS3cretS3cretS3cret",
        "the token is not",
    );
    refused(
        "slack://T00000000/B00000000,s3cretS3cretS3cretS3cret",
        "separators differ",
    );
    refused("slack://webhook", "the token is not");
    refused(
        "slack://T00000000/B00000000/s3cretS3cretS3cretS3cret?colour=red",
        "\"colour\" is not a key of shoutrrr's slack",
    );
}

#[test]
fn discord_posts_content_that_pings_no_one() {
    let r = one("discord://D1scordS3cret@123456789012345678");
    assert_eq!(
        r.url,
        "https://discord.com/api/webhooks/123456789012345678/D1scordS3cret"
    );
    assert_eq!(
        body(&r, "hi"),
        json!({"content": "hi", "allowed_mentions": {"parse": []}})
    );
    let r = one(
        "discord://D1scordS3cret@123456789012345678?username=slipway&avatar=https://x.example/a.png&title=Reboots&color=0xff0000&splitLines=No&json=no",
    );
    assert_eq!(
        body(&r, "hi"),
        json!({"content": "Reboots\nhi", "username": "slipway", "avatar_url": "https://x.example/a.png", "allowed_mentions": {"parse": []}})
    );
    // Discord takes 2000 characters at most.
    let long = "é".repeat(2500);
    let content = body(&r, &long)["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(content.chars().count(), 2000);
    assert!(content.ends_with('…'));

    refused("discord://123456789012345678", "no token");
    refused("discord://D1scordS3cret@123456789012345678/raw", "/raw");
    refused("discord://D1scordS3cret@123456789012345678/x", "has a path");
    refused(
        "discord://D1scordS3cret@123456789012345678?json=yes",
        "json=yes",
    );
    refused(
        "discord://D1scordS3cret@123456789012345678?json=maybe",
        "json is not yes or no",
    );
    refused(
        "discord://D1scordS3cret@123456789012345678?colour=1",
        "\"colour\"",
    );
}

#[test]
fn google_chat_is_the_webhook_url_with_its_key_and_token() {
    for scheme in ["googlechat", "hangouts"] {
        let r = one(&format!(
            "{scheme}://chat.googleapis.com/v1/spaces/FOO/messages?token=gcTokS3cret&key=gcKeyS3cret&threadKey=x"
        ));
        assert_eq!(
            r.url,
            "https://chat.googleapis.com/v1/spaces/FOO/messages?key=gcKeyS3cret&token=gcTokS3cret"
        );
        assert_eq!(body(&r, "hi"), json!({"text": "hi"}));
    }
    refused(
        "googlechat://chat.googleapis.com/v1/spaces/FOO/messages?token=gcTokS3cret",
        "no key",
    );
    refused(
        "googlechat://chat.googleapis.com/v1/spaces/FOO/messages?key=gcKeyS3cret",
        "no token",
    );
}

#[test]
fn mattermost_posts_to_the_host_s_hooks_with_user_channel_and_icon() {
    let r = one("mattermost://chat.example.com/mmS3cret");
    assert_eq!(r.url, "https://chat.example.com/hooks/mmS3cret");
    assert_eq!(body(&r, "hi"), json!({"text": "hi"}));
    // shoutrrr v0.8.0 drops the port, and reads the first segment as the token.
    let r = one(
        "mattermost://bot@chat.example.com:8065/mmS3cret/ops/more?icon=https://x.example/i.png&title=t",
    );
    assert_eq!(r.url, "https://chat.example.com/hooks/mmS3cret");
    assert_eq!(
        body(&r, "hi"),
        json!({"text": "hi", "username": "bot", "channel": "ops", "icon_url": "https://x.example/i.png"})
    );
    let r = one("mattermost://chat.example.com/mmS3cret/?icon=ghost");
    assert_eq!(body(&r, "hi"), json!({"text": "hi", "icon_emoji": "ghost"}));
    refused("mattermost://chat.example.com", "no token");
    refused("mattermost://chat.example.com/", "no token");
    refused(
        "mattermost://chat.example.com/mmS3cret?channel=x",
        "\"channel\" is not a key",
    );
}

#[test]
fn rocket_chat_posts_to_the_two_token_hook_with_a_channel_or_a_user() {
    let r = one("rocketchat://chat.example.com/rcS3cretA/rcS3cretB");
    assert_eq!(r.url, "https://chat.example.com/hooks/rcS3cretA/rcS3cretB");
    assert_eq!(body(&r, "hi"), json!({"text": "hi"}));
    for (url, channel) in [
        (
            "rocketchat://bot@chat.example.com:3000/rcS3cretA/rcS3cretB/ops",
            "#ops",
        ),
        (
            "rocketchat://bot@chat.example.com:3000/rcS3cretA/rcS3cretB/@alice",
            "@alice",
        ),
        (
            "rocketchat://bot@chat.example.com:3000/rcS3cretA/rcS3cretB/#general",
            "#general",
        ),
    ] {
        let r = one(url);
        assert_eq!(
            r.url,
            "https://chat.example.com:3000/hooks/rcS3cretA/rcS3cretB"
        );
        assert_eq!(
            body(&r, "hi"),
            json!({"text": "hi", "username": "bot", "channel": channel}),
            "{url}"
        );
    }
    let r = one("rocketchat://chat.example.com/rcS3cretA/rcS3cretB/");
    assert_eq!(
        body(&r, "hi"),
        json!({"text": "hi"}),
        "an empty channel is none"
    );
    refused("rocketchat://chat.example.com/rcS3cretA", "no token");
    refused("rocketchat://chat.example.com/rcS3cretA/", "no token");
    refused("rocketchat://chat.example.com", "no token");
}

#[test]
fn telegram_sends_one_request_per_chat() {
    let r = all(
        "telegram://123456:T3legramS3cret@telegram?chats=@ops,-1001234:42&notification=no&preview=No&title=Reboots&parsemode=HTML",
    );
    assert_eq!(r.len(), 2);
    let endpoint = "https://api.telegram.org/bot123456:T3legramS3cret/sendMessage";
    assert!(r.iter().all(|r| r.url == endpoint));
    assert_eq!(
        body(&r[0], "hi"),
        json!({"chat_id": "@ops", "text": "Reboots\nhi", "disable_notification": true, "disable_web_page_preview": true})
    );
    assert_eq!(
        body(&r[1], "hi"),
        json!({"chat_id": "-1001234", "message_thread_id": 42, "text": "Reboots\nhi", "disable_notification": true, "disable_web_page_preview": true})
    );
    let r = one("telegram://123456:T3legramS3cret@telegram/?channels=-1001234");
    assert_eq!(
        body(&r, "hi"),
        json!({"chat_id": "-1001234", "text": "hi", "disable_notification": false, "disable_web_page_preview": false})
    );
    let long = "x".repeat(5000);
    assert_eq!(
        body(&r, &long)["text"].as_str().map(|t| t.chars().count()),
        Some(4096)
    );
    refused("telegram://123456:T3legramS3cret@telegram", "no chats");
    refused(
        "telegram://123456:T3legramS3cret@telegram?chats=",
        "no chats",
    );
    refused(
        "telegram://123456:T3legramS3cret@telegram?chats=a,,b",
        "is empty",
    );
    refused(
        "telegram://12x:T3legramS3cret@telegram?chats=1",
        "the bot token",
    );
    refused("telegram://123456@telegram?chats=1", "the bot token");
    refused(
        "telegram://123456:T3legramS3cret!@telegram?chats=1",
        "the bot token",
    );
    refused(
        "telegram://123456:T3legramS3cret@telegram?chats=1&parsemode=rich",
        "parsemode",
    );
    refused(
        "telegram://123456:T3legramS3cret@telegram?chats=1&silent=yes",
        "\"silent\"",
    );
}

#[test]
fn teams_connector_urls_are_refused_for_a_workflows_webhook() {
    // Office 365 connectors, which teams:// posts to, are retired: the error says what replaces
    // them, and no part of the URL.
    for url in [
        "teams://11111111-2222-4333-8444-555555555555@aaaaaaaa-bbbb-4ccc-9ddd-eeeeeeeeeeee/Ts3cretTs3cret/99999999-8888-4777-a666-555555555555",
        "teams+https://example.webhook.office.com/webhookb2/Ts3cretTs3cret",
    ] {
        let u = Url::parse(url).expect("a URL");
        assert!(is_shoutrrr(u.scheme()), "{url}");
        let e = requests(&u).expect_err("refused");
        assert_eq!(e, ShoutrrrError::RetiredTeams);
        let text = e.to_string();
        no_secret(&text);
        assert!(text.contains("--notify-format teams"), "{text}");
        assert_eq!(redacted(&u), format!("{}://...", u.scheme()));
    }
}

#[test]
fn gotify_posts_to_message_with_the_app_token_over_https_or_http() {
    let r = one("gotify://gotify.example.com/AS3cretGotify.x");
    assert_eq!(
        r.url,
        "https://gotify.example.com/message?token=AS3cretGotify.x"
    );
    assert_eq!(
        body(&r, "hi"),
        json!({"message": "hi", "title": "slipway", "priority": 0})
    );
    let r = one(
        "gotify://gotify.example.com:8443/path/to/gotify/AS3cretGotify.x/?title=Great+News&Priority=5&disabletls=yes",
    );
    assert_eq!(
        r.url,
        "http://gotify.example.com:8443/path/to/gotify/message?token=AS3cretGotify.x"
    );
    assert_eq!(
        body(&r, "hi"),
        json!({"message": "hi", "title": "Great News", "priority": 5})
    );
    refused(
        "gotify://gotify.example.com/AS3cretGotify",
        "application token",
    );
    refused(
        "gotify://gotify.example.com/BS3cretGotify.x",
        "application token",
    );
    refused("gotify://gotify.example.com/", "application token");
    refused(
        "gotify://gotify.example.com/AS3cretGotify.x?priority=high",
        "priority is not a number",
    );
    refused(
        "gotify://gotify.example.com/AS3cretGotify.x?disabletls=sometimes",
        "disabletls is not yes or no",
    );
}

#[test]
fn ntfy_posts_the_text_to_the_topic_with_its_options_as_headers() {
    let r = one("ntfy://ntfy.sh/reboots");
    assert_eq!(r.url, "https://ntfy.sh/reboots");
    assert_eq!(r.content_type, "text/plain; charset=utf-8");
    assert_eq!(r.body.render("hi"), "hi");
    assert!(r.headers.is_empty() && r.basic_auth.is_none());
    let r = one(
        "ntfy://alice:ntfyS3cret@ntfy.example.com:8080/reboots?scheme=http&priority=high&tags=warning,skull&title=Reboots&cache=no&firebase=no&click=https://x.example&icon=https://x.example/i.png&delay=10m",
    );
    assert_eq!(r.url, "http://ntfy.example.com:8080/reboots");
    assert_eq!(
        r.basic_auth,
        Some(("alice".to_string(), "ntfyS3cret".to_string()))
    );
    assert_eq!(
        r.headers,
        headers(&[
            ("Title", "Reboots"),
            ("Priority", "4"),
            ("Tags", "warning,skull"),
            ("Delay", "10m"),
            ("Click", "https://x.example"),
            ("X-Icon", "https://x.example/i.png"),
            ("Cache", "no"),
            ("Firebase", "no"),
        ])
    );
    // A user without a password is not sent, as shoutrrr does.
    assert_eq!(one("ntfy://alice@ntfy.sh/reboots").basic_auth, None);
    refused("ntfy://ntfy.sh", "no topic");
    refused("ntfy://ntfy.sh/", "no topic");
    refused(
        "ntfy://ntfy.sh/reboots?scheme=ftp",
        "scheme is not http or https",
    );
    refused("ntfy://ntfy.sh/reboots?priority=9", "priority is not");
    refused("ntfy://alice:ntfyS3cret@ntfy.sh/reboots?prio=1", "\"prio\"");
}

#[test]
fn generic_posts_the_text_or_a_json_object_and_forwards_the_rest_of_the_query() {
    let r = one(
        "generic://hooks.example.com/api/notify?@authorization=Bearer+genS3cret&foo=bar&__method=x&@xCustomHeader=1",
    );
    assert_eq!(r.method, Method::Post);
    assert_eq!(
        r.url,
        "https://hooks.example.com/api/notify?foo=bar&method=x"
    );
    assert_eq!(r.content_type, "application/json", "shoutrrr's default");
    assert_eq!(
        r.headers,
        headers(&[
            ("Accept", "application/json"),
            ("Authorization", "Bearer genS3cret"),
            ("X-Custom-Header", "1"),
        ])
    );
    assert_eq!(r.body.render("hi"), "hi");
    let r = one(
        "generic://user:pwS3cret@hooks.example.com:8080/n?disabletls=yes&template=json&messagekey=text&$source=slipway&method=put&contenttype=application/vnd.x%2Bjson&title=ignored",
    );
    assert_eq!(r.method, Method::Put);
    assert_eq!(r.url, "http://hooks.example.com:8080/n");
    assert_eq!(
        r.basic_auth,
        Some(("user".to_string(), "pwS3cret".to_string()))
    );
    assert_eq!(r.content_type, "application/vnd.x+json");
    assert_eq!(body(&r, "hi"), json!({"text": "hi", "source": "slipway"}));
    let r = one("generic://hooks.example.com/n?template=JSON");
    assert_eq!(body(&r, "hi"), json!({"message": "hi"}));
}

#[test]
fn generic_custom_urls_forward_their_whole_query_and_post_the_text() {
    let r = one("generic+http://127.0.0.1:9000/hook?template=json&b=2&a=1&@xCustom=1");
    assert_eq!(r.url, "http://127.0.0.1:9000/hook?a=1&b=2&template=json");
    assert_eq!(r.method, Method::Post);
    assert_eq!(r.body, Body::Text);
    assert_eq!(
        r.headers,
        headers(&[("Accept", "application/json"), ("X-Custom", "1")])
    );
    let r = one("generic+https://hooks.example.com/x/y");
    assert_eq!(r.url, "https://hooks.example.com/x/y");
    assert_eq!(r.basic_auth, None);
}

#[test]
fn generic_refuses_what_it_cannot_send() {
    refused(
        "generic://hooks.example.com/n?template=fancy",
        "template is not json",
    );
    refused(
        "generic://hooks.example.com/n?method=GET",
        "method is not POST",
    );
    refused(
        "generic://hooks.example.com/n?disabletls=maybe",
        "disabletls",
    );
    refused(
        "generic://hooks.example.com/n?@bad%20name=genS3cret",
        "is not a header name",
    );
    refused(
        "generic://hooks.example.com/n?@authorization=genS3cret%0A",
        "line break",
    );
    refused("generic:///n", "no host");
    refused("generic+ftp://hooks.example.com/n", "no custom URL");
}

#[test]
fn services_that_are_not_one_webhook_request_are_refused_with_what_to_do() {
    for url in [
        "smtp://user:pwS3cret@mail.example.com:587/?from=a@example.com&to=b@example.com",
        "pushover://shoutrrr:pwS3cret@user/",
        "matrix://user:pwS3cret@matrix.example.com/",
        "pushbullet://pwS3cret",
        "opsgenie://api.opsgenie.com/pwS3cret",
        "zulip://bot:pwS3cret@zulip.example.com",
        "join://shoutrrr:pwS3cret@join",
        "ifttt://pwS3cret/?events=a",
        "bark://:pwS3cret@api.day.app/",
        "logger://",
        "xmpp://user:pwS3cret@example.com",
    ] {
        let scheme = url.split(':').next().unwrap_or_default();
        refused(
            url,
            &format!("{scheme}:// is shoutrrr's {scheme} service, which slipway does not send"),
        );
        refused(url, "a bridge that takes a webhook");
    }
    refused(
        "slack+https://hooks.slack.com/x",
        "shoutrrr takes no custom URL",
    );
    assert!(!is_shoutrrr("ftp"));
    assert!(!is_shoutrrr("https"));
}

#[test]
fn a_shoutrrr_url_is_shown_without_its_tokens() {
    for (url, shown) in [
        (
            "slack://T00000000/B00000000/s3cretS3cretS3cretS3cret",
            "slack://...",
        ),
        (
            "discord://D1scordS3cret@123456789012345678",
            "discord://...",
        ),
        (
            "telegram://123456:T3legramS3cret@telegram?chats=1",
            "telegram://...",
        ),
        (
            "mattermost://bot@chat.example.com:8065/mmS3cret",
            "mattermost://chat.example.com:8065/...",
        ),
        (
            "ntfy://alice:ntfyS3cret@ntfy.sh/reboots",
            "ntfy://ntfy.sh/...",
        ),
        (
            "generic+http://u:pwS3cret@127.0.0.1:9000/x?@a=genS3cret",
            "generic+http://127.0.0.1:9000/...",
        ),
    ] {
        let u = Url::parse(url).expect("a URL");
        assert_eq!(redacted(&u), shown);
    }
}

#[test]
fn percent_escapes_are_decoded_as_go_decodes_them() {
    assert_eq!(
        decoded(Service::Generic, "path", "a%40b%2Fc%"),
        Ok("a@b/c%".into())
    );
    assert_eq!(decoded(Service::Generic, "path", "%4"), Ok("%4".into()));
    assert_eq!(
        decoded(Service::Generic, "path", "%zz%41"),
        Ok("%zzA".into())
    );
    assert!(decoded(Service::Generic, "path", "%ff").is_err());
    assert_eq!(generic::header_name("acceptLanguage"), "Accept-Language");
    assert_eq!(generic::header_name("x-custom"), "X-Custom");
    assert_eq!(generic::header_name("authorization"), "Authorization");
}
