//! `--metrics-listen` for `weir run` and `weir worker`: Prometheus metrics on an address of
//! their own, over HTTPS with `--tls-cert` and `--tls-key` (as `weir serve`'s). Uses the
//! library's `api`.

use std::path::PathBuf;

use anyhow::Context;

/// The options of a metrics endpoint.
#[derive(Debug, clap::Args)]
pub(crate) struct MetricsArgs {
    /// Serve Prometheus metrics at ADDR/metrics (no token: bind it where only the scraper can
    /// reach it, e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve the metrics over HTTPS with this certificate chain (PEM; with --tls-key).
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "metrics_listen"])]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM; with --tls-cert).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl MetricsArgs {
    /// Starts the endpoint, if one was asked for, and says where it is.
    pub(crate) fn start(self) -> anyhow::Result<()> {
        let Some(address) = self.metrics_listen else {
            return Ok(());
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(std::sync::Arc::new(weir::api::Tls::load(cert, key)?)),
            _ => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let bound = weir::api::spawn_metrics_endpoint(address, tls)
            .with_context(|| format!("--metrics-listen {address}"))?;
        eprintln!("weir: metrics on {scheme}://{bound}/metrics");
        Ok(())
    }
}
