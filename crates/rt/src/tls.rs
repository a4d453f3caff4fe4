//! The fabric's identity: a self-signed certificate made by the
//! orchestrator for one fabric, pinned by every participant (docs/REALTIME.md).
//!
//! There is no certificate authority: a client accepts a server only if the
//! SHA-256 of its end-entity certificate equals the pin it was given, and
//! the TLS 1.3 handshake proves the server holds the matching key. The
//! orchestrator's control endpoint and the emu-nodes' QUIC data links use
//! the same identity (emu-nodes receive it over the authenticated control
//! channel), so nobody without the pin's key can stand in for either.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Errors of the TLS set-up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("cannot generate the fabric certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// quinn refused the configuration (no TLS 1.3 cipher suite QUIC can use).
    #[error("QUIC TLS configuration: {0}")]
    Quic(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    /// A pin that is not 64 hex digits.
    #[error("certificate pin `{0}` is not a SHA-256 in hex")]
    BadPin(String),
}

/// A certificate and its private key (DER).
#[derive(Clone, Serialize, Deserialize)]
pub struct FabricIdentity {
    /// Self-signed certificate, DER.
    pub cert_der: Vec<u8>,
    /// PKCS#8 private key, DER.
    pub key_der: Vec<u8>,
}

impl std::fmt::Debug for FabricIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FabricIdentity(pin {})", self.pin())
    }
}

/// SHA-256 of a certificate, lower-case hex.
pub fn pin_of(cert_der: &[u8]) -> String {
    Sha256::digest(cert_der).iter().map(|b| format!("{b:02x}")).collect()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The name every fabric certificate is issued to (clients check the pin,
/// not the name).
pub const SERVER_NAME: &str = "weft-fabric";

impl FabricIdentity {
    /// A fresh self-signed identity.
    pub fn generate() -> Result<Self, TlsError> {
        let c = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])?;
        Ok(FabricIdentity { cert_der: c.cert.der().to_vec(), key_der: c.signing_key.serialize_der() })
    }
    /// The pin of this identity's certificate.
    pub fn pin(&self) -> String {
        pin_of(&self.cert_der)
    }
    /// A TLS server configuration presenting this identity over TCP (the
    /// `/metrics` endpoints of emu-nodes on other machines).
    pub fn tcp_server(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        Ok(Arc::new(self.server_config()?))
    }
    /// TLS 1.3, presenting this identity, no client certificates.
    fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        Ok(rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(self.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone())),
            )?)
    }
    /// The certificate in PEM (what a client that trusts this fabric, such
    /// as Prometheus's `tls_config.ca_file`, is given).
    pub fn cert_pem(&self) -> String {
        pem::encode(&pem::Pem::new("CERTIFICATE", self.cert_der.clone()))
    }
    /// A quinn server configuration presenting this identity.
    pub fn quic_server(&self, transport: Arc<quinn::TransportConfig>) -> Result<quinn::ServerConfig, TlsError> {
        let q = quinn::crypto::rustls::QuicServerConfig::try_from(self.server_config()?)?;
        let mut s = quinn::ServerConfig::with_crypto(Arc::new(q));
        s.transport_config(transport);
        Ok(s)
    }
}

/// A quinn client configuration that accepts only the server whose
/// certificate has SHA-256 `pin`.
pub fn quic_client(pin: &str, transport: Arc<quinn::TransportConfig>) -> Result<quinn::ClientConfig, TlsError> {
    if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TlsError::BadPin(pin.to_string()));
    }
    let provider = provider();
    let verifier = Arc::new(PinnedVerifier { pin: pin.to_ascii_lowercase(), provider: provider.clone() });
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let q = quinn::crypto::rustls::QuicClientConfig::try_from(cfg)?;
    let mut c = quinn::ClientConfig::new(Arc::new(q));
    c.transport_config(transport);
    Ok(c)
}

#[derive(Debug)]
struct PinnedVerifier {
    pin: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if pin_of(end_entity) == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("server certificate does not match the fabric's pinned certificate".into()))
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
