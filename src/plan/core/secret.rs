//! Secrets read from files, made what the API server would store. The controller only ever sees
//! stored Secrets, and the latestHash covers a Secret's `data` and `type`, so a Secret taken from
//! a manifest must be read as the API server writes it: `stringData` merged over `data` (the
//! API server keeps the plain text's UTF-8 bytes and returns no `stringData`), an empty `type`
//! defaulted to `Opaque`, and an empty `data` map stored as none.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

/// The `type` the API server gives a Secret that names none.
pub const DEFAULT_TYPE: &str = "Opaque";

/// `secret` as the API server would store it.
pub fn as_stored(mut secret: Secret) -> Secret {
    if let Some(plain) = secret.string_data.take() {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for (key, value) in plain {
            data.insert(key, ByteString(value.into_bytes()));
        }
    }
    if secret.data.as_ref().is_some_and(BTreeMap::is_empty) {
        secret.data = None;
    }
    if secret.type_.as_deref().is_none_or(str::is_empty) {
        secret.type_ = Some(DEFAULT_TYPE.to_string());
    }
    secret
}

/// A Secret manifest (YAML or JSON, as a value) as the API server would store it.
pub fn from_manifest(value: &serde_json::Value) -> Result<Secret, serde_json::Error> {
    serde_json::from_value(value.clone()).map(as_stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::hash::kubectl_secret_hash;
    use crate::plan::core::lint::parse_documents;

    fn manifest(yaml: &str) -> Secret {
        let docs = parse_documents(yaml).expect("yaml");
        from_manifest(&docs[0].value).expect("a Secret")
    }

    fn data(secret: &Secret) -> BTreeMap<String, String> {
        secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
            .collect()
    }

    #[test]
    fn string_data_is_merged_over_data() {
        // `b` is in both: the plain text wins, as on the API server.
        let s = manifest(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ntype: Opaque\ndata:\n  a: YQ==\n  b: b2xk\nstringData:\n  b: new\n  c: \"ünïcode\\n\"\n",
        );
        assert_eq!(s.string_data, None);
        assert_eq!(
            data(&s),
            BTreeMap::from([
                ("a".to_string(), "a".to_string()),
                ("b".to_string(), "new".to_string()),
                ("c".to_string(), "ünïcode\n".to_string()),
            ])
        );
    }

    #[test]
    fn both_ways_of_writing_a_secret_hash_the_same() {
        let plain = manifest(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  k: value\n",
        );
        let encoded = manifest(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ntype: Opaque\ndata:\n  k: dmFsdWU=\n",
        );
        assert_eq!(plain, encoded);
        assert_eq!(kubectl_secret_hash(&plain), kubectl_secret_hash(&encoded));
        let empty = manifest("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n");
        assert_ne!(kubectl_secret_hash(&plain), kubectl_secret_hash(&empty));
    }

    #[test]
    fn an_empty_secret_is_stored_without_data_and_opaque() {
        let bare = manifest("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n");
        let empty_maps = manifest(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ntype: \"\"\ndata: {}\nstringData: {}\n",
        );
        assert_eq!(bare.data, None);
        assert_eq!(bare.type_.as_deref(), Some("Opaque"));
        assert_eq!(bare, empty_maps);
        let typed = manifest(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ntype: kubernetes.io/tls\n",
        );
        assert_eq!(typed.type_.as_deref(), Some("kubernetes.io/tls"));
    }
}
