//! Tenants at the door (`--tenants FILE`): who is calling, what each tenant may do, and how much
//! of the server it may take at once. docs/tenants.md is the reference for users.
//!
//! The contract:
//! - With a tenants file, every call names a tenant by an API key (`Authorization: Bearer`, on
//!   HTTP, `/v1` and gRPC metadata) or by a verified client certificate (HTTPS or gRPC mutual TLS),
//!   or is refused (401 / UNAUTHENTICATED) with a message that says what was missing, never which
//!   keys or names exist. Only the APIs the file leaves open (health and metrics by default)
//!   answer without one. Without a file nothing changes, and the in-process API is trusted.
//! - A tenant calls only the models its allow-list matches; any other model answers as if it did
//!   not exist. The other APIs need roles ([`Role`]).
//! - Admission comes before any queue: a tenant over its rate (a token bucket) or its cap on
//!   requests in flight is answered 429 / RESOURCE_EXHAUSTED at once.
//! - The request then carries the tenant's [`Principal`] to the schedulers, which share each
//!   model's queue among tenants by weight (`crate::tenant`), and to its BLS calls.
//! - The file is watched: a change applies within a second; a file that does not parse leaves
//!   the last good one in force, is logged, and is counted on `/metrics`.
//! - Failed authentications are counted, logged once per interval, and throttled per address;
//!   a valid key is checked first, so throttling never slows the clients that have one.

mod certs;
pub mod file;
mod state;

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

pub use certs::CertNames;
use file::{Credential, TenantSpec, TenantsFile};
pub use file::{OpenApi, Role};
use sha2::Digest;
pub use state::{Admitted, Busy};
use state::{Failures, TenantState};

use crate::restricted::ApiCategory;
use crate::tenant::{ModelRules, Principal};

/// The live tenants configuration, swapped whole when the file changes.
pub struct Tenants {
    path: PathBuf,
    current: RwLock<Arc<Table>>,
    failures: Failures,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
}

/// One metric family as rendered: name, type, help, and its samples (labels, value).
type Family = (&'static str, &'static str, &'static str, Vec<(String, u64)>);

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants").field("path", &self.path).finish_non_exhaustive()
    }
}

/// One version of the file, ready to answer lookups.
struct Table {
    open: BTreeSet<OpenApi>,
    tenants: Vec<Arc<Tenant>>,
    credentials: HashMap<Credential, (usize, Arc<str>)>,
}

/// A configured tenant.
#[derive(Debug)]
pub struct Tenant {
    pub spec: TenantSpec,
    /// What its requests carry.
    pub principal: Arc<Principal>,
    state: Arc<TenantState>,
}

/// Who a call was identified as.
#[derive(Debug, Clone)]
pub struct Identity {
    pub tenant: Arc<Tenant>,
    /// The id of the key it presented (`None`: identified by its certificate).
    pub key_id: Option<Arc<str>>,
}

/// What a caller presented, as a door read it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Presented<'a> {
    /// The `authorization` header or metadata, raw.
    pub authorization: Option<&'a [u8]>,
    /// The names of the client certificate the TLS layer verified.
    pub certificate: Option<&'a CertNames>,
    pub peer: Option<IpAddr>,
}

/// Why a call has no identity.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthError {
    Missing,
    Malformed,
    UnknownKey,
    UnknownCertificate,
    /// Too many failures from this address: retry after this long.
    Throttled(Duration),
}

impl AuthError {
    pub fn message(&self) -> String {
        match self {
            Self::Missing => "this server requires an API key ('Authorization: Bearer <key>') or a client certificate \
                that names a tenant"
                .into(),
            Self::Malformed => "malformed 'Authorization' header: expected 'Bearer <key>'".into(),
            Self::UnknownKey => "the API key is not valid".into(),
            Self::UnknownCertificate => "the client certificate names no tenant, and no API key was sent".into(),
            Self::Throttled(wait) => format!(
                "too many failed authentication attempts from this address; retry in {} s",
                retry_after_secs(*wait)
            ),
        }
    }

    /// The label of this failure on `/metrics`.
    fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::UnknownKey => "unknown_key",
            Self::UnknownCertificate => "unknown_certificate",
            Self::Throttled(_) => "throttled",
        }
    }
}

/// Whole seconds for a `Retry-After` header (at least 1).
pub fn retry_after_secs(wait: Duration) -> u64 {
    u64::try_from(wait.as_nanos().div_ceil(1_000_000_000)).unwrap_or(u64::MAX).max(1)
}

/// A call an identified tenant may not make (HTTP 403, gRPC PERMISSION_DENIED).
#[derive(Debug, Clone, PartialEq)]
pub struct Denied(pub String);

