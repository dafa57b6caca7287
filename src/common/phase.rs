//! How many of an object's nodes are in each phase, and since when the one there longest has
//! been: what the per-phase gauges show. A node stuck in a phase shows as an old `since`, which an
//! alert compares with the time of the scrape (the status's own record, so a restart of the
//! controller does not reset it).

use std::collections::BTreeMap;

use jiff::Timestamp;

/// The nodes of one phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseTally {
    pub phase: &'static str,
    pub nodes: usize,
    /// The earliest time a node of this phase entered it; `None` when no node says (a status
    /// written without `since`, or with one that does not parse).
    pub oldest_since: Option<Timestamp>,
}

/// Tallies `(phase, since)` pairs (`since` in RFC 3339), one entry per phase present, by name.
pub fn tally<'a>(
    nodes: impl IntoIterator<Item = (&'static str, Option<&'a str>)>,
) -> Vec<PhaseTally> {
    let mut by_phase: BTreeMap<&'static str, PhaseTally> = BTreeMap::new();
    for (phase, since) in nodes {
        let since = since.and_then(|s| s.parse::<Timestamp>().ok());
        let entry = by_phase.entry(phase).or_insert(PhaseTally {
            phase,
            nodes: 0,
            oldest_since: None,
        });
        entry.nodes += 1;
        entry.oldest_since = match (entry.oldest_since, since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    by_phase.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_nodes_by_phase_with_the_oldest_since() {
        let got = tally([
            ("Upgrading", Some("2026-01-01T10:00:00Z")),
            ("Rebooting", Some("2026-01-01T09:00:00Z")),
            ("Upgrading", Some("2026-01-01T08:30:00Z")),
            ("Upgrading", None),
            ("Failed", Some("not a time")),
        ]);
        let t = |s: &str| Some(s.parse::<Timestamp>().unwrap());
        assert_eq!(
            got,
            vec![
                PhaseTally {
                    phase: "Failed",
                    nodes: 1,
                    oldest_since: None
                },
                PhaseTally {
                    phase: "Rebooting",
                    nodes: 1,
                    oldest_since: t("2026-01-01T09:00:00Z")
                },
                PhaseTally {
                    phase: "Upgrading",
                    nodes: 3,
                    oldest_since: t("2026-01-01T08:30:00Z")
                },
            ]
        );
        assert!(tally([]).is_empty());
    }
}
