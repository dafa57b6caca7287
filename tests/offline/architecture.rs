//! The architecture's rules, checked on the source tree (no cluster, std only).
//!
//! `src/` has one directory per node operation (a directory with an `api` or a `core` module; it
//! must have `api`, `core` and `shell`), `src/node/` for what the operations share on a node (pure
//! except `src/node/shell.rs`), `src/common/` for the pure vocabulary, `src/runtime/` for the
//! process, and `src/main.rs` with `src/cli/` for the binary. The rules, one function each:
//!
//! - [`import_loops`]: the files of a module (and its folders, each taken whole) import each
//!   other in no loop, so that each can be read knowing only those below it;
//! - [`sibling_operation`]: an operation does not import from another operation;
//! - [`shared_layer`]: `src/common/` and the pure part of `src/node/` import no operation and not
//!   the runtime;
//! - [`runtime_layer`]: `src/runtime/` imports no operation (the binary's `src/cli/run.rs` wires
//!   the operations onto it);
//! - [`pure_core`]: a core, `src/common/` and the pure part of `src/node/` have no `async fn`
//!   and import no shell; a core does not import the runtime;
//! - [`purity_allowed`]: only shells, the runtime and the binary allow the purity lints
//!   (`clippy::disallowed_types`, `clippy::disallowed_methods`, see clippy.toml);
//! - [`operation_parts`]: every operation has `api`, `core` and `shell`.
//!
//! Length is reported, not ruled: [`file_size`] lists the files over 600 lines of non-test code and
//! [`fn_length`] the functions over 80 lines not marked `// long: <why>`, as a list printed with
//! the test (`cargo test --test offline architecture -- --nocapture`). A file is split where
//! its parts stop belonging together, not where a count says.
//!
//! Test code (`#[cfg(test)]` items, files named `tests.rs`, files under a `tests/` directory and
//! modules declared `#[cfg(test)] mod x;`) is exempt from every rule but the purity lints one.
//! Each violation reads `path:line: rule: detail`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::Path;

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 80;
const LONG_MARKER: &str = "// long:";
const PURITY_LINTS: [&str; 2] = ["clippy::disallowed_types", "clippy::disallowed_methods"];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    path: String,
    line: usize,
    rule: &'static str,
    detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.path, self.line, self.rule, self.detail
        )
    }
}

fn violation(file: &SourceFile, line: usize, rule: &'static str, detail: String) -> Violation {
    Violation {
        path: file.path.clone(),
        line,
        rule,
        detail,
    }
}

// ---------------------------------------------------------------------------------------------
// Reading Rust source: comments and literals blanked, tokens, `#[cfg(test)]` items, paths.
// ---------------------------------------------------------------------------------------------

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Replaces every byte of a region by a space, newlines kept (offsets and lines stay).
fn blank(out: &mut [u8], from: usize, to: usize) {
    let to = to.min(out.len());
    for b in &mut out[from..to] {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

/// The end (exclusive) of a `"..."` literal whose content starts at `from`.
fn string_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of a raw string literal whose hashes start at `from`, if one starts there.
fn raw_string_end(b: &[u8], from: usize) -> Option<usize> {
    let hashes = b[from..].iter().take_while(|&&c| c == b'#').count();
    if b.get(from + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = from + hashes + 1;
    let end = b[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map_or(b.len(), |p| body + p + close.len());
    Some(end)
}

/// The end of a char literal starting with the quote at `q`, or `None` for a lifetime.
fn char_end(b: &[u8], q: usize) -> Option<usize> {
    if b.get(q + 1) == Some(&b'\\') {
        let close = b.get(q + 3..)?.iter().position(|&c| c == b'\'')?;
        return Some(q + 3 + close + 1);
    }
    let lead = *b.get(q + 1)?;
    let len = match lead {
        0xf0.. => 4,
        0xe0.. => 3,
        0xc0.. => 2,
        _ => 1,
    };
    (b.get(q + 1 + len) == Some(&b'\'')).then_some(q + 2 + len)
}

/// The end of a `/* */` comment (nested) starting at `from`.
fn block_comment_end(b: &[u8], from: usize) -> usize {
    let (mut depth, mut i) = (0, from);
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// At an identifier's start: the end of the string or byte literal it prefixes, if any.
fn prefixed_literal_end(b: &[u8], i: usize) -> Option<usize> {
    let rest = &b[i..];
    let (len, raw) = if rest.starts_with(b"br") || rest.starts_with(b"cr") {
        (2, true)
    } else {
        match rest[0] {
            b'r' => (1, true),
            b'b' | b'c' => (1, false),
            _ => return None,
        }
    };
    match b.get(i + len) {
        _ if raw => raw_string_end(b, i + len),
        Some(b'"') => Some(string_end(b, i + len + 1)),
        Some(b'\'') if rest[0] == b'b' => char_end(b, i + len),
        _ => None,
    }
}

/// The source with comments, string and char literals blanked: what is left is code.
fn strip_comments_and_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        let end = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => Some(
                b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p),
            ),
            b'/' if b.get(i + 1) == Some(&b'*') => Some(block_comment_end(b, i)),
            b'"' => Some(string_end(b, i + 1)),
            b'\'' => char_end(b, i),
            c if is_ident_byte(c) => match prefixed_literal_end(b, i) {
                Some(end) => Some(end),
                None => {
                    i += b[i..].iter().take_while(|&&c| is_ident_byte(c)).count();
                    continue;
                }
            },
            _ => None,
        };
        match end {
            Some(end) => {
                blank(&mut out, i, end);
                i = end;
            }
            None => i += 1,
        }
    }
    String::from_utf8(out).expect("only whole literals and comments are blanked")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Token<'a> {
    text: &'a str,
    offset: usize,
}

impl Token<'_> {
    fn is_ident(&self) -> bool {
        self.text
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
    }
}

