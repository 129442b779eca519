//! The access line (`--log-requests`): one per inference request, with who sent it.

use super::Frontend;

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
