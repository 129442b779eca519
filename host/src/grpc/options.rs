//! The gRPC door's settings: message size, keepalive, response compression, restricted
//! protocols, TLS and the connection cap.

use std::time::Duration;

use tonic::codec::CompressionEncoding;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::restricted::Restrictions;

/// Triton's gRPC message size limit (`MAX_GRPC_MESSAGE_SIZE`, INT32_MAX).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = i32::MAX as usize;

#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// Largest message accepted or sent, in bytes.
    pub max_message_size: usize,
    /// HTTP/2 keepalive ping interval and how long to wait for its acknowledgement.
    pub keepalive_time: Duration,
    pub keepalive_timeout: Duration,
    /// How infer responses are compressed for clients that accept it
    /// (`--grpc-infer-response-compression-level`: none, low = gzip, medium and high = deflate,
    /// the algorithms Triton's gRPC core picks for those levels).
    pub response_compression: Option<CompressionEncoding>,
    /// Triton's `--grpc-restricted-protocol`.
    pub restrictions: Restrictions,
    /// TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`); plaintext when `None`.
    pub tls: Option<GrpcTls>,
    /// Most connections open at once (`--grpc-max-connections`).
    pub max_connections: usize,
    /// Most responses a stream holds for its client at once (`--grpc-max-response-pool-size`).
    pub stream_responses: usize,
    /// How long a new connection may stay silent before its first bytes (the HTTP/2 preface or
    /// a TLS hello) before it is closed (`--http-header-read-timeout`).
    pub first_bytes_timeout: Duration,
    /// How long a connection may have no call in flight before it is closed gracefully (GOAWAY;
    /// its client reconnects at its next call); `None`: never (`--grpc-max-connection-idle`).
    pub max_connection_idle: Option<Duration>,
    /// `--tenants`: who may call, and what (see `tenant.rs`).
    pub tenants: Option<std::sync::Arc<crate::tenancy::Tenants>>,
}

/// Default of `--grpc-max-connection-idle`: five minutes. A client's channel reconnects by itself
/// after the graceful close, so long-lived Triton channels keep working at the cost of one
/// handshake after five idle minutes; five minutes is also Triton's (gRPC core's) shortest ping
/// interval a client may use on a connection without calls, so a client that keeps an idle
/// connection alive with pings gets no more from Triton.
pub const DEFAULT_MAX_CONNECTION_IDLE: Duration = Duration::from_secs(300);

impl Default for GrpcOptions {
    fn default() -> Self {
        Self {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            keepalive_time: Duration::from_millis(7_200_000),
            keepalive_timeout: Duration::from_millis(20_000),
            response_compression: None,
            restrictions: Restrictions::default(),
            tls: None,
            max_connections: 1024,
            stream_responses: super::DEFAULT_STREAM_RESPONSES,
            first_bytes_timeout: Duration::from_secs(30),
            max_connection_idle: Some(DEFAULT_MAX_CONNECTION_IDLE),
            tenants: None,
        }
    }
}

/// PEM contents for the gRPC door's TLS.
#[derive(Clone)]
pub struct GrpcTls {
    pub certificate: Vec<u8>,
    pub key: Vec<u8>,
    /// Set for mutual TLS: client certificates must chain to one of these authorities.
    pub client_ca: Option<Vec<u8>>,
}

impl GrpcTls {
    pub(super) fn server_config(&self) -> ServerTlsConfig {
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&self.certificate, &self.key));
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(ca)).client_auth_optional(false);
        }
        config
    }

    /// Fails when the PEM contents do not make a usable server configuration (checked at startup,
    /// so a bad certificate stops the server instead of its first connection).
    pub fn validate(&self) -> Result<(), String> {
        tonic::transport::Server::builder().tls_config(self.server_config()).map(drop).map_err(|e| {
            format!(
                "gRPC TLS configuration: {}",
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string())
            )
        })
    }
}

impl std::fmt::Debug for GrpcTls {
    // Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls").field("mutual", &self.client_ca.is_some()).finish_non_exhaustive()
    }
}
