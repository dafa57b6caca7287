//! The Plan and the lint run that the tests of the lint's modules share.

use jiff::Timestamp;

use super::{Finding, Input, Options, SchemaChecker, lint_with, parse_documents};

pub(super) const PLAN: &str = "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\nspec:\n  concurrency: 1\n  nodeSelector: {}\n  version: v1\n  upgrade:\n    image: busybox:1\n";

pub(super) fn findings(text: &str) -> Vec<Finding> {
    findings_with(text, Options::default())
}

pub(super) fn findings_with(text: &str, options: Options) -> Vec<Finding> {
    let docs = parse_documents(text).expect("yaml");
    let inputs: Vec<Input<'_>> = docs.iter().map(|doc| Input { file: "f", doc }).collect();
    lint_with(
        &SchemaChecker::new(),
        &inputs,
        Timestamp::UNIX_EPOCH,
        options,
    )
    .into_iter()
    .map(|f| f.finding)
    .collect()
}