/// Identifiers (and numbers), `::` and single punctuation characters of stripped code.
fn tokenize(code: &str) -> Vec<Token<'_>> {
    let b = code.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let len = if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        } else if is_ident_byte(b[i]) {
            b[i..].iter().take_while(|&&c| is_ident_byte(c)).count()
        } else if b[i..].starts_with(b"::") {
            2
        } else {
            code[i..].chars().next().map_or(1, char::len_utf8)
        };
        tokens.push(Token {
            text: &code[i..i + len],
            offset: i,
        });
        i += len;
    }
    tokens
}

/// The 1-based line of each byte offset.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Lines(starts)
    }

    fn of(&self, offset: usize) -> usize {
        self.0.partition_point(|&start| start <= offset)
    }
}

/// The offset just after the bracket that closes the one at `open` (`{`, `[` or `(`).
fn matching_close(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The end of the item that starts at `from` (attributes first): after its `;` or its body.
fn item_end(code: &str, from: usize) -> usize {
    let mut i = from;
    let b = code.as_bytes();
    while i < b.len() {
        match b[i] {
            b'#' => i = matching_close(code, i + code[i..].find('[').unwrap_or(0)),
            b'(' | b'[' => i = matching_close(code, i),
            b';' => return i + 1,
            b'{' => return matching_close(code, i),
            _ => i += 1,
        }
    }
    b.len()
}

/// Stripped code with its `#[cfg(test)]` items blanked, and the lines those items span.
fn without_test_items(code: &str) -> (String, Vec<(usize, usize)>) {
    let lines = Lines::new(code);
    if code.contains("#![cfg(test)]") {
        let last = lines.of(code.len().saturating_sub(1));
        return (blanked_all(code), vec![(1, last)]);
    }
    let mut out = code.as_bytes().to_vec();
    let mut ranges = Vec::new();
    for (start, _) in code.match_indices("#[cfg(test)]") {
        if out[start] == b' ' {
            continue; // inside an item already blanked
        }
        let end = item_end(code, start);
        blank(&mut out, start, end);
        ranges.push((lines.of(start), lines.of(end.saturating_sub(1))));
    }
    let text = String::from_utf8(out).expect("ASCII blanks");
    (text, ranges)
}

fn blanked_all(code: &str) -> String {
    code.chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect()
}

/// The names of the modules a file declares `#[cfg(test)] mod name;` (their files are tests).
fn test_module_declarations(code: &str) -> Vec<String> {
    code.match_indices("#[cfg(test)]")
        .filter_map(|(start, _)| {
            let item = &code[start..item_end(code, start)];
            let tokens = tokenize(item);
            match tokens.as_slice() {
                [.., m, name, semi] if m.text == "mod" && semi.text == ";" => {
                    Some(name.text.to_string())
                }
                _ => None,
            }
        })
        .collect()
}

/// A path the code names, as written (`segments`) and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PathRef {
    line: usize,
    segments: Vec<String>,
}

/// Parses one use tree at `tokens[i]` under `prefix`; returns the index after it.
fn use_tree(
    tokens: &[Token],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    let mut path = prefix.to_vec();
    let mut last = tokens.get(i).map_or(0, |t| t.offset);
    while let Some(t) = tokens.get(i) {
        match t.text {
            "::" => i += 1,
            "{" => {
                i += 1;
                while tokens.get(i).is_some_and(|t| t.text != "}") {
                    i = use_tree(tokens, i, &path, out);
                    if tokens.get(i).is_some_and(|t| t.text == ",") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            "as" => i += 2,
            "*" => {
                path.push("*".into());
                last = t.offset;
                i += 1;
            }
            "self" if !path.is_empty() => i += 1,
            _ if t.is_ident() => {
                path.push(t.text.to_string());
                last = t.offset;
                i += 1;
            }
            _ => break,
        }
    }
    out.push((last, path));
    i
}

/// Every path of `use` declarations (brace groups expanded) and every other path of two
/// segments or more, each with the line of its last segment.
fn path_refs(code: &str) -> Vec<PathRef> {
    let lines = Lines::new(code);
    let tokens = tokenize(code);
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let after_colons = i > 0 && tokens[i - 1].text == "::";
        if tokens[i].text == "use" && !after_colons {
            i = use_tree(&tokens, i + 1, &[], &mut found);
        } else if tokens[i].is_ident()
            && !after_colons
            && tokens.get(i + 1).is_some_and(|t| t.text == "::")
        {
            let mut path = vec![tokens[i].text.to_string()];
            let mut last = tokens[i].offset;
            i += 1;
            while tokens.get(i).is_some_and(|t| t.text == "::")
                && tokens.get(i + 1).is_some_and(Token::is_ident)
            {
                path.push(tokens[i + 1].text.to_string());
                last = tokens[i + 1].offset;
                i += 2;
            }
            found.push((last, path));
        } else {
            i += 1;
        }
    }
    found
        .into_iter()
        .map(|(offset, segments)| PathRef {
            line: lines.of(offset),
            segments,
        })
        .collect()
}

/// A path from the crate root (`crate::`, `super::`, `self::`), for a file in module `module`.
fn resolve(module: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut base = module.to_vec();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// A function: its name, the line of `fn` and the line of its closing brace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FnSpan {
    name: String,
    first: usize,
    last: usize,
}

/// Every function with a body (free, method, nested), from stripped code.
fn functions(code: &str) -> Vec<FnSpan> {
    let lines = Lines::new(code);
    let tokens = tokenize(code);
    let mut spans = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let Some(name) = tokens.get(i + 1).filter(|n| t.text == "fn" && n.is_ident()) else {
            continue;
        };
        let mut depth = 0i32;
        for body in &tokens[i + 2..] {
            match body.text {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                ";" if depth == 0 => break,
                "{" if depth == 0 => {
                    let close = matching_close(code, body.offset);
                    spans.push(FnSpan {
                        name: name.text.to_string(),
                        first: lines.of(t.offset),
                        last: lines.of(close - 1),
                    });
                    break;
                }
                _ => {}
            }
        }
    }
    spans
}

