//! The operator's pages cannot drift from the code: every flag and environment variable of
//! `slipway run` is in docs/configuration.md, every other variable slipway reads somewhere in
//! docs/, and every metric family it exports in docs/operating.md. (The Helm values are checked
//! against the chart's README in `chart::the_readme_lists_every_value`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every page of docs/, and the README.
fn all_docs() -> String {
    let mut text = read(&repo().join("README.md"));
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in pages {
        text.push_str(&read(&page));
    }
    text
}

/// `slipway run --help`: its long flags and the variables clap reads for them.
fn run_help() -> (BTreeSet<String>, BTreeSet<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(["run", "--help"])
        .output()
        .expect("run slipway");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{help}");
    let flags = (help.lines())
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .chain(
            help.lines()
                .filter_map(|l| l.trim_start().strip_prefix("-h, --")),
        )
        .map(|l| format!("--{}", l.split([' ', '=']).next().unwrap_or_default()))
        .filter(|f| f != "--help")
        .collect();
    let vars = help
        .split("[env: ")
        .skip(1)
        .map(|rest| {
            rest.split(['=', ']'])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    (flags, vars)
}

/// The names of the variables slipway's sources read or set in its Jobs: quoted words with the
/// prefixes of SUC's, wrangler's and slipway's own.
fn variables_in_sources() -> BTreeSet<String> {
    const PREFIXES: [&str; 3] = ["SYSTEM_UPGRADE_", "SLIPWAY_", "CATTLE_"];
    let mut names = BTreeSet::new();
    let mut dirs = vec![repo().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("src/")
            .filter_map(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                for quoted in read(&path).split('"').skip(1).step_by(2) {
                    let name_like = quoted
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                    if name_like && PREFIXES.iter().any(|p| quoted.starts_with(p)) {
                        names.insert(quoted.to_string());
                    }
                }
            }
        }
    }
    names
}

#[test]
fn every_flag_and_variable_of_run_is_in_the_configuration_page() {
    let page = read(&repo().join("docs/configuration.md"));
    let (flags, vars) = run_help();
    assert!(flags.len() >= 15 && vars.len() >= 15, "{flags:?} {vars:?}");
    let missing: Vec<&String> = (flags.iter().chain(&vars))
        .filter(|name| !page.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not name {missing:?}"
    );
}

#[test]
fn every_variable_slipway_reads_is_documented() {
    let docs = all_docs();
    let names = variables_in_sources();
    assert!(
        names.contains("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT"),
        "{names:?}"
    );
    let missing: Vec<&String> = (names.iter())
        .filter(|name| !docs.contains(&format!("`{name}`")) && !docs.contains(&format!("`{name}=")))
        .collect();
    assert!(missing.is_empty(), "no page of docs/ names {missing:?}");
}

#[test]
fn every_metric_family_is_in_the_operating_page() {
    let page = read(&repo().join("docs/operating.md"));
    let families: BTreeSet<String> = (crate::monitoring::exported().iter())
        .map(|sample| {
            let family = sample.strip_prefix("slipway_").unwrap_or(sample);
            (["_bucket", "_sum", "_count"].iter())
                .find_map(|suffix| family.strip_suffix(suffix))
                .unwrap_or(family)
                .to_string()
        })
        .collect();
    assert!(families.len() >= 20, "{families:?}");
    let missing: Vec<&String> = (families.iter())
        .filter(|f| {
            let documented = |name: &str| {
                page.contains(&format!("`{name}`"))
                    || page.contains(&format!("`{name}{{"))
                    || page.contains(&format!("`slipway_{name}`"))
                    || page.contains(&format!("`slipway_{name}{{"))
            };
            !documented(f)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operating.md does not name {missing:?}"
    );
}

/// Every flag of kured 1.23.0 (`cmd/kured/main.go` at commit 51220cc, the version
/// docs/reboots.md and docs/migrating.md describe).
const KURED_FLAGS: [&str; 43] = [
    "alert-filter-match-only",
    "alert-filter-regexp",
    "alert-firing-only",
    "annotate-nodes",
    "blocking-pod-selector",
    "concurrency",
    "drain-delay",
    "drain-grace-period",
    "drain-pod-selector",
    "drain-timeout",
    "ds-name",
    "ds-namespace",
    "end-time",
    "force-reboot",
    "lock-annotation",
    "lock-release-delay",
    "lock-ttl",
    "log-format",
    "message-template-drain",
    "message-template-reboot",
    "message-template-uncordon",
    "metrics-host",
    "metrics-port",
    "node-id",
    "notify-url",
    "period",
    "post-reboot-node-labels",
    "pre-reboot-node-labels",
    "prefer-no-schedule-taint",
    "prometheus-url",
    "reboot-command",
    "reboot-days",
    "reboot-delay",
    "reboot-method",
    "reboot-sentinel",
    "reboot-sentinel-command",
    "reboot-signal",
    "skip-wait-for-delete-timeout",
    "slack-channel",
    "slack-hook-url",
    "slack-username",
    "start-time",
    "time-zone",
];

/// A kured user switching reads one table for every flag they set: each of kured's flags has a
/// row in docs/reboots.md's "Replacing kured", saying what it becomes (or that it is not offered,
/// and why).
#[test]
fn every_kured_flag_has_a_row_in_the_replacing_kured_table() {
    let page = read(&repo().join("docs/reboots.md"));
    let start = page.find("### Replacing kured").expect("the section");
    let section = &page[start..];
    let end = section[4..].find("\n### ").map_or(section.len(), |i| i + 4);
    let rows: Vec<&str> = (section[..end].lines())
        .filter(|l| l.starts_with("| "))
        .map(|l| l.split(" | ").next().unwrap_or_default())
        .collect();
    let missing: Vec<&str> = (KURED_FLAGS.iter().copied())
        .filter(|f| !rows.iter().any(|r| r.contains(&format!("`--{f}`"))))
        .collect();
    assert!(missing.is_empty(), "kured flags with no row: {missing:?}");
}
