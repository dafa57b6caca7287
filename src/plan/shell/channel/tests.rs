use std::sync::atomic::AtomicUsize;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

const K3S_TAG: &str = "https://github.com/k3s-io/k3s/releases/tag/v1.30.1+k3s1";

fn head<'a>(status: u16, location: Option<&'a str>) -> ResponseHead<'a> {
    ResponseHead {
        proto: "HTTP/1.1",
        status,
        reason: None,
        location,
    }
}

fn interpret(url: &str, status: u16, location: Option<&str>) -> Result<String, ChannelError> {
    interpret_response(url, &head(status, location))
}

#[test]
fn go_path_base_matches_go() {
    for (path, base) in [
        ("", "."),
        ("/", "/"),
        ("///", "/"),
        ("a", "a"),
        ("/a", "a"),
        ("a/b/", "b"),
        ("a/b//", "b"),
        ("https://update.k3s.io/v1-release/channels/stable", "stable"),
        ("https://x/channels/stable?arch=amd64", "stable?arch=amd64"),
        ("https://x/y?q=1/2", "2"),
        ("https://x", "x"),
    ] {
        assert_eq!(go_path_base(path), base, "{path:?}");
    }
}

#[test]
fn found_gives_the_last_element_of_the_location_path() {
    let url = "https://update.k3s.io/v1-release/channels/stable";
    let cases = [
        (K3S_TAG, "v1.30.1+k3s1"),
        // Relative locations resolve against the channel URL, as Go's `Response.Location`.
        ("/local/test", "test"),
        ("v1.31.0+k3s1", "v1.31.0+k3s1"),
        ("../tags/v2", "v2"),
        ("//mirror.example/tags/v3", "v3"),
        // Only the path counts.
        ("https://x/tags/v1.2?arch=amd64#top", "v1.2"),
        // Go's `URL.Path` is decoded.
        ("https://x/tag/v1.30.1%2Bk3s1", "v1.30.1+k3s1"),
        ("https://x/tag/v1%2F2", "2"),
        ("https://x/tag/v1/", "v1"),
        ("https://x/", "/"),
    ];
    for (location, want) in cases {
        assert_eq!(
            interpret(url, 302, Some(location)).as_deref(),
            Ok(want),
            "{location}"
        );
    }
}

#[test]
fn found_without_a_usable_location_is_an_error() {
    let url = "https://x/channels/stable";
    for location in [None, Some("")] {
        let e = interpret(url, 302, location).unwrap_err();
        assert_eq!(e, ChannelError::NoLocation);
        assert_eq!(e.to_string(), "http: no Location header in response");
    }
    for location in ["https://x/tag/%zz", "https://x/tag/v1%2", "http://[::1/x"] {
        assert!(
            matches!(
                interpret(url, 302, Some(location)),
                Err(ChannelError::InvalidLocation { .. })
            ),
            "{location}"
        );
    }
}

#[test]
fn other_success_and_redirect_statuses_give_the_base_of_the_channel_url() {
    let url = "https://x/channels/v1.29.4+k3s1";
    for status in [200, 201, 204, 299, 300, 301, 303, 304, 307, 308, 399] {
        // The Location of a non-302 redirect is ignored, as in SUC.
        assert_eq!(
            interpret(url, status, Some(K3S_TAG)).as_deref(),
            Ok("v1.29.4+k3s1"),
            "{status}"
        );
    }
    // SUC quirk, kept: the query string stays in.
    assert_eq!(
        interpret("https://x/channels/stable?arch=amd64", 200, None).as_deref(),
        Ok("stable?arch=amd64")
    );
    assert_eq!(
        interpret("https://x/channels/latest/", 200, None).as_deref(),
        Ok("latest")
    );
}