/// Whether the comments and attributes just above line `line` (1-based) carry `// long:`.
fn marked_long(raw: &str, line: usize) -> bool {
    let lines: Vec<&str> = raw.lines().collect();
    if lines.get(line - 1).is_some_and(|l| l.contains(LONG_MARKER)) {
        return true;
    }
    for above in lines[..line - 1].iter().rev() {
        let t = above.trim();
        if t.contains(LONG_MARKER) {
            return true;
        }
        let comment_or_attribute = t.starts_with("//") || t.starts_with('#');
        if t.is_empty()
            || (!comment_or_attribute && (t.ends_with('{') || t.ends_with('}') || t.ends_with(';')))
        {
            return false;
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// The tree: files, where each one stands, which are tests.
// ---------------------------------------------------------------------------------------------

struct SourceFile {
    /// `src/...`, with `/`.
    path: String,
    raw: String,
    /// Comments and literals blanked, test code kept.
    stripped: String,
    /// Comments, literals and `#[cfg(test)]` items blanked.
    code: String,
    /// The lines of `#[cfg(test)]` items.
    test_lines: Vec<(usize, usize)>,
    /// A test file (`tests.rs`, under `tests/`, or declared `#[cfg(test)] mod x;`).
    is_test: bool,
}

impl SourceFile {
    fn new(path: &str, raw: &str) -> SourceFile {
        let stripped = strip_comments_and_literals(raw);
        let (code, test_lines) = without_test_items(&stripped);
        let parts: Vec<&str> = path.split('/').collect();
        let is_test =
            parts.last() == Some(&"tests.rs") || parts[..parts.len() - 1].contains(&"tests");
        SourceFile {
            path: path.to_string(),
            raw: raw.to_string(),
            stripped,
            code,
            test_lines,
            is_test,
        }
    }

    /// The components after `src/`, the file's name included.
    fn parts(&self) -> Vec<&str> {
        self.path.split('/').skip(1).collect()
    }

    /// The module path of the file in the library (`src/plan/core/job.rs`: plan, core, job).
    fn module(&self) -> Vec<String> {
        let mut parts: Vec<String> = self
            .parts()
            .iter()
            .map(|p| p.trim_end_matches(".rs").to_string())
            .collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        parts
    }

    /// The files a `mod name;` of this file may be in.
    fn child_module_dir(&self) -> String {
        let dir = self.path.rsplit_once('/').map_or("", |(d, _)| d);
        match self.parts().last().copied() {
            Some("mod.rs" | "lib.rs" | "main.rs") => dir.to_string(),
            _ => self.path.trim_end_matches(".rs").to_string(),
        }
    }

    fn top(&self) -> &str {
        self.parts()[0].trim_end_matches(".rs")
    }

    fn is_shell(&self) -> bool {
        let parts = self.parts();
        parts.last() == Some(&"shell.rs") || parts[..parts.len() - 1].contains(&"shell")
    }

    fn is_binary(&self) -> bool {
        self.path == "src/main.rs" || self.top() == "cli"
    }

    fn operation<'a>(&self, layout: &'a Layout) -> Option<&'a str> {
        layout
            .operations
            .iter()
            .find(|op| *op == self.top() && self.parts().len() > 1)
            .map(String::as_str)
    }

    fn is_core(&self, layout: &Layout) -> bool {
        self.operation(layout).is_some() && self.parts()[1].starts_with("core")
    }

    fn is_pure_node(&self) -> bool {
        self.top() == "node" && !self.is_shell()
    }

    fn is_common(&self) -> bool {
        self.top() == "common"
    }

    /// The library paths this file's non-test code names, from the crate root where the path
    /// says (`crate::`, `super::`, `self::`), and as written otherwise.
    fn refs(&self) -> Vec<(PathRef, Option<Vec<String>>)> {
        let module = self.module();
        path_refs(&self.code)
            .into_iter()
            .map(|r| {
                let resolved = resolve(&module, &r.segments);
                (r, resolved)
            })
            .collect()
    }
}

/// The operations: directories under `src/` with an `api` or a `core` module.
struct Layout {
    operations: BTreeSet<String>,
}

impl Layout {
    fn discover(files: &[SourceFile]) -> Layout {
        let operations = files
            .iter()
            .filter_map(|f| {
                let parts = f.parts();
                let second = parts.get(1)?.trim_end_matches(".rs");
                (parts.len() > 1 && matches!(second, "api" | "core")).then(|| parts[0].to_string())
            })
            .collect();
        Layout { operations }
    }
}

/// Marks as tests the files of modules declared `#[cfg(test)] mod x;` and everything under them.
fn mark_test_modules(files: &mut [SourceFile]) {
    let mut test_prefixes = Vec::new();
    for f in files.iter() {
        for name in test_module_declarations(&f.stripped) {
            let dir = f.child_module_dir();
            test_prefixes.push(format!("{dir}/{name}.rs"));
            test_prefixes.push(format!("{dir}/{name}/"));
        }
    }
    for f in files.iter_mut() {
        if test_prefixes.iter().any(|p| f.path.starts_with(p.as_str())) {
            f.is_test = true;
        }
    }
}

fn read_tree(root: &Path) -> Vec<SourceFile> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let entries =
            fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&root.join("src"), &mut paths);
    paths.sort();
    let mut files: Vec<SourceFile> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(root).expect("under the root");
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            let raw = fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
            SourceFile::new(&rel, &raw)
        })
        .collect();
    mark_test_modules(&mut files);
    files
}

