//! Who a call comes from ([`Requester`], as both network doors record it), and the access line
//! (`--log-requests`): one per inference request, with who sent it.

use std::net::SocketAddr;
use std::sync::Arc;

use super::Frontend;
use crate::tenancy::Identity;
use crate::tenant::Principal;

/// Who a call comes from: its peer, the tenant a door's gate identified (with a tenants file),
/// and what its requests run as (the tenant's principal, or a fairness id's).
#[derive(Debug, Clone, Default)]
pub struct Requester {
    pub peer: Option<SocketAddr>,
    pub identity: Option<Identity>,
    pub principal: Option<Arc<Principal>>,
}

impl Requester {
    /// The principal for `Frontend` calls that take one.
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_deref()
    }

    /// The access line's tenant, key id and peer.
    pub fn audit(&self) -> Audit<'_> {
        Audit {
            tenant: self.identity.as_ref().map(Identity::name),
            key_id: self.identity.as_ref().and_then(|i| i.key_id.as_deref()),
            peer: self.peer,
        }
    }

    /// `model` as this caller may see it (see `crate::tenant::visible_name`).
    pub fn visible<'a>(&self, model: &'a str) -> std::borrow::Cow<'a, str> {
        crate::tenant::visible_name(self.principal(), model)
    }
}

/// Who sent a request, for its access line: the tenant, the id of the key it used (never the
/// key), and the peer address.
#[derive(Debug, Clone, Copy, Default)]
pub struct Audit<'a> {
    pub tenant: Option<&'a str>,
    pub key_id: Option<&'a str>,
    pub peer: Option<std::net::SocketAddr>,
}

impl Frontend {
    /// The access line of one inference request (when [`Self::logs_requests`]), with who sent it.
    #[allow(clippy::too_many_arguments)]
    pub fn log_request(
        &self,
        door: &'static str,
        model: &str,
        version: Option<i64>,
        request_id: Option<&str>,
        status: &str,
        took: std::time::Duration,
        who: &Audit<'_>,
    ) {
        if !self.log_requests {
            return;
        }
        let version = version.map(|v| v.to_string()).unwrap_or_default();
        let duration_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let peer = who.peer.map(|p| p.to_string()).unwrap_or_default();
        tracing::info!(
            target: "tessera::access",
            door,
            model = crate::tenant::unmark(model).as_ref(),
            version = version.as_str(),
            request_id = request_id.unwrap_or(""),
            status,
            duration_us,
            tenant = who.tenant.unwrap_or(""),
            key_id = who.key_id.unwrap_or(""),
            peer = peer.as_str(),
            "inference request"
        );
    }
}
