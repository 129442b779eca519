//! HTTPS on the HTTP port (`--http-use-ssl`), with client certificates verified against
//! `--http-root-cert` when given (required with `--http-use-ssl-mutual`, optional otherwise, so
//! that clients with an API key need no certificate). Tessera's own flags, named as the gRPC
//! door's (Triton serves HTTP in plain text only). A verified client certificate's names can
//! identify a tenant (`crate::tenancy`).

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// PEM contents for the HTTP door's TLS.
#[derive(Clone)]
pub struct HttpTls {
    pub certificate: Vec<u8>,
    pub key: Vec<u8>,
    /// Authorities that client certificates must chain to; `None`: no client certificates.
    pub client_ca: Option<Vec<u8>>,
    /// Whether a client certificate is required (else only verified when sent).
    pub require_client_cert: bool,
}

impl std::fmt::Debug for HttpTls {
    // Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTls")
            .field("client_ca", &self.client_ca.is_some())
            .field("require_client_cert", &self.require_client_cert)
            .finish_non_exhaustive()
    }
}

impl HttpTls {
    /// The acceptor, or what is wrong with the PEM contents (checked at startup).
    pub fn acceptor(&self) -> Result<TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.certificate)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("HTTP TLS: the server certificate: {e}"))?;
        if chain.is_empty() {
            return Err("HTTP TLS: the server certificate file holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|e| format!("HTTP TLS: the server key: {e}"))?;
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("HTTP TLS: {e}"))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("HTTP TLS: the root certificate: {e}"))?;
                    roots.add(cert).map_err(|e| format!("HTTP TLS: the root certificate: {e}"))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if self.require_client_cert { verifier } else { verifier.allow_unauthenticated() };
                let verifier = verifier.build().map_err(|e| format!("HTTP TLS: the root certificate: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config =
            builder.with_single_cert(chain, key).map_err(|e| format!("HTTP TLS: the certificate and key: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
