//! The `slipway` command: the wiring of `slipway run` (which operations the process runs), and the
//! offline and read-only tools; wiring and printing only, the checks and decisions they show live
//! in the library.

pub mod agent;
pub mod render;
pub mod resolve;
pub mod run;
pub mod status;
pub mod validate;

/// A client from a kubeconfig path (empty: the usual lookup), as `slipway run` builds it.
pub async fn client(kubeconfig: &str) -> anyhow::Result<kube::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    crate::client(kubeconfig, "").await
}

/// The API server's message of a failed request, on one line.
pub fn kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string().replace('\n', " "),
    }
}
