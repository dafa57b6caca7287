//! `status.latestHash`, byte-compatible with system-upgrade-controller.
//!
//! The hash is the value of the `plan.upgrade.cattle.io/<plan>` node label, so any difference from
//! SUC would re-run every Plan on every node after a controller swap. It is SHA-224, as lower-case
//! hex, over the concatenation of:
//! 1. the resolved version (`+` already replaced by `-`);
//! 2. `spec.serviceAccountName`;
//! 3. for each comma-separated dotted path in the `upgrade.cattle.io/digest` annotation, the value at
//!    that path of the Plan as Go encodes it, formatted as wrangler's `convert.ToString` does;
//! 4. for each Secret in `spec.secrets` without `ignoreUpdates`, kubectl's `SecretHash`.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::core::v1::Secret;
use serde_json::{Map, Value};
use sha2::{Digest, Sha224, Sha256};

use crate::common::duration::GoDuration;
use crate::common::naming::hex;
use crate::plan::api::{Plan, labels};

/// Why a hash could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// Secrets that the Plan references (without `ignoreUpdates`) and that do not exist.
    #[error("{}", .0.iter().map(|n| format!("secret {n:?} not found")).collect::<Vec<_>>().join(", "))]
    MissingSecrets(Vec<String>),
    #[error("cannot encode the plan: {0}")]
    Encode(String),
}

/// The raw hash over already-gathered inputs.
pub fn latest_hash(
    latest_version: &str,
    service_account_name: &str,
    digest_values: &[String],
    secret_hashes: &[String],
) -> String {
    let mut h = Sha224::new();
    h.update(latest_version.as_bytes());
    h.update(service_account_name.as_bytes());
    for v in digest_values {
        h.update(v.as_bytes());
    }
    for s in secret_hashes {
        h.update(s.as_bytes());
    }
    hex(&h.finalize())
}

/// The `latestHash` of `plan` at `latest_version`, given the Secrets of its namespace by name.
pub fn plan_latest_hash(
    plan: &Plan,
    latest_version: &str,
    secrets: &BTreeMap<String, Secret>,
) -> Result<String, HashError> {
    let digest_values = digest_values(plan)?;
    let mut secret_hashes = Vec::new();
    let mut missing = Vec::new();
    for s in plan.spec.secrets.iter().flatten() {
        if s.ignore_updates.unwrap_or(false) {
            continue;
        }
        match secrets.get(&s.name) {
            Some(secret) => secret_hashes.push(kubectl_secret_hash(secret)),
            None => missing.push(s.name.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(HashError::MissingSecrets(missing));
    }
    Ok(latest_hash(
        latest_version,
        plan.spec.service_account_name.as_deref().unwrap_or(""),
        &digest_values,
        &secret_hashes,
    ))
}

/// The strings that the `upgrade.cattle.io/digest` annotation adds to the hash, in order.
pub fn digest_values(plan: &Plan) -> Result<Vec<String>, HashError> {
    let Some(paths) = plan
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DIGEST))
    else {
        return Ok(Vec::new());
    };
    let view = go_view(plan)?;
    // Like SUC: split on ',' and '.', no trimming, so "a, b" looks up the key " b".
    Ok(paths
        .split(',')
        .map(|path| {
            let mut at = Some(&view);
            for key in path.split('.') {
                at = at.and_then(|v| v.as_object()).and_then(|m| m.get(key));
            }
            wrangler_to_string(at)
        })
        .collect())
}

/// kubectl's `hash.SecretHash`: the first ten hex digits of sha256 over a JSON encoding of the
/// Secret's kind, name, type, data (and immutable), with some digits replaced by letters.
pub fn kubectl_secret_hash(secret: &Secret) -> String {
    let mut m = Map::new();
    let data = match &secret.data {
        Some(data) => Value::Object(
            data.iter()
                .map(|(k, v)| (k.clone(), Value::String(base64_std(&v.0))))
                .collect(),
        ),
        None => Value::Null,
    };
    m.insert("data".into(), data);
    if let Some(immutable) = secret.immutable {
        m.insert("immutable".into(), Value::Bool(immutable));
    }
    m.insert("kind".into(), Value::String("Secret".into()));
    m.insert(
        "name".into(),
        Value::String(secret.metadata.name.clone().unwrap_or_default()),
    );
    m.insert(
        "type".into(),
        Value::String(secret.type_.clone().unwrap_or_default()),
    );
    let encoded = go_json(&Value::Object(m));
    encode_hash(&hex(&Sha256::digest(encoded.as_bytes())))
}

