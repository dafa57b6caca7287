//! Health checks read only what the health checks' ServiceAccount may read (the controller asks
//! the API server before each read): scenes grant it what their checks read, as a user would.

use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The account a controller of namespace `controller_ns` reads health checks with (its default).
pub fn account(controller_ns: &str) -> (String, String) {
    (
        controller_ns.to_string(),
        slipway::runtime::checks::CheckAccount::DEFAULT_NAME.to_string(),
    )
}

/// Lets the health checks' account of `controller_ns` do `rules` in `namespace`: a Role and its
/// RoleBinding, both named `name`, gone with the namespace.
pub async fn grant(
    client: &Client,
    namespace: &str,
    controller_ns: &str,
    name: &str,
    rules: Value,
) {
    let (sa_ns, sa) = account(controller_ns);
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace}, "rules": rules,
    }))
    .expect("a Role");
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the checks' Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the checks' Role");
}