#[test]
fn other_statuses_are_errors_with_suc_text() {
    let url = "https://x/channels/stable";
    let text = |h: ResponseHead| interpret_response(url, &h).unwrap_err().to_string();
    assert_eq!(
        text(head(404, None)),
        "unexpected response: HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        text(head(503, None)),
        "unexpected response: HTTP/1.1 503 Service Unavailable"
    );
    assert_eq!(
        text(head(101, None)),
        "unexpected response: HTTP/1.1 101 Switching Protocols"
    );
    assert_eq!(
        text(head(400, Some(K3S_TAG))),
        "unexpected response: HTTP/1.1 400 Bad Request"
    );
    // Go prints the reason phrase the server sent.
    let custom = ResponseHead {
        reason: Some("Nope"),
        ..head(404, None)
    };
    assert_eq!(text(custom), "unexpected response: HTTP/1.1 404 Nope");
    let bare = ResponseHead {
        reason: Some(""),
        ..head(404, None)
    };
    assert_eq!(text(bare), "unexpected response: HTTP/1.1 404");
    assert_eq!(text(head(599, None)), "unexpected response: HTTP/1.1 599");
    let h2 = ResponseHead {
        proto: "HTTP/2.0",
        ..head(500, None)
    };
    assert_eq!(
        text(h2),
        "unexpected response: HTTP/2.0 500 Internal Server Error"
    );
}

/// What the loopback server does with each request it reads.
#[derive(Clone)]
enum Reply {
    /// Send this text, then close.
    Raw(String),
    /// Send these bytes, then close.
    Bytes(Vec<u8>),
    /// Wait, then send the bytes and close.
    Delayed(Duration, String),
    /// Read the request and never answer.
    Hang,
    /// Announce a 10 GB body and stream it until the client goes away.
    Endless,
    /// Send a head announcing a body, then nothing.
    StalledBody,
}

struct Server {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
    /// Bytes of body the server managed to hand to the kernel.
    body_bytes: Arc<AtomicUsize>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn response(status_line: &str, headers: &[&str]) -> String {
    let mut text = format!("HTTP/1.1 {status_line}\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    text
}

async fn serve(reply: Reply) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let body_bytes = Arc::new(AtomicUsize::new(0));
    let (seen, sent) = (requests.clone(), body_bytes.clone());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(answer(sock, reply.clone(), seen.clone(), sent.clone()));
        }
    });
    Server {
        base,
        requests,
        body_bytes,
    }
}

async fn answer(
    mut sock: TcpStream,
    reply: Reply,
    seen: Arc<Mutex<Vec<String>>>,
    sent: Arc<AtomicUsize>,
) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    // A TLS ClientHello (first byte 0x16) gets the plain-text answer at once.
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.first() != Some(&0x16) {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    seen.lock()
        .unwrap()
        .push(String::from_utf8_lossy(&request).into_owned());
    match reply {
        Reply::Raw(text) => {
            let _ = sock.write_all(text.as_bytes()).await;
        }
        Reply::Bytes(bytes) => {
            let _ = sock.write_all(&bytes).await;
        }
        Reply::Delayed(delay, text) => {
            tokio::time::sleep(delay).await;
            let _ = sock.write_all(text.as_bytes()).await;
        }
        Reply::Hang => std::future::pending().await,
        Reply::Endless => {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n";
            if sock.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'x'; 64 * 1024];
            while sock.write_all(&chunk).await.is_ok() {
                sent.fetch_add(chunk.len(), Ordering::Relaxed);
            }
        }
        Reply::StalledBody => {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
            let _ = sock.write_all(head.as_bytes()).await;
            std::future::pending().await
        }
    }
}

fn client(config: ChannelConfig) -> ChannelClient {
    let _ = rustls::crypto::ring::default_provider().install_default();
    ChannelClient::new(
        "0a1b2c3d-cluster",
        &ChannelConfig {
            env_proxy: false,
            ..config
        },
    )
    .unwrap()
}

