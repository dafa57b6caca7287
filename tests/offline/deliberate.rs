//! Differences from another project's schema that must each be listed, with a reason.

/// Fails unless every difference `found` is one `deliberate` lists (with its reason), and every
/// one listed was found (a stale entry must go). `from` names the other schema in the message.
pub fn only_deliberate(found: &[String], deliberate: &[(&str, &str)], from: &str) {
    let allowed: Vec<&str> = deliberate.iter().map(|(d, _)| *d).collect();
    let unexpected: Vec<&str> = (found.iter().map(String::as_str))
        .filter(|f| !allowed.contains(f))
        .collect();
    assert!(
        unexpected.is_empty(),
        "differences from {from} not listed as deliberate:\n{}",
        unexpected.join("\n")
    );
    for d in &allowed {
        assert!(
            found.iter().any(|f| f == d),
            "listed as deliberate but not found (remove it): {d}"
        );
    }
}
