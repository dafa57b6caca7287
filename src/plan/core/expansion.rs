//! Kubernetes `$(VAR)` expansion (`third_party/forked/golang/expansion`), as SUC applies it to
//! `spec.postCompleteLabels`.

use std::collections::BTreeMap;

/// Expands `$(NAME)` with `lookup`; an undefined name stays `$(NAME)`, `$$` becomes `$`, and any
/// other `$` (including an unclosed `$(`) is kept as written.
pub fn expand<'a>(input: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    // Every index used to slice follows an ASCII byte (`$`, `(` or `)`), so slices stay on
    // character boundaries.
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            match bytes[cursor + 1] {
                b'$' => {
                    out.push('$');
                    cursor += 2;
                    checkpoint = cursor;
                }
                b'(' => match input[cursor + 2..].find(')') {
                    Some(len) => {
                        let name = &input[cursor + 2..cursor + 2 + len];
                        match lookup(name) {
                            Some(value) => out.push_str(value),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        cursor += 2 + len + 1;
                        checkpoint = cursor;
                    }
                    None => {
                        // An incomplete reference is copied, and scanning resumes after `$(`.
                        out.push_str("$(");
                        cursor += 2;
                        checkpoint = cursor;
                    }
                },
                _ => {
                    out.push('$');
                    cursor += 1;
                    checkpoint = cursor;
                }
            }
        } else {
            cursor += 1;
        }
    }
    out.push_str(&input[checkpoint..]);
    out
}

/// The node labels that `spec.postCompleteLabels` sets after a successful upgrade, with
/// `$(LATEST_VERSION)` and `$(LATEST_HASH)` expanded.
pub fn expand_post_complete_labels(
    labels: &BTreeMap<String, String>,
    latest_version: &str,
    latest_hash: &str,
) -> BTreeMap<String, String> {
    let lookup = |name: &str| match name {
        "LATEST_VERSION" => Some(latest_version),
        "LATEST_HASH" => Some(latest_hash),
        _ => None,
    };
    labels
        .iter()
        .map(|(k, v)| (k.clone(), expand(v, lookup)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(input: &str) -> String {
        expand(input, |name| match name {
            "V" => Some("v1"),
            "EMPTY" => Some(""),
            _ => None,
        })
    }

    #[test]
    fn expands_like_kubernetes() {
        let cases = [
            ("", ""),
            ("plain", "plain"),
            ("$(V)", "v1"),
            ("a-$(V)-b", "a-v1-b"),
            ("$(V)$(V)", "v1v1"),
            ("$(EMPTY)x", "x"),
            ("$(UNDEFINED)", "$(UNDEFINED)"),
            ("$$(V)", "$(V)"),
            ("$$$(V)", "$v1"),
            ("$$", "$"),
            ("$$$$", "$$"),
            ("$", "$"),
            ("a$", "a$"),
            ("$x", "$x"),
            ("$(V", "$(V"),
            ("$(", "$("),
            ("$()", "$()"),
            ("$($(V))", "$($(V))"),
            ("$(V)$", "v1$"),
            ("é$(V)ü", "év1ü"),
        ];
        for (input, want) in cases {
            assert_eq!(x(input), want, "{input:?}");
        }
    }

    #[test]
    fn post_complete_labels_expand_version_and_hash_only() {
        let labels: BTreeMap<String, String> = [
            ("example.com/version", "$(LATEST_VERSION)"),
            ("example.com/hash", "h-$(LATEST_HASH)"),
            ("example.com/static", "yes"),
            ("example.com/other", "$(PLAN_NAME)"),
            ("example.com/escaped", "$$(LATEST_VERSION)"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let out = expand_post_complete_labels(&labels, "v1.30.1-k3s1", "abc");
        assert_eq!(out["example.com/version"], "v1.30.1-k3s1");
        assert_eq!(out["example.com/hash"], "h-abc");
        assert_eq!(out["example.com/static"], "yes");
        assert_eq!(out["example.com/other"], "$(PLAN_NAME)");
        assert_eq!(out["example.com/escaped"], "$(LATEST_VERSION)");
        assert_eq!(out.len(), 5);
    }
}
