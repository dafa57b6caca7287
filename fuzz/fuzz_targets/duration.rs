//! Go durations (`postCompleteDelay`, `drain.timeout`, `spec.reboot.timeout`, ...): parsed as
//! `time.ParseDuration` does, converted, printed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::common::duration::GoDuration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = text.parse::<GoDuration>() {
        let _ = d.is_negative();
        let _ = d.to_std();
        let _ = format!("{d:?}");
    }
});