fn header<'a>(request: &'a str, name: &str) -> Option<&'a str> {
    request.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn follows_nothing_and_reads_the_302_location() {
    let c = client(ChannelConfig::default());
    let absolute = serve(Reply::Raw(response(
        "302 Found",
        &[&format!("Location: {K3S_TAG}")],
    )))
    .await;
    assert_eq!(
        c.fetch(&absolute.url("/v1-release/channels/stable"), "")
            .await
            .as_deref(),
        Ok("v1.30.1+k3s1")
    );
    // SUC's e2e case: a relative Location.
    let relative = serve(Reply::Raw(response(
        "302 Found",
        &["Location: /local/test"],
    )))
    .await;
    assert_eq!(
        c.fetch(&relative.url("/channel"), "").await.as_deref(),
        Ok("test")
    );
    assert_eq!(relative.requests().len(), 1, "the redirect is not followed");
}

#[tokio::test]
async fn other_answers_over_http() {
    let c = client(ChannelConfig::default());
    let ok = serve(Reply::Raw(response("200 OK", &[]))).await;
    assert_eq!(
        c.fetch(&ok.url("/channels/v1.2.3"), "").await.as_deref(),
        Ok("v1.2.3")
    );
    assert_eq!(
        c.fetch(&ok.url("/channels/latest?arch=arm64"), "")
            .await
            .as_deref(),
        Ok("latest?arch=arm64")
    );
    let moved = serve(Reply::Raw(response(
        "301 Moved Permanently",
        &["Location: /elsewhere/v9"],
    )))
    .await;
    assert_eq!(
        c.fetch(&moved.url("/channels/v1"), "").await.as_deref(),
        Ok("v1")
    );
    let missing = serve(Reply::Raw(response("404 Not Found", &[]))).await;
    assert_eq!(
        c.fetch(&missing.url("/x"), "")
            .await
            .unwrap_err()
            .to_string(),
        "unexpected response: HTTP/1.1 404 Not Found"
    );
    let down = serve(Reply::Raw(response("503 Service Unavailable", &[]))).await;
    assert_eq!(
        c.fetch(&down.url("/x"), "").await.unwrap_err().to_string(),
        "unexpected response: HTTP/1.1 503 Service Unavailable"
    );
    let odd = serve(Reply::Raw(response("404 Gone Fishing", &[]))).await;
    assert_eq!(
        c.fetch(&odd.url("/x"), "").await.unwrap_err().to_string(),
        "unexpected response: HTTP/1.1 404 Gone Fishing"
    );
    let no_location = serve(Reply::Raw(response("302 Found", &[]))).await;
    assert_eq!(
        c.fetch(&no_location.url("/x"), "").await,
        Err(ChannelError::NoLocation)
    );
}

#[tokio::test]
async fn hostile_answers_are_errors_that_say_what_was_wrong() {
    let c = client(ChannelConfig::default());
    let garbage = serve(Reply::Raw(response("302 Found", &["Location: /tags/%zz"]))).await;
    let e = c.fetch(&garbage.url("/x"), "").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid Location "/tags/%zz": invalid URL escape "%zz""#
    );
    let mut bytes = b"HTTP/1.1 302 Found\r\nLocation: /tags/v1.2.3-".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let not_utf8 = serve(Reply::Bytes(bytes)).await;
    let e = c.fetch(&not_utf8.url("/x"), "").await.unwrap_err();
    assert!(
        matches!(&e, ChannelError::InvalidLocation { reason, .. } if reason == "not UTF-8"),
        "{e}"
    );
    // A redirect to itself is not followed, so it cannot loop.
    let to_itself = serve(Reply::Raw(response(
        "302 Found",
        &["Location: /channels/stable"],
    )))
    .await;
    assert_eq!(
        c.fetch(&to_itself.url("/channels/stable"), "")
            .await
            .as_deref(),
        Ok("stable")
    );
    assert_eq!(to_itself.requests().len(), 1);
    // TLS to a server that speaks plain HTTP.
    let plain = serve(Reply::Raw(response("200 OK", &[]))).await;
    let url = plain.url("/channels/stable").replace("http://", "https://");
    let e = c.fetch(&url, "").await.unwrap_err();
    assert!(
        matches!(&e, ChannelError::Request { url: u, .. } if *u == url),
        "{e}"
    );
}

