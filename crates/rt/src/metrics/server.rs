//! The `/metrics` HTTP endpoint of a live process (axum), serving the
//! Prometheus text exposition format gathered by a [`MetricsSource`] on
//! every request.
//!
//! On loopback it is plain HTTP. Reachable from other machines it is HTTPS
//! with the fabric's certificate, and a request must carry the fabric token
//! as a bearer credential ([`MetricsAccess`]); any other request gets 401
//! and no metrics.

use super::source::MetricsSource;
use std::net::SocketAddr;
use std::time::Duration;

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

/// Who may read an endpoint reachable from other machines: HTTPS with
/// `identity`, and `Authorization: Bearer <token>` on every request.
#[derive(Clone)]
pub struct MetricsAccess {
    /// The certificate and key the endpoint presents.
    pub identity: crate::tls::FabricIdentity,
    /// The bearer credential a request must carry.
    pub token: String,
}

/// A listener whose connections have completed a TLS handshake. Each
/// accepted TCP connection is handshaken in a task of its own (one that
/// fails or takes over 5 s drops that connection only), so a slow or silent
/// client never holds up the next one (a Prometheus scrape waiting behind
/// it would time out).
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn new(tcp: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor, addr: SocketAddr) -> Self {
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let Ok((conn, from)) = tcp.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) = tokio::time::timeout(std::time::Duration::from_secs(5), acceptor.accept(conn)).await {
                        let _ = tx.send((tls, from)).await;
                    }
                });
            }
        });
        TlsListener { ready, addr, accepting }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accepting task ended (never on its own): wait for ever,
            // as a listener with no more connections does.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in