fn encode_hash(hex: &str) -> String {
    hex.chars()
        .take(10)
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            c => c,
        })
        .collect()
}

/// Go's `json.Marshal` of a generic value: sorted keys, no spaces, and HTML-safe escaping.
fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(&map[k], out);
            }
            out.push('}');
        }
    }
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn base64_std(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// wrangler's `convert.ToString`: a list stands for its first element, missing is "", and the
/// rest is Go's `fmt.Sprint`, trimmed.
fn wrangler_to_string(value: Option<&Value>) -> String {
    let single = match value {
        None | Some(Value::Null) => return String::new(),
        Some(Value::Array(items)) => match items.first() {
            None | Some(Value::Null) => return String::new(),
            Some(first) => first,
        },
        Some(v) => v,
    };
    let mut out = String::new();
    go_sprint(single, &mut out);
    out.trim().to_string()
}

/// Go's `fmt.Sprint` of a JSON-decoded `interface{}` (numbers as `json.Number`).
fn go_sprint(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                go_sprint(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                go_sprint(&map[k], out);
            }
            out.push(']');
        }
    }
}

/// The Plan as SUC's Go types would encode it: fields Go does not model are gone, zero values of
/// `omitempty` non-pointer fields are gone, and `postCompleteDelay` is in Go's duration format.
pub fn go_view(plan: &Plan) -> Result<Value, HashError> {
    let mut v = serde_json::to_value(plan).map_err(|e| HashError::Encode(e.to_string()))?;
    // Go decodes from the informer, whose objects carry no apiVersion/kind.
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    if let Some(meta) = v.get_mut("metadata") {
        drop_empty_recursive(meta);
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        go_spec(spec);
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        go_status(status);
    }
    Ok(v)
}

/// `PlanSpec`: its fields, the `omitempty` ones dropped when zero.
fn go_spec(spec: &mut Map<String, Value>) {
    keep_known(
        spec,
        &[
            "concurrency",
            "jobActiveDeadlineSecs",
            "nodeSelector",
            "serviceAccountName",
            "channel",
            "version",
            "secrets",
            "tolerations",
            "exclusive",
            "window",
            "prepare",
            "upgrade",
            "cordon",
            "drain",
            "imagePullSecrets",
            "postCompleteDelay",
            "priorityClassName",
            "postCompleteLabels",
        ],
    );
    drop_zero(
        spec,
        &[
            "concurrency",
            "serviceAccountName",
            "channel",
            "version",
            "secrets",
            "tolerations",
            "exclusive",
            "cordon",
            "imagePullSecrets",
            "priorityClassName",
            "postCompleteLabels",
        ],
    );
    if let Some(Value::String(d)) = spec.get_mut("postCompleteDelay")
        && let Ok(parsed) = d.parse::<GoDuration>()
    {
        *d = parsed.to_string();
    }
    for key in ["nodeSelector", "tolerations", "imagePullSecrets"] {
        if let Some(inner) = spec.get_mut(key) {
            drop_empty_recursive(inner);
        }
    }
    for key in ["prepare", "upgrade"] {
        if let Some(Value::Object(c)) = spec.get_mut(key) {
            go_container(c);
        }
    }
    if let Some(Value::Array(secrets)) = spec.get_mut("secrets") {
        for s in secrets.iter_mut().filter_map(Value::as_object_mut) {
            keep_known(s, &["name", "path", "ignoreUpdates", "defaultMode"]);
            drop_zero(s, &["ignoreUpdates"]);
        }
    }
    if let Some(Value::Object(d)) = spec.get_mut("drain") {
        go_drain(d);
    }
    if let Some(Value::Object(w)) = spec.get_mut("window") {
        keep_known(w, &["days", "startTime", "endTime", "timeZone"]);
        drop_zero(w, &["days", "startTime", "endTime", "timeZone"]);
    }
}