#[tokio::test]
async fn sends_the_suc_headers() {
    let c = client(ChannelConfig::default());
    let server = serve(Reply::Raw(response("200 OK", &[]))).await;
    c.fetch(&server.url("/channels/stable"), "v1.30.0-k3s1")
        .await
        .unwrap();
    c.fetch(&server.url("/channels/stable"), "").await.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].starts_with("GET /channels/stable HTTP/1.1\r\n"));
    for request in &requests {
        assert_eq!(header(request, HEADER_CLUSTER_ID), Some("0a1b2c3d-cluster"));
        assert_eq!(header(request, "User-Agent"), Some(USER_AGENT));
    }
    assert_eq!(
        header(&requests[0], HEADER_LATEST_VERSION),
        Some("v1.30.0-k3s1")
    );
    assert_eq!(header(&requests[1], HEADER_LATEST_VERSION), None);
}

#[tokio::test]
async fn bad_input_is_an_error_not_a_panic() {
    let c = client(ChannelConfig::default());
    assert!(matches!(
        c.fetch("not a url", "").await,
        Err(ChannelError::InvalidUrl { .. })
    ));
    assert!(matches!(
        c.fetch("http://127.0.0.1:9/x", "v1\nInjected: yes").await,
        Err(ChannelError::InvalidHeader { .. })
    ));
    // Nothing listens on the discard port of loopback.
    let e = c.fetch("http://127.0.0.1:9/x", "").await.unwrap_err();
    assert!(matches!(e, ChannelError::Request { .. }), "{e}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let c = client(ChannelConfig {
        timeout: Duration::from_millis(300),
        ..Default::default()
    });
    let server = serve(Reply::Hang).await;
    let url = server.url("/channels/stable");
    let started = std::time::Instant::now();
    let e = c.fetch(&url, "").await.unwrap_err();
    assert_eq!(e, ChannelError::Timeout { url: url.clone() });
    assert_eq!(e.to_string(), format!("request to {url} timed out"));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_huge_body_is_not_read() {
    let c = client(ChannelConfig {
        timeout: Duration::from_secs(10),
        ..Default::default()
    });
    let server = serve(Reply::Endless).await;
    let started = std::time::Instant::now();
    assert_eq!(
        c.fetch(&server.url("/channels/v1.2.3"), "")
            .await
            .as_deref(),
        Ok("v1.2.3")
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // Socket buffers let the server get some way ahead, but nowhere near the whole body.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = server.body_bytes.load(Ordering::Relaxed);
    assert!(sent < 64 << 20, "{sent} bytes sent");
}

#[tokio::test]
async fn a_stalled_body_does_not_hold_the_answer() {
    // The request's timeout is far beyond the bound below: an answer held by the body would come
    // only at the timeout. The bound is wide (a loaded machine is slow), not a measurement.
    let c = client(ChannelConfig {
        timeout: Duration::from_secs(3600),
        ..Default::default()
    });
    let server = serve(Reply::StalledBody).await;
    let fetched = tokio::time::timeout(
        DRAIN_GRACE + Duration::from_secs(120),
        c.fetch(&server.url("/channels/v1.2.3"), ""),
    )
    .await;
    assert_eq!(
        fetched.as_ref().map(|r| r.as_deref()),
        Ok(Ok("v1.2.3")),
        "the answer comes after the drain's grace, not at the request's timeout"
    );
}

#[test]
fn a_client_needs_a_crypto_provider_or_says_so() {
    // Another test may have installed ring already; either way there is no panic.
    match ChannelClient::new("id", &ChannelConfig::default()) {
        Ok(_) => assert!(rustls::crypto::CryptoProvider::get_default().is_some()),
        Err(e) => assert_eq!(
            e.to_string(),
            "cannot build the HTTP client: no rustls crypto provider is installed"
        ),
    }
}

/// A channel for the cache tests: answers after a delay, as `reply(url, call number)` says.
struct Fake<R> {
    calls: Mutex<Vec<(String, String)>>,
    reply: R,
}

type Reply2 = (Duration, Result<String, ChannelError>);

impl<R: Fn(&str, usize) -> Reply2 + Send + Sync + 'static> Fake<R> {
    fn new(reply: R) -> Self {
        Fake {
            calls: Mutex::new(Vec::new()),
            reply,
        }
    }

    fn calls(&self) -> Vec<(String, String)> {
        self.calls.lock().unwrap().clone()
    }
}

