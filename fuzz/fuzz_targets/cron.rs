//! Cron schedules (a DisruptionBudget's `schedules`): parsed, then asked for their starts around a
//! few instants, in UTC and in a zone with daylight saving time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::common::schedule::Cron;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cron) = text.parse::<Cron>() else {
        return;
    };
    let zones = [
        jiff::tz::TimeZone::UTC,
        jiff::tz::TimeZone::get("Europe/Berlin").expect("a bundled zone"),
    ];
    for tz in &zones {
        for t in [
            "2026-11-22T10:00:00Z",
            "2026-03-29T01:30:00Z",
            "2028-02-29T23:59:59Z",
        ] {
            let t: jiff::Timestamp = t.parse().expect("a constant time");
            let _ = cron.next_start(tz, t);
            let _ = cron.last_start(tz, t, std::time::Duration::from_secs(400 * 86_400));
        }
    }
});
