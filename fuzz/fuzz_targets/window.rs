//! `spec.window` (days, times, IANA zone, as JSON): parsed, then asked whether it is open, when
//! it next opens and when to look again, at a few instants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::common::window::{self, TimeWindow};
use slipway::plan::api::TimeWindowSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<TimeWindowSpec>(data) else {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = window::parse_clock(text);
        }
        return;
    };
    let Ok(window) = TimeWindow::new(&spec) else {
        return;
    };
    for t in [
        "2026-11-22T10:00:00Z",
        "2026-03-29T01:30:00Z",
        "2026-10-25T00:59:59Z",
    ] {
        let t: jiff::Timestamp = t.parse().expect("a constant time");
        let _ = window.contains(t);
        let _ = window.next_opening(t);
        let _ = window.next_check(t);
    }
});
