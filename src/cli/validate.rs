//! `slipway validate`: checks Plans in files before they reach a cluster.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::Output;
use slipway::plan::core::lint::{
    self, Document, FileFinding, Input, Options, SchemaChecker, Severity,
};

/// Exit codes: no errors, errors found, some input could not be read.
pub const OK: u8 = 0;
pub const FOUND_ERRORS: u8 = 1;
pub const CANNOT_READ: u8 = 2;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway validate examples/\n  \
    kustomize build overlays/prod | slipway validate -\n  \
    slipway validate --output json plans/ > findings.json\n  \
    slipway validate --strict plans/ secrets/")]
pub struct ValidateArgs {
    /// Files or directories (searched recursively for *.yaml, *.yml and *.json); `-` reads stdin.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format: text is `file:line: plan/name: field: severity: message` and a summary
    /// line; json and yaml are one document with every finding, for CI annotations.
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// A Secret that a Plan mounts must be in the input: without it, an error (what the
    /// controller says on a cluster without the Secret), not a warning. By default a missing
    /// Secret is a warning, since in Git Secrets are usually sealed or external.
    #[arg(long)]
    pub strict: bool,
}

#[derive(serde::Serialize)]
struct Report<'a> {
    files: usize,
    plans: usize,
    errors: usize,
    warnings: usize,
    unreadable: &'a [String],
    findings: &'a [FileFinding],
}

/// Runs the command and returns its exit code.
pub fn run(args: &ValidateArgs) -> anyhow::Result<u8> {
    let (docs, unreadable) = read_all(&args.paths);
    let inputs: Vec<Input<'_>> = docs
        .iter()
        .flat_map(|(file, ds)| ds.iter().map(move |doc| Input { file, doc }))
        .collect();
    let plans = inputs.iter().filter(|i| i.doc.kind() == "Plan").count();
    let checker = SchemaChecker::new();
    let options = Options {
        require_secrets: args.strict,
    };
    let mut findings = lint::lint_with(&checker, &inputs, jiff::Timestamp::now(), options);
    findings.sort_by(|a, b| (&a.file, a.finding.line).cmp(&(&b.file, b.finding.line)));
    let errors = findings
        .iter()
        .filter(|f| f.finding.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    let report = Report {
        files: docs.len(),
        plans,
        errors,
        warnings,
        unreadable: &unreadable,
        findings: &findings,
    };
    match super::structured(&report, args.output)? {
        Some(doc) => println!("{doc}"),
        None => {
            for u in &unreadable {
                eprintln!("{u}");
            }
            for f in &findings {
                println!("{}", line(f));
            }
            println!(
                "{plans} plan{} in {} file{}: {errors} error{}, {warnings} warning{}{}",
                plural(plans),
                docs.len(),
                plural(docs.len()),
                plural(errors),
                plural(warnings),
                if unreadable.is_empty() {
                    String::new()
                } else {
                    format!(", {} unreadable", unreadable.len())
                }
            );
        }
    }
    Ok(if !unreadable.is_empty() {
        CANNOT_READ
    } else if errors > 0 {
        FOUND_ERRORS
    } else {
        OK
    })
}

/// The documents of every file named (directories walked, `-` for stdin), and why the others
/// cannot be read.
fn read_all(paths: &[PathBuf]) -> (Vec<(String, Vec<Document>)>, Vec<String>) {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut unreadable: Vec<String> = Vec::new();
    for p in paths {
        if p.as_os_str() != "-" && p.is_dir() {
            if let Err(e) = walk(p, &mut files) {
                unreadable.push(format!("{}: cannot read: {e}", p.display()));
            }
        } else {
            files.push(p.clone());
        }
    }
    let mut docs: Vec<(String, Vec<Document>)> = Vec::new();
    for f in &files {
        let stdin = f.as_os_str() == "-";
        let name = if stdin {
            "<stdin>".to_string()
        } else {
            f.display().to_string()
        };
        let text = if stdin {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(f)
        };
        match text.map_err(|e| e.to_string()) {
            Err(e) => unreadable.push(format!("{name}: cannot read: {e}")),
            Ok(text) => match lint::parse_documents(&text) {
                Ok(d) => docs.push((name, d)),
                Err(e) => unreadable.push(format!("{name}:{e}")),
            },
        }
    }
    (docs, unreadable)
}

/// `file:line: plan/name: spec.field: error: message`.
pub fn line(f: &FileFinding) -> String {
    let severity = match f.finding.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let field = if f.finding.field.is_empty() {
        String::new()
    } else {
        format!(" {}:", f.finding.field)
    };
    format!(
        "{}:{}: {}:{field} {severity}: {}",
        f.file, f.finding.line, f.finding.object, f.finding.message
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(p);
        }
    }
    Ok(())
}
