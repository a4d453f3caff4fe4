//! The `/metrics` HTTP endpoint of a live process (axum), serving the
//! Prometheus text exposition format gathered by a [`MetricsSource`] on
//! every request.

use super::source::MetricsSource;
use std::net::SocketAddr;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    /// Another process holds the address.
    #[error(
        "the metrics address {0} is already in use (another weft fabric or exporter?); choose another port, or port 0 for any free one"
    )]
    InUse(SocketAddr),
    /// Any other bind failure.
    #[error("cannot listen for metrics on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

/// A running endpoint; dropping it stops the server.
pub struct MetricsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` (port 0: any free port). Separate from [`serve`] so that a
/// bad address fails before anything else starts.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, MetricsServerError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => MetricsServerError::InUse(addr),
        _ => MetricsServerError::Bind(addr, e),
    })
}

/// Serves `/metrics` from `source` on `listener`.
pub fn serve(listener: tokio::net::TcpListener, source: MetricsSource) -> Result<MetricsServer, MetricsServerError> {
    use axum::http::header::CONTENT_TYPE;
    use axum::routing::get;
    let addr = listener.local_addr().map_err(|e| MetricsServerError::Bind(([0, 0, 0, 0], 0).into(), e))?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let source = source.clone();
                async move { ([(CONTENT_TYPE, prometheus::TEXT_FORMAT)], source.gather().await.to_text()) }
            }),
        )
        .route("/", get(|| async { "weft emu-node: metrics at /metrics\n" }));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(MetricsServer { addr, task })
}