// ---------------------------------------------------------------------------------------------
// The rules.
// ---------------------------------------------------------------------------------------------

/// A file over [`MAX_FILE_LINES`] lines of non-test code, reported (not ruled); the line given is
/// the first one over.
fn file_size(file: &SourceFile) -> Vec<Violation> {
    if file.is_test {
        return Vec::new();
    }
    let in_test = |n: usize| file.test_lines.iter().any(|&(a, b)| (a..=b).contains(&n));
    let code_lines: Vec<usize> = (1..=file.raw.lines().count())
        .filter(|&n| !in_test(n))
        .collect();
    match code_lines.get(MAX_FILE_LINES) {
        Some(&over) => vec![violation(
            file,
            over,
            "file-size",
            format!(
                "{} lines of non-test code (at most {MAX_FILE_LINES}; split the file)",
                code_lines.len()
            ),
        )],
        None => Vec::new(),
    }
}

/// A function over [`MAX_FN_LINES`] lines from `fn` to its closing brace, reported (not ruled)
/// unless the comments above it say `// long: <why>`.
fn fn_length(file: &SourceFile) -> Vec<Violation> {
    if file.is_test {
        return Vec::new();
    }
    functions(&file.code)
        .into_iter()
        .filter(|f| f.last - f.first + 1 > MAX_FN_LINES && !marked_long(&file.raw, f.first))
        .map(|f| {
            violation(
                file,
                f.first,
                "fn-length",
                format!(
                    "fn {} has {} lines (at most {MAX_FN_LINES}, or mark a flat table `{LONG_MARKER} <why>`)",
                    f.name,
                    f.last - f.first + 1
                ),
            )
        })
        .collect()
}

/// An operation does not import from another operation.
fn sibling_operation(file: &SourceFile, layout: &Layout) -> Vec<Violation> {
    let Some(op) = file.operation(layout).filter(|_| !file.is_test) else {
        return Vec::new();
    };
    file.refs()
        .into_iter()
        .filter_map(|(r, resolved)| {
            let first = resolved?.first()?.clone();
            (first != op && layout.operations.contains(&first)).then(|| {
                let detail = format!(
                    "operation `{op}` imports `{}` from operation `{first}`",
                    r.segments.join("::")
                );
                violation(file, r.line, "sibling-operation", detail)
            })
        })
        .collect()
}

/// `src/common/` and the pure part of `src/node/` import no operation and not the runtime.
fn shared_layer(file: &SourceFile, layout: &Layout) -> Vec<Violation> {
    if file.is_test || !(file.is_common() || file.is_pure_node()) {
        return Vec::new();
    }
    file.refs()
        .into_iter()
        .filter_map(|(r, resolved)| {
            let first = resolved?.first()?.clone();
            (first == "runtime" || layout.operations.contains(&first)).then(|| {
                let detail = format!(
                    "`src/{}/` imports `{}` (from `{first}`)",
                    file.top(),
                    r.segments.join("::")
                );
                violation(file, r.line, "shared-layer", detail)
            })
        })
        .collect()
}

/// `src/runtime/` imports no operation: every operation runs on it the same way, and adding one
/// does not change it.
fn runtime_layer(file: &SourceFile, layout: &Layout) -> Vec<Violation> {
    if file.is_test || file.top() != "runtime" {
        return Vec::new();
    }
    file.refs()
        .into_iter()
        .filter_map(|(r, resolved)| {
            let first = resolved?.first()?.clone();
            layout.operations.contains(&first).then(|| {
                let detail = format!(
                    "the runtime imports `{}` (from the operation `{first}`)",
                    r.segments.join("::")
                );
                violation(file, r.line, "runtime-layer", detail)
            })
        })
        .collect()
}