/// `ContainerSpec`.
fn go_container(c: &mut Map<String, Value>) {
    keep_known(
        c,
        &[
            "image",
            "command",
            "args",
            "envs",
            "envFrom",
            "volumes",
            "securityContext",
        ],
    );
    drop_zero(
        c,
        &["image", "command", "args", "envs", "envFrom", "volumes"],
    );
    for inner in ["envs", "envFrom", "securityContext"] {
        if let Some(x) = c.get_mut(inner) {
            drop_empty_recursive(x);
        }
    }
    if let Some(Value::Array(vols)) = c.get_mut("volumes") {
        for vol in vols.iter_mut().filter_map(Value::as_object_mut) {
            keep_known(vol, &["name", "source", "destination"]);
        }
    }
}

/// `DrainSpec`.
fn go_drain(d: &mut Map<String, Value>) {
    keep_known(
        d,
        &[
            "timeout",
            "gracePeriod",
            "deleteLocalData",
            "deleteEmptydirData",
            "ignoreDaemonSets",
            "force",
            "disableEviction",
            "skipWaitForDeleteTimeout",
            "podSelector",
        ],
    );
    drop_zero(d, &["force", "disableEviction", "skipWaitForDeleteTimeout"]);
    if let Some(sel) = d.get_mut("podSelector") {
        drop_empty_recursive(sel);
    }
}

/// `PlanStatus` and its conditions (wrangler's `GenericCondition`).
fn go_status(status: &mut Map<String, Value>) {
    let fields = ["conditions", "latestVersion", "latestHash", "applying"];
    keep_known(status, &fields);
    drop_zero(status, &fields);
    if let Some(Value::Array(conds)) = status.get_mut("conditions") {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            keep_known(
                c,
                &[
                    "type",
                    "status",
                    "lastUpdateTime",
                    "lastTransitionTime",
                    "reason",
                    "message",
                ],
            );
            drop_zero(
                c,
                &["lastUpdateTime", "lastTransitionTime", "reason", "message"],
            );
        }
    }
}

