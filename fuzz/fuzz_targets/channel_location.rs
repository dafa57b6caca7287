//! A channel server's answer: the `Location` of a redirect (and the channel URL it is resolved
//! against), read into a version as SUC reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::plan::shell::channel::{self, ResponseHead};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (url, location) = text
        .split_once('\n')
        .unwrap_or(("https://update.k3s.io/v1-release/channels/stable", text));
    for status in [302, 301, 200, 404] {
        let head = ResponseHead {
            proto: "HTTP/1.1",
            status,
            reason: None,
            location: Some(location),
        };
        let _ = channel::interpret_response(url, &head);
    }
    let _ = channel::go_path_base(location);
});