/// A core, `src/common/` and the pure part of `src/node/` have no `async fn` and import no
/// shell; a core does not import the runtime (for common and node, [`shared_layer`] says it).
fn pure_core(file: &SourceFile, layout: &Layout) -> Vec<Violation> {
    let core = file.is_core(layout);
    if file.is_test || !(core || file.is_common() || file.is_pure_node()) {
        return Vec::new();
    }
    let lines = Lines::new(&file.code);
    let tokens = tokenize(&file.code);
    let mut found: Vec<Violation> = tokens
        .windows(2)
        .filter(|w| w[0].text == "async" && w[1].text == "fn")
        .map(|w| {
            violation(
                file,
                lines.of(w[0].offset),
                "pure-core",
                "`async fn` in pure code".into(),
            )
        })
        .collect();
    for (r, resolved) in file.refs() {
        let written = r.segments.join("::");
        let full = resolved.clone().unwrap_or_default();
        if r.segments.iter().chain(&full).any(|s| s == "shell") {
            found.push(violation(
                file,
                r.line,
                "pure-core",
                format!("pure code imports a shell: `{written}`"),
            ));
        } else if core && full.first().is_some_and(|s| s == "runtime") {
            found.push(violation(
                file,
                r.line,
                "pure-core",
                format!("a core imports the runtime: `{written}`"),
            ));
        }
    }
    found
}

/// Only shells, `src/runtime/` and the binary allow the purity lints (test code included: an
/// item-level allow in pure code is a spot to fix, listed here too).
fn purity_allowed(file: &SourceFile) -> Vec<Violation> {
    if file.is_shell() || file.top() == "runtime" || file.is_binary() {
        return Vec::new();
    }
    let lines = Lines::new(&file.stripped);
    let b = file.stripped.as_bytes();
    let mut found = Vec::new();
    for (start, _) in file.stripped.match_indices('#') {
        let open = start + 1 + usize::from(b.get(start + 1) == Some(&b'!'));
        if b.get(open) != Some(&b'[') {
            continue;
        }
        let attribute = &file.stripped[start..matching_close(&file.stripped, open)];
        let squeezed: String = attribute.split_whitespace().collect();
        let allows = squeezed.starts_with("#![allow(")
            || squeezed.starts_with("#[allow(")
            || squeezed.contains("expect(");
        for lint in PURITY_LINTS
            .iter()
            .filter(|l| allows && squeezed.contains(*l))
        {
            let detail = format!("`{lint}` allowed outside a shell, the runtime and the binary");
            found.push(violation(file, lines.of(start), "purity-allowed", detail));
        }
    }
    found
}

/// Every operation has `api`, `core` and `shell` (`x.rs` or `x/mod.rs`).
fn operation_parts(files: &[SourceFile], layout: &Layout) -> Vec<Violation> {
    let paths: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut found = Vec::new();
    for op in &layout.operations {
        for part in ["api", "core", "shell"] {
            let file = format!("src/{op}/{part}.rs");
            let dir = format!("src/{op}/{part}/mod.rs");
            if !paths.contains(file.as_str()) && !paths.contains(dir.as_str()) {
                let declared_in = format!("src/{op}.rs");
                found.push(Violation {
                    path: if paths.contains(declared_in.as_str()) {
                        declared_in
                    } else {
                        format!("src/{op}/mod.rs")
                    },
                    line: 1,
                    rule: "operation-parts",
                    detail: format!("operation `{op}` has no `{part}` ({file} or {dir})"),
                });
            }
        }
    }
    found
}

/// The parts of the module `dir` (a folder under `src/`): its files and folders but `mod.rs`,
/// each by the name the module knows it by, with the non-test files each one holds.
fn module_parts<'a>(files: &'a [SourceFile], dir: &str) -> BTreeMap<String, Vec<&'a SourceFile>> {
    let mut parts: BTreeMap<String, Vec<&SourceFile>> = BTreeMap::new();
    for f in files.iter().filter(|f| !f.is_test) {
        let Some(rest) = f.path.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let name = rest
            .split('/')
            .next()
            .unwrap_or(rest)
            .trim_end_matches(".rs");
        if !matches!(name, "mod" | "lib" | "main") {
            parts.entry(name.to_string()).or_default().push(f);
        }
    }
    parts
}

/// The first import loop among `parts`, given who imports whom: the parts in order, the last
/// importing the first.
fn first_loop(edges: &BTreeMap<&str, BTreeSet<&str>>) -> Option<Vec<String>> {
    fn visit<'a>(
        at: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| *p == at) {
            return Some(path[i..].iter().map(|p| p.to_string()).collect());
        }
        if done.contains(at) {
            return None;
        }
        path.push(at);
        for next in edges.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at);
        None
    }
    let mut done = BTreeSet::new();
    for start in edges.keys() {
        if let Some(found) = visit(start, edges, &mut Vec::new(), &mut done) {
            return Some(found);
        }
    }
    None
}

