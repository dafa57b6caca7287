//! Alertmanager silences as slipway reads them back: the key at the end of a comment (anyone may
//! edit a silence), and a silence list's JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::node::silence::{Key, Silence};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Some(key) = Key::parse(text)
    {
        // What slipway writes, it reads back the same.
        assert_eq!(Key::parse(&key.text()).as_ref(), Some(&key));
    }
    let _ = serde_json::from_slice::<Vec<Silence>>(data);
});
