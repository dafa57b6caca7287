//! What slipway's HTTP clients (channel servers, notification targets, Alertmanager, a
//! RebootPolicy's Prometheus) share: reading an answer's body with a bound (those servers are named
//! by whoever configures them, and an answer is read a chunk at a time, never past its bound, so no
//! server can make the controller hold more than that), and an error in words.

/// What to do with an answer longer than its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Past {
    /// Keep its beginning (to quote it).
    Truncate,
    /// Fail: a JSON answer cut short would not parse anyway.
    Fail,
}

/// The body of `response`, at most `max` bytes of it.
pub async fn read_bounded(
    mut response: reqwest::Response,
    max: usize,
    past: Past,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(body),
            Err(e) => return Err(error_chain(&e)),
        };
        if body.len() + chunk.len() > max {
            return match past {
                Past::Truncate => {
                    body.extend_from_slice(&chunk[..max - body.len()]);
                    Ok(body)
                }
                Past::Fail => Err(format!("the answer is larger than {max} bytes")),
            };
        }
        body.extend_from_slice(&chunk);
    }
}

/// An error and its causes, `: `-separated: reqwest's `Display` names only the stage that failed
/// ("error sending request"); the cause is further down the chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
