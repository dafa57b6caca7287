//! The YAML documents of a file, each with the line it starts at, so that a finding can point
//! at the line of its field.

use serde_json::Value;

use super::LintError;

/// One YAML document of a file.
#[derive(Debug, Clone)]
pub struct Document {
    /// 1-based line of the document's first line in the file.
    pub line: usize,
    pub text: String,
    pub value: Value,
}

impl Document {
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The line of a field given as a path of keys, found by looking for each key in turn
    /// below the previous one; the document's line when a key is not found.
    pub fn line_of(&self, path: &[&str]) -> usize {
        let lines: Vec<&str> = self.text.lines().collect();
        let mut at = 0;
        let mut found = 0;
        for key in path {
            let plain = format!("{key}:");
            let hit = lines.iter().enumerate().skip(at).find(|(_, l)| {
                let t = l.trim_start().trim_start_matches("- ");
                t.starts_with(&plain)
                    || t.starts_with(&format!("\"{key}\":"))
                    || t.starts_with(&format!("'{key}':"))
            });
            match hit {
                Some((i, _)) => {
                    found = i;
                    at = i + 1;
                }
                None => break,
            }
        }
        self.line + found
    }
}

/// Splits a multi-document YAML text at `---` lines and parses each non-empty document.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, LintError> {
    let mut chunks: Vec<(usize, String)> = vec![(1, String::new())];
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("---") && line[3..].trim().is_empty() || line.starts_with("--- ") {
            chunks.push((i + 2, String::new()));
            continue;
        }
        if line.starts_with("...") && line[3..].trim().is_empty() {
            continue;
        }
        if let Some((_, chunk)) = chunks.last_mut() {
            chunk.push_str(line);
            chunk.push('\n');
        }
    }
    let mut docs = Vec::new();
    for (line, chunk) in chunks {
        let meaningful = chunk.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        });
        if !meaningful {
            continue;
        }
        let value: Value = serde_saphyr::from_str(&chunk).map_err(|e| LintError::Yaml {
            line,
            message: first_line(&e.to_string()),
        })?;
        if value.is_null() {
            continue;
        }
        docs.push(Document {
            line,
            text: chunk,
            value,
        });
    }
    Ok(docs)
}

pub(super) fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}