/// The files of a module, and its folders taken whole, import each other in no loop (`mod.rs`,
/// the module's face, is left out: its children read what it declares). One violation per
/// module, at the first import of the loop it names.
fn import_loops(files: &[SourceFile]) -> Vec<Violation> {
    let dirs: BTreeSet<String> = (files.iter())
        .filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string()))
        .collect();
    let mut found = Vec::new();
    for dir in dirs {
        let parts = module_parts(files, &dir);
        // The module's path: that of its `mod.rs`, or of any file in it, less the file.
        let Some(module) = (parts.values().flatten().next()).map(|f| {
            let depth = dir.split('/').count() - 1;
            f.module()[..depth].to_vec()
        }) else {
            continue;
        };
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut first_import: BTreeMap<(&str, &str), (&SourceFile, usize)> = BTreeMap::new();
        for (name, members) in &parts {
            for f in members {
                for (r, resolved) in f.refs() {
                    let Some(target) = resolved.filter(|t| t.starts_with(&module)) else {
                        continue;
                    };
                    let Some((to, _)) = (target.get(module.len()))
                        .and_then(|t| parts.get_key_value(t.as_str()))
                        .filter(|(to, _)| *to != name)
                    else {
                        continue;
                    };
                    edges.entry(name).or_default().insert(to);
                    first_import.entry((name, to)).or_insert((f, r.line));
                }
            }
        }
        if let Some(cycle) = first_loop(&edges) {
            let (from, to) = (cycle[0].as_str(), cycle[1 % cycle.len()].as_str());
            let (file, line) = first_import[&(from, to)];
            let shown: Vec<&str> = cycle
                .iter()
                .chain(cycle.first())
                .map(String::as_str)
                .collect();
            let detail = format!(
                "the files of `{dir}` import each other in a loop: {}",
                shown.join(" -> ")
            );
            found.push(violation(file, line, "import-loop", detail));
        }
    }
    found
}

fn check(files: &[SourceFile]) -> Vec<Violation> {
    let layout = Layout::discover(files);
    let mut found = operation_parts(files, &layout);
    found.extend(import_loops(files));
    for f in files {
        found.extend(sibling_operation(f, &layout));
        found.extend(shared_layer(f, &layout));
        found.extend(runtime_layer(f, &layout));
        found.extend(pure_core(f, &layout));
        found.extend(purity_allowed(f));
    }
    found.sort();
    found
}

#[test]
fn the_source_tree_follows_the_architecture() {
    let files = read_tree(Path::new(env!("CARGO_MANIFEST_DIR")));
    let layout = Layout::discover(&files);
    assert!(
        layout.operations.contains("plan"),
        "no operation found under src/: the checker is broken"
    );
    let long: Vec<String> = (files.iter())
        .flat_map(|f| file_size(f).into_iter().chain(fn_length(f)))
        .map(|v| v.to_string())
        .collect();
    println!(
        "{} long file(s) and function(s), reported, not ruled:\n{}",
        long.len(),
        long.join("\n")
    );
    let found = check(&files);
    let list: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "{} architecture violation(s) (operations: {:?}; see tests/offline/architecture.rs for the rules):\n{}",
        found.len(),
        layout.operations,
        list.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The checker's own tests: each parser and each rule on a tiny source.
// ---------------------------------------------------------------------------------------------

fn layout(ops: &[&str]) -> Layout {
    Layout {
        operations: ops.iter().map(|s| s.to_string()).collect(),
    }
}

fn rules_of(found: &[Violation]) -> Vec<(usize, &'static str)> {
    found.iter().map(|v| (v.line, v.rule)).collect()
}

#[test]
fn stripping_blanks_comments_and_literals_but_keeps_lines_and_lifetimes() {
    let src = "let a = \"crate::plan // x\"; // crate::plan\n/* a /* nested */ async fn */ let c = '{';\nfn f<'a>(x: &'a str) { r#\"}\"# ; b'}' }\n";
    let out = strip_comments_and_literals(src);
    assert_eq!(out.len(), src.len());
    assert_eq!(out.lines().count(), 3);
    assert!(
        !out.contains("crate") && !out.contains("async") && !out.contains("nested"),
        "{out}"
    );
    assert!(out.contains("fn f<'a>(x: &'a str) {"), "{out}");
    assert_eq!(out.matches('{').count(), out.matches('}').count(), "{out}");
}

#[test]
fn test_items_are_blanked_with_their_lines() {
    let src = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\n#[cfg(test)]\nmod more;\nfn c() {}\n";
    let (code, ranges) = without_test_items(&strip_comments_and_literals(src));
    assert_eq!(ranges, vec![(2, 5), (6, 7)]);
    assert!(
        code.contains("fn a") && code.contains("fn c") && !code.contains("fn b"),
        "{code}"
    );
    assert_eq!(test_module_declarations(src), vec!["more".to_string()]);
}

#[test]
fn paths_come_from_use_trees_and_expressions() {
    let src = "use crate::plan::{api::labels, core::{self, job}};\nuse super::x as y;\nfn f() { crate::runtime::go(); labels::A; }\n";
    let refs: Vec<(usize, String)> = path_refs(src)
        .into_iter()
        .map(|r| (r.line, r.segments.join("::")))
        .collect();
    assert_eq!(
        refs,
        vec![
            (1, "crate::plan::api::labels".into()),
            (1, "crate::plan::core".into()),
            (1, "crate::plan::core::job".into()),
            (2, "super::x".into()),
            (3, "crate::runtime::go".into()),
            (3, "labels::A".into()),
        ]
    );
    let module = vec!["node".to_string(), "drain".to_string()];
    let seg = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        resolve(&module, &seg("super::shell::f")),
        Some(seg("node::shell::f"))
    );
    assert_eq!(resolve(&module, &seg("crate::plan")), Some(seg("plan")));
    assert_eq!(resolve(&module, &seg("super::super::super::x")), None);
    assert_eq!(resolve(&module, &seg("std::fs")), None);
}

