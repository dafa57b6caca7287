//! Label selectors as apimachinery evaluates them.
//!
//! `LabelSelector` → [`Selector`] follows `metav1.LabelSelectorAsSelector`: a missing selector
//! selects nothing, an empty one everything; every requirement is validated as
//! `labels.NewRequirement` does, with its error messages. [`Selector`]'s `Display` is
//! `Selector.String()`, which is what `kubectl drain --pod-selector` receives.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector or requirement that apimachinery would refuse, with its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// `LabelSelectorAsSelector`'s error for an operator it does not know.
    #[error("{0:?} is not a valid label selector operator")]
    UnknownOperator(String),
    /// `labels.NewRequirement`'s aggregated field errors.
    #[error("{0}")]
    InvalidRequirement(String),
}

/// The operators a `LabelSelector` can produce (`matchLabels` entries become `Equals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Equals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One validated requirement on one label key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// `labels.NewRequirement`: the key must be a qualified name, the values valid label values,
    /// and their number fit the operator. All problems are reported together.
    pub fn new(
        key: &str,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectionError> {
        let mut errs = Vec::new();
        let key_errs = label_key_errors(key);
        if !key_errs.is_empty() {
            errs.push(format!(
                "key: Invalid value: {}: {}",
                go_quote(key),
                key_errs.join("; ")
            ));
        }
        let count_error = match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                Some("for 'in', 'notin' operators, values set can't be empty")
            }
            Operator::Equals if values.len() != 1 => {
                Some("exact-match compatibility requires one single value")
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                Some("values set must be empty for exists and does not exist")
            }
            _ => None,
        };
        if let Some(detail) = count_error {
            errs.push(format!(
                "values: Invalid value: {}: {detail}",
                json_list(&values)
            ));
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = label_value_errors(v);
            if !value_errs.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    go_quote(v),
                    value_errs.join("; ")
                ));
            }
        }
        if errs.is_empty() {
            Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            })
        } else {
            Err(SelectionError::InvalidRequirement(aggregate(errs)))
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `Requirement.Matches`: `NotIn` also matches when the label is absent.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`: `!key`, `key`, `key=value`, `key in (a,b)`, values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = || {
            let mut v: Vec<&str> = self.values.iter().map(String::as_str).collect();
            v.sort_unstable();
            v.join(",")
        };
        match self.operator {
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Exists => f.write_str(&self.key),
            Operator::Equals => write!(f, "{}={}", self.key, values()),
            Operator::In => write!(f, "{} in ({})", self.key, values()),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, values()),
        }
    }
}

/// A parsed selector: nothing, or the conjunction of requirements (none selects everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `labels.Nothing()`: what a missing `LabelSelector` becomes.
    Nothing,
    /// Requirements sorted by key; empty is `labels.Everything()`.
    Requirements(Vec<Requirement>),
}

impl Selector {
    pub fn everything() -> Selector {
        Selector::Requirements(Vec::new())
    }

    /// `metav1.LabelSelectorAsSelector`: `None` selects nothing, `{}` everything.
    pub fn from_label_selector(selector: Option<&LabelSelector>) -> Result<Self, SelectionError> {
        let Some(selector) = selector else {
            return Ok(Selector::Nothing);
        };
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(SelectionError::UnknownOperator(other.to_string())),
            };
            let values = expr.values.clone().unwrap_or_default();
            requirements.push(Requirement::new(&expr.key, operator, values)?);
        }
        Ok(Selector::everything().and(requirements))
    }

    /// `Selector.Add` (ANDs requirements): nothing stays nothing; requirements are kept sorted by key. The sort is
    /// stable, which is what Go's `sort.Sort` does for the handful of requirements selectors have.
    pub fn and(self, more: impl IntoIterator<Item = Requirement>) -> Selector {
        match self {
            Selector::Nothing => Selector::Nothing,
            Selector::Requirements(mut reqs) => {
                reqs.extend(more);
                reqs.sort_by(|a, b| a.key.cmp(&b.key));
                Selector::Requirements(reqs)
            }
        }
    }

    /// `Selector.Requirements()`: `None` for the nothing selector.
    pub fn requirements(&self) -> Option<&[Requirement]> {
        match self {
            Selector::Nothing => None,
            Selector::Requirements(r) => Some(r),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Requirements(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }
}

impl fmt::Display for Selector {
    /// `Selector.String()`: requirements joined with `,`; nothing and everything print as "".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements().into_iter().flatten().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Whether a Plan's own `nodeSelector` selects these labels (what SUC's node watch checks; the
/// hostname and plan-label requirements of SUC's node choice are not applied).
pub fn matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectionError> {
    Ok(Selector::from_label_selector(selector)?.matches(labels))
}

const LABEL_NAME_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && lower_alnum(&b[0])
            && lower_alnum(&b[b.len() - 1])
            && b.iter().all(|c| lower_alnum(c) || *c == b'-')
    })
}

/// apimachinery's `RegexError`, double spaces included.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{re}')"));
    out
}

/// `IsQualifiedName` / `IsLabelKey`: `[prefix/]name`, a DNS-1123 subdomain prefix of at most
/// 253 bytes and a name of at most 63.
pub fn label_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > DNS1123_SUBDOMAIN_MAX {
                    errs.push(format!(
                        "prefix part must be no more than {DNS1123_SUBDOMAIN_MAX} bytes"
                    ));
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!(
                        "prefix part {}",
                        regex_error(
                            DNS1123_SUBDOMAIN_ERR,
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"]
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_NAME_MAX {
        errs.push(format!(
            "name part must be no more than {LABEL_NAME_MAX} bytes"
        ));
    }
    if !is_label_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_ERR,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or at most 63 bytes of the label-name alphabet.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_NAME_MAX {
        errs.push(format!("must be no more than {LABEL_NAME_MAX} bytes"));
    }
    if !value.is_empty() && !is_label_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `utilerrors.NewAggregate(...).Error()`: one message alone, several deduplicated in brackets.
fn aggregate(errs: Vec<String>) -> String {
    let mut seen = Vec::new();
    for e in errs {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// Go's `%q` for the strings that reach error messages.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// How `field.Invalid` prints a `[]string`: JSON, `null` for none (LabelSelectorAsSelector
/// passes a nil slice when there are no values).
fn json_list(values: &[String]) -> String {
    if values.is_empty() {
        return "null".to_string();
    }
    serde_json::to_string(values).unwrap_or_default()
}

/// Label selectors as tests write them.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub(crate) fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| v.to_string()).collect())
            },
        }
    }

    pub(crate) fn sel(
        match_labels: &[(&str, &str)],
        exprs: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: if match_labels.is_empty() {
                None
            } else {
                Some(labels(match_labels))
            },
            match_expressions: if exprs.is_empty() { None } else { Some(exprs) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{expr, labels, sel};
    use super::*;

    #[test]
    fn none_selects_nothing_and_empty_selects_everything() {
        let l = labels(&[("a", "b")]);
        assert!(!matches(None, &l).expect("valid"));
        assert!(!matches(None, &BTreeMap::new()).expect("valid"));
        assert!(matches(Some(&LabelSelector::default()), &l).expect("valid"));
        assert!(matches(Some(&LabelSelector::default()), &BTreeMap::new()).expect("valid"));
        // Explicitly empty lists are still an empty selector.
        let empty_lists = LabelSelector {
            match_labels: Some(BTreeMap::new()),
            match_expressions: Some(vec![]),
        };
        assert!(matches(Some(&empty_lists), &l).expect("valid"));
    }

    #[test]
    fn operators_match_like_apimachinery() {
        let l = labels(&[("a", "1"), ("b", "2")]);
        let m = |s: LabelSelector| matches(Some(&s), &l).expect("valid");
        assert!(m(sel(&[("a", "1")], vec![])));
        assert!(!m(sel(&[("a", "2")], vec![])));
        assert!(!m(sel(&[("a", "1"), ("c", "3")], vec![])));
        assert!(m(sel(&[], vec![expr("a", "In", &["0", "1"])])));
        assert!(!m(sel(&[], vec![expr("a", "In", &["0"])])));
        assert!(!m(sel(&[], vec![expr("c", "In", &["0"])])));
        assert!(m(sel(&[], vec![expr("a", "NotIn", &["0"])])));
        assert!(!m(sel(&[], vec![expr("a", "NotIn", &["1"])])));
        // NotIn matches an absent label.
        assert!(m(sel(&[], vec![expr("c", "NotIn", &["1"])])));
        assert!(m(sel(&[], vec![expr("a", "Exists", &[])])));
        assert!(!m(sel(&[], vec![expr("c", "Exists", &[])])));
        assert!(m(sel(&[], vec![expr("c", "DoesNotExist", &[])])));
        assert!(!m(sel(&[], vec![expr("a", "DoesNotExist", &[])])));
        // Everything is ANDed.
        assert!(m(sel(
            &[("b", "2")],
            vec![expr("a", "Exists", &[]), expr("a", "NotIn", &["live"])]
        )));
        assert!(!m(sel(
            &[("b", "2")],
            vec![expr("a", "Exists", &[]), expr("a", "NotIn", &["1"])]
        )));
    }

    #[test]
    fn empty_label_values_are_valid_and_matched() {
        let l = labels(&[("a", "")]);
        assert!(matches(Some(&sel(&[("a", "")], vec![])), &l).expect("valid"));
        assert!(matches(Some(&sel(&[], vec![expr("a", "In", &[""])])), &l).expect("valid"));
    }

    #[test]
    fn invalid_selectors_are_errors_with_apimachinery_messages() {
        let err = |s: LabelSelector| {
            Selector::from_label_selector(Some(&s))
                .expect_err("invalid")
                .to_string()
        };
        assert_eq!(
            err(sel(&[], vec![expr("a", "In", &[])])),
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            err(sel(&[], vec![expr("a", "NotIn", &[])])),
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            err(sel(&[], vec![expr("a", "Exists", &["x", "y"])])),
            r#"values: Invalid value: ["x","y"]: values set must be empty for exists and does not exist"#
        );
        assert_eq!(
            err(sel(&[], vec![expr("a", "DoesNotExist", &["x"])])),
            r#"values: Invalid value: ["x"]: values set must be empty for exists and does not exist"#
        );
        assert_eq!(
            err(sel(&[], vec![expr("a", "Gt", &["1"])])),
            r#""Gt" is not a valid label selector operator"#
        );
        assert_eq!(
            err(sel(&[], vec![expr("a", "in", &["1"])])),
            r#""in" is not a valid label selector operator"#
        );
        assert_eq!(
            err(sel(&[("bad key", "v")], vec![])),
            "key: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', \
             regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert_eq!(
            err(sel(&[("k", "bad value")], vec![])),
            "values[0][k]: Invalid value: \"bad value\": a valid label must be an empty string or consist of \
             alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character \
             (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is \
             '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        // Several problems are aggregated in brackets.
        let both = err(sel(&[], vec![expr("-k", "In", &[])]));
        assert!(
            both.starts_with("[key: Invalid value: \"-k\": name part must consist")
                && both.contains(", values: Invalid value: null: for 'in'")
                && both.ends_with(']'),
            "{both}"
        );
    }

    #[test]
    fn label_keys_follow_qualified_name_rules() {
        for ok in [
            "a",
            "A.b_c-D",
            "kubernetes.io/hostname",
            "plan.upgrade.cattle.io/k3s-server",
            &format!("{}/x", "a".repeat(253)),
            &"n".repeat(63),
        ] {
            assert!(label_key_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            label_key_errors(""),
            vec![
                "name part must be non-empty".to_string(),
                format!(
                    "name part {}",
                    regex_error(
                        LABEL_KEY_ERR,
                        LABEL_KEY_FMT,
                        &["MyName", "my.name", "123-abc"]
                    )
                )
            ]
        );
        assert_eq!(
            label_key_errors(&"n".repeat(64)),
            vec!["name part must be no more than 63 bytes".to_string()]
        );
        assert_eq!(
            label_key_errors("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        let long_prefix = label_key_errors(&format!("{}/x", "a".repeat(254)));
        assert_eq!(
            long_prefix,
            vec!["prefix part must be no more than 253 bytes".to_string()]
        );
        let upper = label_key_errors("Example.com/x");
        assert_eq!(upper.len(), 1);
        assert!(
            upper[0].starts_with("prefix part a lowercase RFC 1123 subdomain"),
            "{upper:?}"
        );
        assert!(upper[0].ends_with(r"(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"));
        for bad in ["a/b/c", "-a", "a-", "a b", "a..b/c", "x/", "é"] {
            assert!(!label_key_errors(bad).is_empty(), "{bad}");
        }
        assert!(label_key_errors("a/b/c")[0].starts_with("a valid label key must consist"));
    }

    #[test]
    fn label_values_follow_label_value_rules() {
        for ok in ["", "a", "v1.30.1-k3s1", &"v".repeat(63), "A_b.c-9"] {
            assert!(label_value_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            label_value_errors(&"v".repeat(64)),
            vec!["must be no more than 63 bytes".to_string()]
        );
        for bad in ["-a", "a-", "a b", "v1.30.1+k3s1", "é"] {
            assert_eq!(label_value_errors(bad).len(), 1, "{bad}");
        }
    }

    #[test]
    fn selector_strings_match_apimachinery() {
        let s = Selector::from_label_selector(Some(&sel(
            &[("tier", "web")],
            vec![
                expr("zone", "In", &["b", "a"]),
                expr("env", "NotIn", &["prod", "dev"]),
                expr("gpu", "Exists", &[]),
                expr("app", "DoesNotExist", &[]),
                expr("one", "In", &["x"]),
            ],
        )))
        .expect("valid");
        assert_eq!(
            s.to_string(),
            "!app,env notin (dev,prod),gpu,one in (x),tier=web,zone in (a,b)"
        );
        assert_eq!(Selector::everything().to_string(), "");
        assert_eq!(Selector::Nothing.to_string(), "");
    }

    #[test]
    fn requirements_with_the_same_key_keep_their_order() {
        let s = Selector::from_label_selector(Some(&sel(
            &[("k", "v")],
            vec![expr("k", "Exists", &[]), expr("k", "NotIn", &["live"])],
        )))
        .expect("valid");
        assert_eq!(s.to_string(), "k=v,k,k notin (live)");
    }
}