/// constant time).
fn authorised(headers: &axum::http::HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return false };
    let Some(given) = given.strip_prefix("Bearer ") else { return false };
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// How long a scrape waits for the actors: three quarters of the scrape
/// timeout Prometheus sends (`X-Prometheus-Scrape-Timeout-Seconds`), so the
/// answer leaves before Prometheus gives up, at most 2 s, at least 100 ms.
fn gather_deadline(headers: &axum::http::HeaderMap) -> Duration {
    let said = headers
        .get("x-prometheus-scrape-timeout-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0);
    let limit = said.map_or(MAX_GATHER, |s| Duration::from_secs_f64(s * 0.75));
    limit.clamp(Duration::from_millis(100), MAX_GATHER)
}

/// The longest a scrape waits for the actors.
const MAX_GATHER: Duration = Duration::from_secs(2);

/// Serves `/metrics` from `source` on `listener`: plain HTTP, or with
/// `access` HTTPS and a bearer credential.
pub fn serve(
    listener: tokio::net::TcpListener,
    source: MetricsSource,
    access: Option<MetricsAccess>,
) -> Result<MetricsServer, MetricsServerError> {
    use axum::http::header::CONTENT_TYPE;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::routing::get;
    let addr = listener.local_addr().map_err(|e| MetricsServerError::Bind(([0, 0, 0, 0], 0).into(), e))?;
    let token = access.as_ref().map(|a| a.token.clone());
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| {
                let source = source.clone();
                let allowed = token.as_deref().is_none_or(|t| authorised(&headers, t));
                let deadline = gather_deadline(&headers);
                async move {
                    if !allowed {
                        return (
                            StatusCode::UNAUTHORIZED,
                            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                            "the fabric token is required\n",
                        )
                            .into_response();
                    }
                    ([(CONTENT_TYPE, prometheus::TEXT_FORMAT)], source.gather(deadline).await.to_text()).into_response()
                }
            }),
        )
        .route("/", get(|| async { "weft emu-node: metrics at /metrics\n" }));
    let task = match access {
        None => tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }),
        Some(a) => {
            let config = a.identity.tcp_server().map_err(|e| MetricsServerError::Bind(addr, std::io::Error::other(e.to_string())))?;
            let tls = TlsListener::new(listener, tokio_rustls::TlsAcceptor::from(config), addr);
            tokio::spawn(async move {
                let _ = axum::serve(tls, app).await;
            })
        }
    };
    Ok(MetricsServer { addr, task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::auth::{LinkKey, LinkSecret};
    use crate::link::remote::InboundTable;
    use crate::tls::{FabricIdentity, SERVER_NAME};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn source() -> MetricsSource {
        let secret = LinkSecret::generate().expect("random");
        MetricsSource {
            actors: vec![],
            inbound: Arc::new(InboundTable::new(1, LinkKey::new(&secret))),
            fabric: Arc::new(Default::default()),
            process: 3,
            taps: vec![],
            last_answers: Default::default(),
        }
    }

    /// The status line of `GET /metrics` over TLS (trusting `cert` under
    /// the fabric's name), with `auth` as its Authorization header.
    async fn get_tls(addr: SocketAddr, cert: &FabricIdentity, auth: Option<&str>) -> String {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from(cert.cert_der.clone())).expect("root");
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).expect("name");
        let Ok(mut tls) = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await else {
            return "handshake failed".into();
        };
        let header = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        tls.write_all(format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{header}Connection: close\r\n\r\n").as_bytes()).await.expect("write");
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.lines().next().unwrap_or("").to_string();
        if status.contains("200") {
            assert!(text.contains("weft_process"), "{text}");
        }
        status
    }

    /// An HTTPS endpoint on loopback with a fresh identity and a token.
    async fn tls_server() -> (MetricsServer, FabricIdentity, String) {
        let identity = FabricIdentity::generate().expect("identity");
        let token = "0123456789abcdef0123456789abcdef".to_string();
        let l = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
        let s = serve(l, source(), Some(MetricsAccess { identity: identity.clone(), token: token.clone() })).expect("serve");
        (s, identity, token)
    }

    #[test]
    fn an_endpoint_for_other_machines_wants_tls_and_the_fabric_token() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        rt.block_on(async {
            let (s, identity, token) = tls_server().await;
            assert!(get_tls(s.addr, &identity, Some(&format!("Bearer {token}"))).await.contains("200"));
            for bad in [None, Some("Bearer wrong"), Some("Bearer 0123456789abcdef0123456789abcdeX"), Some(token.as_str())] {
                let st = get_tls(s.addr, &identity, bad).await;
                assert!(st.contains("401"), "{bad:?}: {st}");
            }
            // Another fabric's certificate is not trusted by a client of this one.
            let other = FabricIdentity::generate().expect("identity");
            assert_eq!(get_tls(s.addr, &other, Some(&format!("Bearer {token}"))).await, "handshake failed");
            // Plain HTTP gets nothing.
            let mut tcp = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
            tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("write");
            let mut out = Vec::new();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(6), tcp.read_to_end(&mut out)).await;
            assert!(!String::from_utf8_lossy(&out).contains("weft_process"));
        });
    }

    #[test]
    fn a_silent_client_does_not_hold_up_a_scrape() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        rt.block_on(async {
            let (s, identity, token) = tls_server().await;
            // Connected, never says a word (its handshake would wait 5 s).
            let _silent = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
            let t0 = std::time::Instant::now();
            let st = tokio::time::timeout(std::time::Duration::from_secs(3), get_tls(s.addr, &identity, Some(&format!("Bearer {token}"))))
                .await
                .expect("a scrape behind a silent client answers at once");
            assert!(st.contains("200") && t0.elapsed() < std::time::Duration::from_secs(2), "{st} after {:?}", t0.elapsed());
        });
    }

    #[test]
    fn a_loopback_endpoint_is_plain_http() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        rt.block_on(async {
            let l = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
            let s = serve(l, source(), None).expect("serve");
            let mut tcp = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
            tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("write");
            let mut out = Vec::new();
            tcp.read_to_end(&mut out).await.expect("read");
            let text = String::from_utf8_lossy(&out);
            assert!(text.starts_with("HTTP/1.1 200") && text.contains("weft_process"), "{text}");
        });
    }

    #[test]
    fn the_gather_deadline_follows_the_scrape_timeout_prometheus_sends() {
        let with = |v: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert("x-prometheus-scrape-timeout-seconds", v.parse().expect("header"));
            gather_deadline(&h)
        };
        assert_eq!(gather_deadline(&axum::http::HeaderMap::new()), MAX_GATHER);
        assert_eq!(with("2"), Duration::from_millis(1500));
        assert_eq!(with("10"), MAX_GATHER);
        assert_eq!(with("0.01"), Duration::from_millis(100));
        assert_eq!(with("nonsense"), MAX_GATHER);
    }
}
