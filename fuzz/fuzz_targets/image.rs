//! Image references (`upgrade.image`, `prepare.image`) and versions: parsed as Docker's
//! reference grammar, tagged with the resolved version, and versions munged as SUC does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::plan::core::image;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (image_part, version) = text.split_once('\n').unwrap_or((text, "v1.30.1+k3s1"));
    if let Some(reference) = image::parse(image_part) {
        let _ = reference.familiar_name();
    }
    let _ = image::with_latest_tag(image_part, version);
    let _ = image::munge_version(version);
    let _ = image::is_valid_tag(version);
});
