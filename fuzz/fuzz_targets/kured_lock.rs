//! kured's lock (the annotation `weave.works/kured-node-lock` on its DaemonSet, JSON written by
//! kured): read whatever kured, or anyone, wrote there; and the flag that names the DaemonSet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::reboot_policy::core::kured::{KuredLock, KuredView, parse_lock};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now: jiff::Timestamp = "2026-11-22T10:00:00Z".parse().expect("a constant time");
    let _ = parse_lock(text, now);
    let view = KuredView::of_lock(Some(text), now);
    let _ = view.holds("node-1");
    let (daemonset, annotation) = text.split_once('\n').unwrap_or((text, ""));
    let _ = KuredLock::of(daemonset, annotation);
});