impl Tenants {
    /// Reads the file; an error stops the server from starting.
    pub fn load(path: &Path) -> Result<Arc<Self>, String> {
        let parsed = file::read(path)?;
        warn_if_world_readable(path);
        let table = Table::build(parsed, &HashMap::new());
        tracing::info!(file = %path.display(), tenants = table.tenants.len(), "tenants loaded");
        Ok(Arc::new(Self {
            path: path.to_path_buf(),
            current: RwLock::new(Arc::new(table)),
            failures: Failures::default(),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
        }))
    }

    fn table(&self) -> Arc<Table> {
        self.current.read().map(|t| Arc::clone(&t)).unwrap_or_else(|poisoned| Arc::clone(&poisoned.into_inner()))
    }

    /// Reads the file again; a file that does not parse keeps the current configuration.
    pub fn reload(&self) -> Result<(), String> {
        let parsed = match file::read(&self.path) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!("{e}; keeping the last good tenants configuration");
                return Err(e);
            }
        };
        warn_if_world_readable(&self.path);
        let old = self.table();
        let states = old.tenants.iter().map(|t| (t.spec.name.clone(), Arc::clone(&t.state))).collect();
        let table = Arc::new(Table::build(parsed, &states));
        tracing::info!(file = %self.path.display(), tenants = table.tenants.len(), "tenants reloaded");
        match self.current.write() {
            Ok(mut current) => *current = table,
            Err(poisoned) => *poisoned.into_inner() = table,
        }
        self.reloads_ok.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Watches the file until `stop`, reloading when it changes (checked four times a second:
    /// a revoked key is refused well within a second or two of the change).
    pub async fn watch(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut seen = fingerprint(&self.path);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => {}
            }
            let now = fingerprint(&self.path);
            if now != seen {
                seen = now;
                let _ = self.reload();
            }
        }
    }

    /// Whether `api` answers without an identity.
    pub fn is_open(&self, api: OpenApi) -> bool {
        self.table().open.contains(&api)
    }

    /// Identifies a caller: a key when one is sent (a wrong key is refused even with a good
    /// certificate), else a certificate.
    pub fn identify(&self, presented: Presented<'_>) -> Result<Identity, AuthError> {
        let table = self.table();
        let result = match presented.authorization {
            Some(raw) => match bearer(raw) {
                Some(key) => table.by_key(key).ok_or(AuthError::UnknownKey),
                None => Err(AuthError::Malformed),
            },
            None => match presented.certificate {
                Some(names) => table.by_certificate(names).ok_or(AuthError::UnknownCertificate),
                None => Err(AuthError::Missing),
            },
        };
        result.map_err(|e| self.failures.failed(presented.peer, e))
    }

    /// The Prometheus series of the tenants (a bounded set: one per configured tenant).
    pub fn render_metrics(&self) -> String {
        let table = self.table();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        // One sample per tenant of `value`, labelled with the tenant.
        let per_tenant = |value: &dyn Fn(&Tenant) -> u64| -> Vec<(String, u64)> {
            table.tenants.iter().map(|t| (format!("tenant=\"{}\"", t.spec.name), value(t))).collect()
        };
        let refusals = table
            .tenants
            .iter()
            .flat_map(|t| {
                let c = &t.state.counters;
                [("rate", &c.refused_rate), ("in_flight", &c.refused_in_flight), ("role", &c.refused_role)]
                    .map(|(reason, n)| (format!("tenant=\"{}\",reason=\"{reason}\"", t.spec.name), load(n)))
            })
            .collect();
        let failures = self.failures.counts().into_iter().map(|(r, n)| (format!("reason=\"{r}\""), n)).collect();
        let reloads = vec![
            ("result=\"ok\"".to_string(), load(&self.reloads_ok)),
            ("result=\"error\"".to_string(), load(&self.reloads_failed)),
        ];
        let families: [Family; 7] = [
            (
                "tessera_tenant_requests_total",
                "counter",
                "Requests admitted at the doors, per tenant",
                per_tenant(&|t| load(&t.state.counters.requests)),
            ),
            ("tessera_tenant_refusals_total", "counter", "Calls refused to a tenant, by reason", refusals),
            (
                "tessera_tenant_queue_duration_us",
                "counter",
                "Time the tenant's requests waited in model queues",
                per_tenant(&|t| load(&t.state.counters.queue_us)),
            ),
            (
                "tessera_tenant_queue_requests_total",
                "counter",
                "Requests of the tenant that passed a model queue",
                per_tenant(&|t| load(&t.state.counters.queued)),
            ),
            (
                "tessera_tenant_in_flight",
                "gauge",
                "Requests of the tenant in flight",
                per_tenant(&|t| t.state.in_flight()),
            ),
            ("tessera_tenant_auth_failures_total", "counter", "Calls refused for want of a valid identity", failures),
            ("tessera_tenants_reloads_total", "counter", "Reloads of the tenants file", reloads),
        ];
        let mut out = String::new();
        for (name, kind, help, samples) in families {
            use std::fmt::Write;
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        }
        out
    }
}

