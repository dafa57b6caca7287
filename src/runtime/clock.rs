//! The time the controller decides by: this host's clock, moved by how far it is from the API
//! server's, which every answer's `Date` header tells. Records written by one replica (when a
//! drain or a reboot started, when a retry's backoff ends, when a channel version was first seen)
//! are judged by another after a failover; with each replica on its own host's clock, a replica a
//! minute ahead would time a reboot out a minute early. On the API server's clock every replica
//! reads the same time, whatever its host's. Leader election does not use it: a lease is judged
//! by when this process saw it change (monotonic), as client-go does.

use std::sync::atomic::{AtomicI64, Ordering};

use jiff::{SignedDuration, Timestamp};

/// How far the API server's clock is ahead of this host's, in milliseconds.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// A `Date` has whole seconds and arrives after the server wrote it: an estimate this close to
/// the one in use is no news, and moving by it would make the time step back and forth.
const TOLERANCE_MS: i64 = 2_000;

/// The time now, on the API server's clock as last seen (this host's until an answer came).
pub fn now() -> Timestamp {
    at(Timestamp::now(), OFFSET_MS.load(Ordering::Relaxed))
}

/// Takes in the `Date` of an answer of the API server as it arrives, and passes the answer on.
pub fn observed<B>(answer: hyper::Response<B>) -> hyper::Response<B> {
    let date = (answer.headers().get(hyper::header::DATE)).and_then(|v| v.to_str().ok());
    if let Some(date) = date {
        observe(date, Timestamp::now());
    }
    answer
}

/// Takes in an answer's `Date` header, received at `local` (this host's clock).
fn observe(date: &str, local: Timestamp) {
    let Some(estimate) = estimate(date, local) else {
        return;
    };
    let current = OFFSET_MS.load(Ordering::Relaxed);
    if let Some(next) = moved(current, estimate) {
        OFFSET_MS.store(next, Ordering::Relaxed);
        tracing::info!(
            offset_ms = next,
            "the API server's clock is {:.1} s from this host's: deciding by the API server's",
            next as f64 / 1000.0
        );
    }
}

fn at(local: Timestamp, offset_ms: i64) -> Timestamp {
    local
        .checked_add(SignedDuration::from_millis(offset_ms))
        .unwrap_or(local)
}

/// The server's clock minus `local`, in milliseconds, from a `Date` (RFC 9110's
/// `Sun, 06 Nov 1994 08:49:37 GMT`); `None` for anything else. The server's second began up to a
/// second before it wrote the header: its middle is the estimate.
fn estimate(date: &str, local: Timestamp) -> Option<i64> {
    let server = jiff::fmt::rfc2822::parse(date).ok()?.timestamp();
    let ms = server.as_millisecond().checked_add(500)?;
    ms.checked_sub(local.as_millisecond())
}

/// The offset to use from now on, if `estimate` is news against `current`.
fn moved(current: i64, estimate: i64) -> Option<i64> {
    (estimate.abs_diff(current) > TOLERANCE_MS.unsigned_abs()).then_some(estimate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn a_date_a_minute_ahead_is_a_minute_of_offset() {
        let local = t("2026-11-30T04:40:00Z");
        assert_eq!(
            estimate("Mon, 30 Nov 2026 04:41:00 GMT", local),
            Some(60_500)
        );
        assert_eq!(
            estimate("Mon, 30 Nov 2026 04:39:00 GMT", local),
            Some(-59_500)
        );
    }

    #[test]
    fn anything_but_a_date_is_ignored() {
        let local = t("2026-11-30T04:40:00Z");
        for bad in [
            "",
            "yesterday",
            "2026-11-30T04:40:00Z",
            "Mon, 30 Nov 2026 25:00:00 GMT",
        ] {
            assert_eq!(estimate(bad, local), None, "{bad:?}");
        }
    }

    #[test]
    fn the_offset_moves_only_past_the_tolerance() {
        assert_eq!(moved(0, 500), None, "a clock in step");
        assert_eq!(moved(0, -1_900), None);
        assert_eq!(moved(0, 60_500), Some(60_500), "a minute ahead");
        assert_eq!(moved(60_500, 59_800), None, "the same minute, seen again");
        assert_eq!(moved(60_500, 0), Some(0), "back in step");
    }

    #[test]
    fn now_is_the_local_time_moved_by_the_offset() {
        let local = t("2026-11-30T04:40:00Z");
        assert_eq!(at(local, 60_500), t("2026-11-30T04:41:00.5Z"));
        assert_eq!(at(local, -2_000), t("2026-11-30T04:39:58Z"));
    }
}