#[test]
fn functions_span_from_fn_to_their_closing_brace() {
    let src = "trait T { fn decl(&self); }\nimpl S {\n    pub async fn m(&self, f: fn(u8) -> [u8; 2]) -> u8\n    where Self: Sized {\n        let c = || { 1 };\n        fn inner() {}\n        0\n    }\n}\n";
    let spans = functions(&strip_comments_and_literals(src));
    let got: Vec<(&str, usize, usize)> = spans
        .iter()
        .map(|f| (f.name.as_str(), f.first, f.last))
        .collect();
    assert_eq!(got, vec![("m", 3, 8), ("inner", 6, 6)]);
}

#[test]
fn file_size_counts_non_test_lines_only() {
    let body = "fn x() {}\n".repeat(MAX_FILE_LINES);
    let tests = "#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
    assert!(
        file_size(&SourceFile::new(
            "src/common/a.rs",
            &format!("{body}{tests}")
        ))
        .is_empty()
    );
    let over = SourceFile::new("src/common/a.rs", &format!("{body}fn y() {{}}\n{tests}"));
    assert_eq!(
        rules_of(&file_size(&over)),
        vec![(MAX_FILE_LINES + 1, "file-size")]
    );
    assert!(file_size(&SourceFile::new("src/common/tests.rs", &body.repeat(2))).is_empty());
}

#[test]
fn fn_length_needs_the_marker_for_a_long_function() {
    let long = |above: &str| {
        format!(
            "{above}fn table() {{\n{}}}\n",
            "    1;\n".repeat(MAX_FN_LINES - 1)
        )
    };
    let plain = SourceFile::new("src/common/a.rs", &long("/// A table.\n"));
    assert_eq!(rules_of(&fn_length(&plain)), vec![(2, "fn-length")]);
    let marked = SourceFile::new(
        "src/common/a.rs",
        &long("/// A table.\n// long: one row per field\n#[inline]\n"),
    );
    assert!(fn_length(&marked).is_empty());
    let short = format!("fn ok() {{\n{}}}\n", "    1;\n".repeat(MAX_FN_LINES - 2));
    assert!(fn_length(&SourceFile::new("src/common/a.rs", &short)).is_empty());
}

#[test]
fn the_files_of_a_module_import_each_other_in_no_loop() {
    let tree = |files: &[(&str, &str)]| -> Vec<SourceFile> {
        let mut files: Vec<SourceFile> = (files.iter())
            .map(|(path, src)| SourceFile::new(path, src))
            .collect();
        mark_test_modules(&mut files);
        files
    };
    let looped = tree(&[
        (
            "src/plan/core/mod.rs",
            "mod report;\nmod waits;\nmod gates;\npub use report::x;\n",
        ),
        (
            "src/plan/core/report.rs",
            "use super::gates::G;\nuse super::waits::w;\n",
        ),
        ("src/plan/core/waits.rs", "fn f() { super::report::r(); }\n"),
        ("src/plan/core/gates.rs", "use super::{MSG, rfc3339};\n"),
        (
            "src/plan/core/node_state/mod.rs",
            "use super::super::waits::w;\n",
        ),
    ]);
    let found = import_loops(&looped);
    assert_eq!(rules_of(&found), vec![(2, "import-loop")], "{found:?}");
    assert!(
        found[0].detail.contains("report -> waits -> report"),
        "{}",
        found[0].detail
    );
    // A folder is one part of its module, and a loop through it counts; the module's mod.rs and
    // test code do not.
    let through_folder = tree(&[
        ("src/plan/core/mod.rs", "mod waits;\nmod node_state;\n"),
        (
            "src/plan/core/waits.rs",
            "use super::node_state::NodeState;\n",
        ),
        (
            "src/plan/core/node_state/failures.rs",
            "use crate::plan::core::waits::w;\n",
        ),
    ]);
    let found = import_loops(&through_folder);
    assert_eq!(rules_of(&found), vec![(1, "import-loop")], "{found:?}");
    let fine = tree(&[
        (
            "src/plan/core/mod.rs",
            "mod report;\nmod waits;\nuse report::r;\n#[cfg(test)]\nmod tests;\n",
        ),
        (
            "src/plan/core/report.rs",
            "use super::waits::w;\nuse super::FAILURE_REASONS;\n",
        ),
        (
            "src/plan/core/waits.rs",
            "#[cfg(test)]\nmod tests { use super::super::report::r; }\n",
        ),
        (
            "src/plan/core/tests.rs",
            "use super::report::r;\nuse super::waits::w;\n",
        ),
    ]);
    assert!(import_loops(&fine).is_empty(), "{:?}", import_loops(&fine));
}