impl Table {
    fn build(file: TenantsFile, states: &HashMap<String, Arc<TenantState>>) -> Self {
        let tenants: Vec<Arc<Tenant>> = file
            .tenants
            .into_iter()
            .map(|spec| {
                let state = states.get(&spec.name).cloned().unwrap_or_default();
                let principal = Arc::new(Principal {
                    flow: Arc::from(spec.name.as_str()),
                    weight: spec.weight,
                    models: Some(Arc::new(ModelRules::new(spec.models.clone()))),
                    counters: Some(Arc::clone(&state.counters)),
                });
                Arc::new(Tenant { spec, principal, state })
            })
            .collect();
        let credentials = file.credentials.into_iter().map(|(c, (i, id))| (c, (i, Arc::from(id)))).collect();
        Self { open: file.open, tenants, credentials }
    }

    fn identity(&self, credential: &Credential) -> Option<Identity> {
        let (index, id) = self.credentials.get(credential)?;
        let tenant = Arc::clone(self.tenants.get(*index)?);
        Some(Identity { tenant, key_id: (!id.is_empty()).then(|| Arc::clone(id)) })
    }

    fn by_key(&self, key: &[u8]) -> Option<Identity> {
        self.identity(&Credential::Key(sha2::Sha256::digest(key).into()))
    }

    fn by_certificate(&self, names: &CertNames) -> Option<Identity> {
        let cns = names.common_names.iter().map(|n| Credential::CommonName(n.clone()));
        let sans = names.alt_names.iter().map(|n| Credential::AltName(n.clone()));
        sans.chain(cns).find_map(|c| self.identity(&c))
    }
}

/// The key of an `Authorization: Bearer <key>` value (scheme without regard to case), or `None`
/// when the value is not that.
fn bearer(raw: &[u8]) -> Option<&[u8]> {
    const MAX_KEY: usize = 4096;
    let raw = raw.trim_ascii();
    let (scheme, key) = raw.split_at_checked(7)?;
    let key = key.trim_ascii_start();
    let printable = key.iter().all(|b| b.is_ascii_graphic());
    (scheme.eq_ignore_ascii_case(b"bearer ") && !key.is_empty() && key.len() <= MAX_KEY && printable).then_some(key)
}

impl Identity {
    /// The role `category` needs, checked (health needs none).
    pub fn may_use(&self, category: ApiCategory) -> Result<(), Denied> {
        let role = match category {
            ApiCategory::Health => return Ok(()),
            ApiCategory::Metadata | ApiCategory::ModelConfig | ApiCategory::Inference | ApiCategory::OpenAi => {
                Role::Infer
            }
            ApiCategory::SharedMemory => Role::SharedMemory,
            ApiCategory::ModelRepository => Role::Repository,
            ApiCategory::Statistics => Role::Statistics,
            ApiCategory::Trace => Role::Trace,
            ApiCategory::Logging => Role::Logging,
        };
        self.has(role, category.name())
    }

    /// Loading with `file:` overrides needs the `repository-files` role.
    pub fn may_load_files(&self) -> Result<(), Denied> {
        self.has(Role::RepositoryFiles, "model-repository (with file overrides)")
    }

    /// `/metrics`, when the file does not leave it open.
    pub fn may_scrape(&self) -> Result<(), Denied> {
        self.has(Role::Metrics, "metrics")
    }

    fn has(&self, role: Role, api: &str) -> Result<(), Denied> {
        if self.tenant.spec.roles.contains(&role) {
            return Ok(());
        }
        self.tenant.state.counters.refused_role.fetch_add(1, Ordering::Relaxed);
        let role = serde_json::to_value(role).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        Err(Denied(format!("tenant '{}' may not use the {api} API (it needs role '{role}')", self.tenant.spec.name)))
    }

    /// Admission of one request: its rate and in-flight cap, before it takes any queue slot.
    pub fn admit(&self) -> Result<Admitted, Busy> {
        self.tenant.state.admit(&self.tenant.spec)
    }

    /// The tenant's name, for access lines.
    pub fn name(&self) -> &str {
        &self.tenant.spec.name
    }
}

fn warn_if_world_readable(path: &Path) {
    if file::world_readable(path) {
        tracing::warn!(
            "the tenants file {} is readable by every user of this machine; it holds key hashes and each \
            tenant's rights: chmod 600 it",
            path.display()
        );
    }
}

/// What changes when the file is rewritten (in place or by a rename over it).
fn fingerprint(path: &Path) -> Option<(SystemTime, u64, u64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino(), m.ctime_nsec()))
}

#[cfg(test)]
#[path = "tenancy_tests.rs"]
mod tests;
