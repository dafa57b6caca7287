//! The `slipway` command: the wiring of `slipway run` (which operations the process runs), and the
//! offline and read-only tools; wiring and printing only, the checks and decisions they show live
//! in the library.

pub mod agent;
pub mod connect;
pub mod explain;
pub mod generate;
pub mod kinds;
pub mod process;
pub mod render;
pub mod resolve;
pub mod run;
pub mod status;
pub mod validate;

use anyhow::Context;
use serde::Serialize;

/// The format of structured output (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// For people: lines and tables.
    Text,
    /// One JSON document, for scripts and CI annotations.
    Json,
    /// One YAML document.
    Yaml,
}

/// `value` as one JSON or YAML document (`None` for [`Output::Text`], which each command writes
/// its own way), without a trailing newline.
pub fn structured<T: Serialize>(value: &T, output: Output) -> anyhow::Result<Option<String>> {
    Ok(match output {
        Output::Text => None,
        Output::Json => Some(serde_json::to_string_pretty(value)?),
        Output::Yaml => Some(
            serde_saphyr::to_string(value)
                .context("cannot write YAML")?
                .trim_end()
                .to_string(),
        ),
    })
}

/// A client from a kubeconfig path (empty: the usual lookup) and a context of it (`None`: its
/// current context), as `slipway run` builds it.
pub async fn client(kubeconfig: &str, context: Option<&str>) -> anyhow::Result<kube::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = connect::client_config(kubeconfig, "", context).await?;
    connect::client(config)
}

/// The API server's message of a failed request, on one line.
pub fn kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string().replace('\n', " "),
    }
}

/// The YAML document at `path`, read as a `T`.
pub fn read_yaml<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}
