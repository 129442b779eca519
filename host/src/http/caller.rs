//! Who an HTTP call comes from: the connection's peer and client certificate ([`ConnInfo`], set
//! per connection by `serve.rs`), and, with a tenants file, the tenant the gate (`gate.rs`)
//! identified, checked and admitted before the call is routed. Handlers read it all through the
//! [`Caller`] extractor and put its principal on the requests they make.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::tenancy::{CertNames, Identity};
use crate::tenant::{FAIRNESS_HEADER, Principal, fairness_principal};

/// What the connection knows of its client.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    /// The names of the client certificate, on an HTTPS connection that verified one.
    pub certificate: Option<Arc<CertNames>>,
}

/// Who a call comes from, as handlers see it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub peer: Option<SocketAddr>,
    /// The tenant the gate identified (with a tenants file).
    pub identity: Option<Identity>,
    /// What the call's requests run as: the tenant's principal, or a fairness id's.
    pub principal: Option<Arc<Principal>>,
}

impl Caller {
    /// The principal for `Frontend` calls that take one.
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_deref()
    }

    /// The access line's tenant, key id and peer.
    pub fn audit(&self) -> crate::frontend::Audit<'_> {
        crate::frontend::Audit {
            tenant: self.identity.as_ref().map(Identity::name),
            key_id: self.identity.as_ref().and_then(|i| i.key_id.as_deref()),
            peer: self.peer,
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        let peer = parts.extensions.get::<ConnInfo>().and_then(|c| c.peer);
        let fairness = parts.headers.get(FAIRNESS_HEADER).and_then(|v| v.to_str().ok());
        Ok(Self { peer, identity: None, principal: fairness_principal(fairness) })
    }
}