impl<R: Fn(&str, usize) -> Reply2 + Send + Sync + 'static> ChannelFetch for Fake<R> {
    async fn fetch(&self, url: &str, latest_version: &str) -> Result<String, ChannelError> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((url.to_string(), latest_version.to_string()));
            calls.len()
        };
        let (delay, result) = (self.reply)(url, n);
        tokio::time::sleep(delay).await;
        result
    }
}

fn ok_after(delay: Duration) -> impl Fn(&str, usize) -> Reply2 + Send + Sync + 'static {
    move |url, n| (delay, Ok(format!("{}-{n}", go_path_base(url))))
}

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn one_request_per_url_per_interval() {
    let cache = ChannelCache::new(Fake::new(ok_after(Duration::ZERO)), 15 * MINUTE);
    let first = cache.resolve("https://x/stable", "v1").await;
    assert_eq!(first.result.as_deref(), Ok("stable-1"));
    assert!(first.fresh);
    assert_eq!(first.next_poll_in, 15 * MINUTE);

    tokio::time::advance(10 * MINUTE).await;
    let cached = cache.resolve("https://x/stable", "v2").await;
    assert_eq!(cached.result.as_deref(), Ok("stable-1"));
    assert!(!cached.fresh);
    assert_eq!(cached.fetched_at, first.fetched_at);
    assert_eq!(cached.next_poll_in, 5 * MINUTE);

    tokio::time::advance(5 * MINUTE).await;
    let next = cache.resolve("https://x/stable", "v3").await;
    assert_eq!(next.result.as_deref(), Ok("stable-2"));
    assert!(next.fresh);
    assert_eq!(
        cache.fetcher.calls(),
        [
            ("https://x/stable".to_string(), "v1".to_string()),
            ("https://x/stable".to_string(), "v3".to_string())
        ]
    );
    let m = cache.metrics();
    assert_eq!(m.requests.load(Ordering::Relaxed), 2);
    assert_eq!(m.cache_hits.load(Ordering::Relaxed), 1);
    assert_eq!(m.errors.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_one_request() {
    let cache = ChannelCache::new(Fake::new(ok_after(Duration::from_secs(3))), 15 * MINUTE);
    let started = Instant::now();
    let outcomes =
        futures::future::join_all((0..20).map(|_| cache.resolve("https://x/stable", ""))).await;
    assert_eq!(cache.fetcher.calls().len(), 1);
    assert_eq!(outcomes.iter().filter(|o| o.fresh).count(), 1);
    for o in &outcomes {
        assert_eq!(o.result.as_deref(), Ok("stable-1"));
        assert_eq!(o.fetched_at, started + Duration::from_secs(3));
    }
    assert_eq!(
        cache.metrics().last_latency_micros.load(Ordering::Relaxed),
        3_000_000
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_url_does_not_hold_up_another() {
    let fake = Fake::new(|url: &str, _| {
        let delay = if url.contains("slow") {
            Duration::from_secs(3600)
        } else {
            Duration::ZERO
        };
        (delay, Ok(go_path_base(url).to_string()))
    });
    let cache = Arc::new(ChannelCache::new(fake, 15 * MINUTE));
    let slow = tokio::spawn({
        let cache = cache.clone();
        async move { cache.resolve("https://x/slow", "").await }
    });
    tokio::task::yield_now().await;
    let started = Instant::now();
    let fast = cache.resolve("https://x/fast", "").await;
    assert_eq!(fast.result.as_deref(), Ok("fast"));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(!slow.is_finished());
    slow.abort();
}

#[tokio::test(start_paused = true)]
async fn failures_are_cached_and_retried_with_backoff() {
    let fake = Fake::new(|_: &str, n| {
        let result = if n <= 6 {
            Err(ChannelError::UnexpectedResponse {
                proto: "HTTP/1.1".into(),
                status: "503 Service Unavailable".into(),
            })
        } else {
            Ok("v1".to_string())
        };
        (Duration::ZERO, result)
    });
    let cache = ChannelCache::new(fake, 2 * MINUTE);
    let secs = Duration::from_secs;
    for want in [secs(10), secs(20), secs(40), secs(80), secs(120), secs(120)] {
        let o = cache.resolve("https://x/stable", "").await;
        assert!(o.fresh && o.result.is_err());
        assert_eq!(o.next_poll_in, want);
        // Asking again before then does not hit the server.
        let again = cache.resolve("https://x/stable", "").await;
        assert!(!again.fresh);
        assert_eq!(again.result, o.result);
        tokio::time::advance(want).await;
    }
    let o = cache.resolve("https://x/stable", "").await;
    assert_eq!(o.result.as_deref(), Ok("v1"));
    assert_eq!(o.next_poll_in, 2 * MINUTE);
    assert_eq!(cache.metrics().errors.load(Ordering::Relaxed), 6);
    assert_eq!(cache.metrics().requests.load(Ordering::Relaxed), 7);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_request_is_made_again_by_the_next_caller() {
    let cache = Arc::new(ChannelCache::new(
        Fake::new(ok_after(Duration::from_secs(5))),
        15 * MINUTE,
    ));
    let first = tokio::spawn({
        let cache = cache.clone();
        async move { cache.resolve("https://x/stable", "").await }
    });
    tokio::task::yield_now().await;
    first.abort();
    let _ = first.await;
    let o = cache.resolve("https://x/stable", "").await;
    assert_eq!(o.result.as_deref(), Ok("stable-2"));
    assert_eq!(cache.fetcher.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn unused_urls_can_be_forgotten() {
    let cache = ChannelCache::new(Fake::new(ok_after(Duration::ZERO)), 15 * MINUTE);
    cache.resolve("https://x/a", "").await;
    cache.resolve("https://x/b", "").await;
    cache.retain(|url| url.ends_with("/a"));
    assert_eq!(cache.urls(), ["https://x/a"]);
    assert!(!cache.resolve("https://x/a", "").await.fresh);
    assert!(cache.resolve("https://x/b", "").await.fresh);
}

#[tokio::test]
async fn over_http_concurrent_plans_make_one_request() {
    let server = serve(Reply::Delayed(
        Duration::from_millis(200),
        response("302 Found", &[&format!("Location: {K3S_TAG}")]),
    ))
    .await;
    let cache = ChannelCache::new(client(ChannelConfig::default()), 15 * MINUTE);
    let url = server.url("/v1-release/channels/stable");
    let outcomes = futures::future::join_all((0..10).map(|_| cache.resolve(&url, ""))).await;
    assert_eq!(server.requests().len(), 1);
    for o in outcomes {
        assert_eq!(o.result.as_deref(), Ok("v1.30.1+k3s1"));
    }
}

#[tokio::test]
async fn over_http_a_hanging_channel_does_not_delay_another() {
    let hanging = serve(Reply::Hang).await;
    let good = serve(Reply::Raw(response(
        "302 Found",
        &[&format!("Location: {K3S_TAG}")],
    )))
    .await;
    let cache = Arc::new(ChannelCache::new(
        client(ChannelConfig::default()),
        15 * MINUTE,
    ));
    let stuck = tokio::spawn({
        let cache = cache.clone();
        let url = hanging.url("/channels/stable");
        async move { cache.resolve(&url, "").await }
    });
    // Wait until the hanging server holds the request.
    while hanging.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    let o = cache.resolve(&good.url("/channels/stable"), "").await;
    assert_eq!(o.result.as_deref(), Ok("v1.30.1+k3s1"));
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!stuck.is_finished());
    stuck.abort();
}
