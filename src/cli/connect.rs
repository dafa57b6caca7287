//! The Kubernetes client every command builds: its configuration from a kubeconfig (or in-cluster)
//! and the bounds slipway puts on its requests.

use std::time::Duration;

use anyhow::Context;

/// The longest silence of the API server within one answer, past which the request fails.
/// kube-rs sets none, and its HTTP/1.1 has no pings to find a dead connection (client-go's HTTP/2
/// has), so a request on a connection that died without a reset would wait forever, and with it
/// the reconcile (or the agent's loop) that made it. Above the watches' own limit (kube's watcher
/// gives up on a watch silent for 295 s), so that a quiet watch ends as it always has.
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The client of `config`, which also tells [`slipway::runtime::clock`] the API server's time from
/// the `Date` of every answer.
pub fn client(config: kube::Config) -> anyhow::Result<kube::Client> {
    let builder = kube::client::ClientBuilder::try_from(config)
        .context("cannot build the Kubernetes client")?;
    let dated = tower::util::MapResponseLayer::new(slipway::runtime::clock::observed);
    Ok(builder.with_layer(&dated).build())
}

fn bounded_reads(config: &mut kube::Config, silence: Duration) {
    config.read_timeout = Some(silence);
    // Counted from the request sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
}

/// The configuration of a kubeconfig path (empty: the usual lookup, in-cluster included) and one
/// of its contexts (`None`: the current one; a context needs a kubeconfig, so no in-cluster then).
pub async fn client_config(
    kubeconfig: &str,
    master: &str,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = match (kubeconfig, context) {
        ("", None) => kube::Config::infer()
            .await
            .context("cannot find a Kubernetes configuration")?,
        ("", Some(c)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("cannot use context {c:?} of the kubeconfig"))?,
        (path, _) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {path}"))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| match context {
                    Some(c) => format!("cannot use context {c:?} of kubeconfig {path}"),
                    None => format!("cannot use kubeconfig {path}"),
                })?
        }
    };
    if !master.is_empty() {
        config.cluster_url = master
            .parse()
            .with_context(|| format!("bad --master URL {master}"))?;
    }
    bounded_reads(&mut config, READ_TIMEOUT);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that takes the request and never answers: with reads bounded, the request fails
    /// instead of waiting forever.
    #[tokio::test]
    async fn a_request_the_api_server_never_answers_fails() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        let mut config = kube::Config::new(url.parse().expect("a URL"));
        bounded_reads(&mut config, Duration::from_millis(200));
        let client = kube::Client::try_from(config).expect("a client");
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let answer = tokio::time::timeout(Duration::from_secs(30), nodes.get("n1"))
            .await
            .expect("the request ended by itself");
        assert!(answer.is_err(), "{answer:?}");
        held.abort();
    }
}