fn keep_known(m: &mut Map<String, Value>, known: &[&str]) {
    m.retain(|k, _| known.contains(&k.as_str()));
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn drop_zero(m: &mut Map<String, Value>, omitempty: &[&str]) {
    m.retain(|k, v| !(omitempty.contains(&k.as_str()) && is_zero(v)));
}

/// Kubernetes' own Go types mark strings, lists and maps `omitempty` (scalars with a meaningful
/// zero are pointers), so empty strings, lists and maps vanish while `false` and `0` stay.
fn drop_empty_recursive(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| {
                drop_empty_recursive(x);
                !matches!(x, Value::Null)
                    && !matches!(x, Value::String(s) if s.is_empty())
                    && !matches!(x, Value::Array(a) if a.is_empty())
                    && !matches!(x, Value::Object(o) if o.is_empty())
            });
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty_recursive),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::{PlanSpec, SecretSpec};
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    const VECTOR: &str = "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e";

    fn plan(yaml: &str) -> Plan {
        serde_saphyr::from_str(yaml).expect("test plan parses")
    }

    fn secret(name: &str, type_: Option<&str>, data: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            type_: type_.map(Into::into),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn known_vector_from_suc() {
        assert_eq!(
            latest_hash("v1.30.1-k3s1", "system-upgrade", &[], &[]),
            VECTOR
        );
    }

    #[test]
    fn plan_hash_of_plain_plan_is_the_vector() {
        let p = Plan {
            spec: PlanSpec {
                service_account_name: Some("system-upgrade".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let h = plan_latest_hash(&p, "v1.30.1-k3s1", &BTreeMap::new()).expect("hash");
        assert_eq!(h, VECTOR);
    }

    #[test]
    fn hash_is_a_plain_concatenation_without_separators() {
        // "ab" + "c" and "a" + "bc" collide by construction, as in SUC.
        assert_eq!(
            latest_hash("ab", "c", &[], &[]),
            latest_hash("a", "bc", &[], &[])
        );
        assert_eq!(
            latest_hash("v1", "sa", &["x".into()], &["y".into()]),
            latest_hash("v1sa", "", &["xy".into()], &[])
        );
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64_std(b""), "");
        assert_eq!(base64_std(b"f"), "Zg==");
        assert_eq!(base64_std(b"fo"), "Zm8=");
        assert_eq!(base64_std(b"foo"), "Zm9v");
        assert_eq!(base64_std(b"foob"), "Zm9vYg==");
        assert_eq!(base64_std(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn kubectl_secret_hash_encoding() {
        // The JSON kubectl hashes, built by hand with Go's sorted keys.
        let s = secret("my-secret", Some("Opaque"), &[("a", b"x"), ("b", b"y")]);
        let encoded = r#"{"data":{"a":"eA==","b":"eQ=="},"kind":"Secret","name":"my-secret","type":"Opaque"}"#;
        let expected = encode_hash(&hex(&Sha256::digest(encoded.as_bytes())));
        assert_eq!(kubectl_secret_hash(&s), expected);
        assert_eq!(expected.len(), 10);
    }

    #[test]
    fn kubectl_secret_hash_known_values() {
        // The cases of kubectl's own pkg/util/hash tests.
        let with = |data: &[(&str, &[u8])]| Secret {
            type_: Some("my-type".into()),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        };
        assert_eq!(kubectl_secret_hash(&with(&[])), "t75bgf6ctb");
        assert_eq!(kubectl_secret_hash(&with(&[("one", b"")])), "74bd68bm66");
        assert_eq!(
            kubectl_secret_hash(&with(&[("two", b"2"), ("one", b""), ("three", b"3")])),
            "dgcb6h9tmk"
        );
    }

    #[test]
    fn encode_hash_replaces_only_the_listed_digits() {
        assert_eq!(encode_hash("0123456789abcdef"), "gh2k456789");
        assert_eq!(encode_hash("abcdeabcde"), "mbcdtmbcdt");
    }

    #[test]
    fn immutable_is_hashed_only_when_set() {
        let mut s = secret("s", None, &[]);
        let plain = kubectl_secret_hash(&s);
        s.immutable = Some(false);
        assert_ne!(kubectl_secret_hash(&s), plain);
    }

    #[test]
    fn go_json_escapes_html_like_go() {
        assert_eq!(
            go_json(&Value::String("<a&b>".into())),
            r#""\u003ca\u0026b\u003e""#
        );
    }

    #[test]
    fn secrets_are_hashed_in_spec_order_unless_ignored() {
        let mut p = Plan::default();
        p.spec.service_account_name = Some("sa".into());
        p.spec.secrets = Some(vec![
            SecretSpec {
                name: "b".into(),
                path: "b".into(),
                ..Default::default()
            },
            SecretSpec {
                name: "ignored".into(),
                path: "i".into(),
                ignore_updates: Some(true),
                ..Default::default()
            },
            SecretSpec {
                name: "a".into(),
                path: "a".into(),
                ..Default::default()
            },
        ]);
        let a = secret("a", Some("Opaque"), &[("k", b"1")]);
        let b = secret("b", Some("Opaque"), &[("k", b"2")]);
        let secrets: BTreeMap<_, _> = [("a".to_string(), a.clone()), ("b".to_string(), b.clone())]
            .into_iter()
            .collect();
        let h = plan_latest_hash(&p, "v1", &secrets).expect("hash");
        let expected = latest_hash(
            "v1",
            "sa",
            &[],
            &[kubectl_secret_hash(&b), kubectl_secret_hash(&a)],
        );
        assert_eq!(h, expected);
    }

    #[test]
    fn a_missing_secret_is_an_error_naming_it_and_ignored_ones_are_not_needed() {
        let mut p = Plan::default();
        p.spec.secrets = Some(vec![
            SecretSpec {
                name: "gone".into(),
                path: "x".into(),
                ..Default::default()
            },
            SecretSpec {
                name: "optional".into(),
                path: "y".into(),
                ignore_updates: Some(true),
                ..Default::default()
            },
        ]);
        let err = plan_latest_hash(&p, "v1", &BTreeMap::new()).unwrap_err();
        assert_eq!(err, HashError::MissingSecrets(vec!["gone".into()]));
        assert_eq!(err.to_string(), r#"secret "gone" not found"#);
    }

    #[test]
    fn a_changed_secret_changes_the_hash() {
        let mut p = Plan::default();
        p.spec.secrets = Some(vec![SecretSpec {
            name: "s".into(),
            path: "s".into(),
            ..Default::default()
        }]);
        let one: BTreeMap<_, _> = [("s".to_string(), secret("s", None, &[("k", b"1")]))].into();
        let two: BTreeMap<_, _> = [("s".to_string(), secret("s", None, &[("k", b"2")]))].into();
        assert_ne!(
            plan_latest_hash(&p, "v1", &one).expect("hash"),
            plan_latest_hash(&p, "v1", &two).expect("hash")
        );
    }

    const DIGEST_PLAN: &str = r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: p
  namespace: system-upgrade
  annotations:
    upgrade.cattle.io/digest: "spec.concurrency,spec.upgrade.envs,spec.upgrade.args,spec.missing.path,spec.cordon,spec.drain,spec.postCompleteDelay, spec.version,spec.upgrade.image"
spec:
  concurrency: 2
  cordon: false
  version: v1
  postCompleteDelay: 90s
  drain:
    force: false
    deleteLocalData: false
    timeout: 300000000000
  upgrade:
    image: rancher/k3s-upgrade
    args: ["  upgrade  ", "second"]
    envs:
    - name: B
      value: "2"
      valueFrom: null
    - name: A
      value: "1"
"#;

    #[test]
    fn digest_values_are_formatted_like_wrangler() {
        let p = plan(DIGEST_PLAN);
        let values = digest_values(&p).expect("digest");
        assert_eq!(
            values,
            vec![
                "2".to_string(),
                // First list element only, map printed Go-style with sorted keys.
                "map[name:B value:2]".into(),
                // First element, trimmed.
                "upgrade".into(),
                "".into(),
                // A false non-pointer bool is omitted by Go, so the path is missing.
                "".into(),
                // *bool false stays; bool false goes; ints print as decimal text.
                "map[deleteLocalData:false timeout:300000000000]".into(),
                // metav1.Duration prints in Go's format.
                "1m30s".into(),
                // Not trimmed: the key is " spec", which does not exist.
                "".into(),
                "rancher/k3s-upgrade".into(),
            ]
        );
    }

    #[test]
    fn go_sprint_of_nested_values() {
        let v: Value = serde_json::json!({"b": [1, "x", null, true], "a": {"d": [], "c": {}}});
        let mut out = String::new();
        go_sprint(&v, &mut out);
        assert_eq!(out, "map[a:map[c:map[] d:[]] b:[1 x <nil> true]]");
        assert_eq!(wrangler_to_string(Some(&serde_json::json!([]))), "");
        assert_eq!(wrangler_to_string(Some(&serde_json::json!(["  x "]))), "x");
        assert_eq!(wrangler_to_string(None), "");
    }

    #[test]
    fn the_digest_annotation_changes_the_hash_only_through_its_values() {
        let p = plan(DIGEST_PLAN);
        let h = plan_latest_hash(&p, "v1", &BTreeMap::new()).expect("hash");
        let values = digest_values(&p).expect("digest");
        assert_eq!(h, latest_hash("v1", "", &values, &[]));
        assert_ne!(h, latest_hash("v1", "", &[], &[]));
    }

    #[test]
    fn slipway_only_fields_are_invisible_to_the_digest() {
        let mut p = plan(DIGEST_PLAN);
        p.metadata.annotations = Some(
            [(labels::DIGEST.to_string(), "status".to_string())]
                .into_iter()
                .collect(),
        );
        p.status = Some(crate::plan::api::PlanStatus {
            latest_version: Some("v1".into()),
            observed_generation: Some(3),
            ..Default::default()
        });
        assert_eq!(
            digest_values(&p).expect("digest"),
            vec!["map[latestVersion:v1]".to_string()]
        );
    }

    #[test]
    fn spec_disruption_is_invisible_to_a_digest_of_the_spec() {
        let mut p = plan(DIGEST_PLAN);
        p.metadata.annotations = Some(
            [(labels::DIGEST.to_string(), "spec".to_string())]
                .into_iter()
                .collect(),
        );
        let before = digest_values(&p).expect("digest");
        p.spec.disruption = Some(crate::node::disruption::DisruptionSpec {
            silence: Some(crate::node::disruption::SilenceSpec {
                matchers: vec![crate::node::disruption::Matcher {
                    name: "instance".into(),
                    value: "$(NODE_NAME)".into(),
                    is_regex: false,
                    is_equal: true,
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(digest_values(&p).expect("digest"), before);
        assert!(!before[0].contains("disruption"));
    }
}
