//! Reading an HTTP answer's body with a bound: the servers slipway asks (Alertmanager, a
//! RebootPolicy's Prometheus) are named by whoever configures them, and an answer is read a chunk at
//! a time, never past its bound, so no server can make the controller hold more than that.

use std::error::Error as _;

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
            Err(e) => return Err(chain(&e)),
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

/// An error and its causes, `: `-separated (reqwest's own message says only "error decoding").
fn chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
