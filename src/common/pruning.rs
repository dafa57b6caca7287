//! What an installed CRD's schema drops of ours. The API server prunes every field its CRD's
//! structural schema does not name, at admission and on every status write, without an error:
//! on a CRD someone else owns (SUC's chart, Rancher's), slipway's own fields and status vanish.
//! Comparing the two schemas says which, so that the objects can say so.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The fields of `ours` that `installed` prunes, as dotted paths (`spec.reboot`, a list's items
/// as `[]`: `status.conditions[].observedGeneration`), the outermost only, sorted;
/// empty when `installed` keeps everything. The schemas compared are those of `version`; a CRD
/// that does not serve it prunes nothing that can be told, and gives none.
pub fn pruned(
    ours: &CustomResourceDefinition,
    installed: &CustomResourceDefinition,
    version: &str,
) -> Vec<String> {
    let schema = |crd: &CustomResourceDefinition| {
        (crd.spec.versions.iter())
            .find(|v| v.name == version)
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
    };
    let mut out = Vec::new();
    if let (Some(ours), Some(installed)) = (schema(ours), schema(installed)) {
        walk(&ours, &installed, "", &mut out);
    }
    out.sort();
    out
}

fn walk(ours: &Value, installed: &Value, path: &str, out: &mut Vec<String>) {
    if installed["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        return;
    }
    if let Some(properties) = ours["properties"].as_object() {
        for (name, sub) in properties {
            let at = match path {
                "" => name.clone(),
                _ => format!("{path}.{name}"),
            };
            match kept(installed, name) {
                Some(theirs) => walk(sub, theirs, &at, out),
                None => out.push(at),
            }
        }
    }
    if let (Some(o), Some(i)) = (ours.get("items"), installed.get("items")) {
        walk(o, i, &format!("{path}[]"), out);
    }
    if let (Some(o), Some(i)) = (
        ours["additionalProperties"].as_object(),
        installed["additionalProperties"].as_object(),
    ) {
        walk(
            &Value::Object(o.clone()),
            &Value::Object(i.clone()),
            &format!("{path}{{}}"),
            out,
        );
    }
}

/// The schema `installed` keeps the property `name` under: its own, or a map's values; `None`
/// when it is pruned.
fn kept<'a>(installed: &'a Value, name: &str) -> Option<&'a Value> {
    if let Some(own) = installed["properties"].get(name) {
        return Some(own);
    }
    match &installed["additionalProperties"] {
        Value::Bool(true) => Some(&Value::Null),
        v @ Value::Object(_) => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(schema: Value) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": {"name": "things.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Thing", "plural": "things"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]
            }
        }))
        .expect("a CRD")
    }

    fn object(properties: Value) -> Value {
        json!({"type": "object", "properties": properties})
    }

    #[test]
    fn a_schema_keeps_what_it_names_and_prunes_the_rest_outermost_first() {
        let string = json!({"type": "string"});
        let ours = crd(object(json!({
            "spec": object(json!({
                "image": string,
                "reboot": object(json!({"timeout": string})),
                "drain": object(json!({"force": string, "podSelector": string})),
                "list": {"type": "array", "items": object(json!({"a": string, "b": string}))},
                "labels": {"type": "object", "additionalProperties": object(json!({"x": string}))},
                "free": object(json!({"x": string}))
            })),
            "status": object(json!({"nodes": string}))
        })));
        let installed = crd(object(json!({
            "spec": object(json!({
                "image": string,
                "drain": object(json!({"force": string})),
                "list": {"type": "array", "items": object(json!({"a": string}))},
                "labels": {"type": "object", "additionalProperties": {"type": "object"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            })),
            "status": {"type": "object"}
        })));
        assert_eq!(
            pruned(&ours, &installed, "v1"),
            [
                "spec.drain.podSelector",
                "spec.labels{}.x",
                "spec.list[].b",
                "spec.reboot",
                "status.nodes"
            ]
        );
        assert!(pruned(&ours, &ours, "v1").is_empty());
        assert!(
            pruned(&ours, &installed, "v2").is_empty(),
            "a version not served"
        );
    }
}