#[test]
fn an_operation_does_not_import_a_sibling() {
    let ops = layout(&["plan", "maintenance", "nodeop"]);
    let src =
        "use crate::plan::api::labels;\nuse crate::maintenance::api::X;\nuse super::api::Y;\n";
    let f = SourceFile::new("src/nodeop/core.rs", src);
    assert_eq!(
        rules_of(&sibling_operation(&f, &ops)),
        vec![(1, "sibling-operation"), (2, "sibling-operation")]
    );
    let own = SourceFile::new(
        "src/maintenance/shell.rs",
        "use super::core;\nuse crate::node::NodeInfo;\n",
    );
    assert!(sibling_operation(&own, &ops).is_empty());
}

#[test]
fn common_and_node_import_no_operation_and_no_runtime() {
    let ops = layout(&["plan"]);
    let src = "use crate::plan::api::labels;\nfn f() { crate::runtime::x(); }\nuse crate::common::Extra;\n";
    let node = SourceFile::new("src/node/info.rs", src);
    assert_eq!(
        rules_of(&shared_layer(&node, &ops)),
        vec![(1, "shared-layer"), (2, "shared-layer")]
    );
    assert_eq!(
        shared_layer(&SourceFile::new("src/common/x.rs", src), &ops).len(),
        2
    );
    assert!(shared_layer(&SourceFile::new("src/node/shell.rs", src), &ops).is_empty());
}

#[test]
fn the_runtime_imports_no_operation() {
    let ops = layout(&["plan", "maintenance"]);
    let src = "use crate::plan::api::Plan;\nuse crate::node::holders::Holder;\nfn f() { crate::maintenance::core::holds(); }\n";
    let runtime = SourceFile::new("src/runtime/shared.rs", src);
    assert_eq!(
        rules_of(&runtime_layer(&runtime, &ops)),
        vec![(1, "runtime-layer"), (3, "runtime-layer")]
    );
    assert!(runtime_layer(&SourceFile::new("src/cli/run.rs", src), &ops).is_empty());
    let test = "#[cfg(test)]\nmod tests {\n    use crate::plan::api::Plan;\n}\n";
    assert!(runtime_layer(&SourceFile::new("src/runtime/x.rs", test), &ops).is_empty());
}

#[test]
fn pure_code_has_no_async_fn_and_imports_no_shell_or_runtime() {
    let ops = layout(&["plan"]);
    let src = "use crate::plan::shell::channel;\npub async fn ask() {}\nuse crate::runtime::Ctx;\nuse super::api::Plan;\n#[cfg(test)]\nmod tests { async fn t() {} }\n";
    let core = SourceFile::new("src/plan/core/status.rs", src);
    assert_eq!(
        rules_of(&pure_core(&core, &ops)),
        vec![(2, "pure-core"), (1, "pure-core"), (3, "pure-core")]
    );
    let node = SourceFile::new("src/node/drain.rs", "use super::shell::list;\n");
    assert_eq!(rules_of(&pure_core(&node, &ops)), vec![(1, "pure-core")]);
    assert!(pure_core(&SourceFile::new("src/plan/shell/mod.rs", src), &ops).is_empty());
}

#[test]
fn only_shells_runtime_and_binary_allow_the_purity_lints() {
    let src = "//! Doc.\n#![allow(clippy::disallowed_types, clippy::disallowed_methods)]\n// #![allow(clippy::disallowed_types)]\n#[allow(\n    clippy::disallowed_methods\n)]\nfn f() {}\n#![allow(clippy::too_many_lines)]\n";
    let core = SourceFile::new("src/plan/core/a.rs", src);
    assert_eq!(
        rules_of(&purity_allowed(&core)),
        vec![
            (2, "purity-allowed"),
            (2, "purity-allowed"),
            (4, "purity-allowed")
        ]
    );
    for ok in [
        "src/plan/shell/channel.rs",
        "src/node/shell.rs",
        "src/runtime/leader.rs",
        "src/main.rs",
        "src/cli/agent.rs",
    ] {
        assert!(purity_allowed(&SourceFile::new(ok, src)).is_empty(), "{ok}");
    }
}

#[test]
fn operations_are_discovered_and_need_three_parts() {
    let files: Vec<SourceFile> = [
        "src/plan/api/mod.rs",
        "src/plan/core/mod.rs",
        "src/plan/shell/mod.rs",
        "src/nodeop/core.rs",
        "src/node/shell.rs",
        "src/common/mod.rs",
    ]
    .iter()
    .map(|p| SourceFile::new(p, ""))
    .collect();
    let found = Layout::discover(&files);
    assert_eq!(
        found.operations,
        ["nodeop", "plan"].iter().map(|s| s.to_string()).collect()
    );
    let missing: Vec<String> = operation_parts(&files, &found)
        .into_iter()
        .map(|v| v.detail)
        .collect();
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(missing[0].contains("`nodeop` has no `api`") && missing[1].contains("no `shell`"));
}

#[test]
fn test_module_files_are_tests() {
    let mut files = vec![
        SourceFile::new("src/plan/core/mod.rs", "#[cfg(test)]\nmod props;\n"),
        SourceFile::new("src/plan/core/props.rs", ""),
        SourceFile::new("src/plan/core/job.rs", ""),
    ];
    mark_test_modules(&mut files);
    let tests: Vec<bool> = files.iter().map(|f| f.is_test).collect();
    assert_eq!(tests, vec![false, true, false]);
}
