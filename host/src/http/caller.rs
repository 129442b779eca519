//! Who an HTTP call comes from: the connection's peer and client certificate ([`ConnInfo`], set
//! per connection by `serve.rs`), and, with a tenants file, the tenant the gate (`gate.rs`)
//! identified, checked and admitted before the call is routed. Handlers read it all through the
//! [`Requester`] extractor (the frontend's type, which the gRPC door records too) and put its
//! principal on the requests they make.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

pub use crate::frontend::Requester;
use crate::tenancy::CertNames;
use crate::tenant::{FAIRNESS_HEADER, fairness_principal};

/// What the connection knows of its client.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    /// The names of the client certificate, on an HTTPS connection that verified one.
    pub certificate: Option<Arc<CertNames>>,
}

impl<S: Send + Sync> FromRequestParts<S> for Requester {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Requester>() {
            return Ok(caller.clone());
        }
        let peer = parts.extensions.get::<ConnInfo>().and_then(|c| c.peer);
        let fairness = parts.headers.get(FAIRNESS_HEADER).and_then(|v| v.to_str().ok());
        Ok(Requester { peer, identity: None, principal: fairness_principal(fairness) })
    }
}
