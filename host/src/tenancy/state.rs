//! What the tenancy layer keeps while the server runs: each tenant's token bucket, requests in
//! flight and counters (kept across reloads while the tenant is in the file), and the record of
//! failed authentications, with its per-address throttle and its once-per-interval log line.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::AuthError;
use super::file::TenantSpec;
use crate::tenant::TenantCounters;

/// A token bucket: `rate` tokens a second, at most `burst` saved.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn full(burst: f64) -> Self {
        Self { tokens: burst, last: Instant::now() }
    }

    /// Takes a token, or says how long until one is there.
    fn take(&mut self, rate: f64, burst: f64) -> Result<(), Duration> {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * rate).min(burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(((1.0 - self.tokens) / rate).min(3600.0)))
        }
    }
}

#[derive(Debug, Default)]
pub struct TenantState {
    pub counters: Arc<TenantCounters>,
    bucket: Mutex<Option<Bucket>>,
    in_flight: Arc<AtomicU64>,
}

/// A request refused at admission (HTTP 429 with `Retry-After`, gRPC RESOURCE_EXHAUSTED).
#[derive(Debug, Clone, PartialEq)]
pub struct Busy {
    pub message: String,
    pub retry_after: Duration,
}

/// An admitted request's place in its tenant's cap: given back when dropped (the response ends).
#[derive(Debug)]
pub struct Admitted(Arc<AtomicU64>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl TenantState {
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn admit(&self, spec: &TenantSpec) -> Result<Admitted, Busy> {
        let counters = &self.counters;
        if let Some(max) = spec.max_in_flight {
            let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
            if before >= u64::from(max) {
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                counters.refused_in_flight.fetch_add(1, Ordering::Relaxed);
                return Err(Busy {
                    message: format!(
                        "tenant '{}' has its maximum of {max} requests in flight; retry when one has finished",
                        spec.name
                    ),
                    retry_after: Duration::from_secs(1),
                });
            }
        } else {
            self.in_flight.fetch_add(1, Ordering::AcqRel);
        }
        let admitted = Admitted(Arc::clone(&self.in_flight));
        if let Some((rate, burst)) = spec.rate {
            let burst = f64::from(burst);
            let mut bucket = self.bucket.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Err(wait) = bucket.get_or_insert_with(|| Bucket::full(burst)).take(rate, burst) {
                counters.refused_rate.fetch_add(1, Ordering::Relaxed);
                return Err(Busy {
                    message: format!(
                        "tenant '{}' is over its rate of {rate} requests per second; retry in {} s",
                        spec.name,
                        super::retry_after_secs(wait)
                    ),
                    retry_after: wait,
                });
            }
        }
        counters.requests.fetch_add(1, Ordering::Relaxed);
        Ok(admitted)
    }
}

/// Failed authentications from one address this fast are answered "retry later" without a look
/// at what they sent.
const FAILURE_RATE: f64 = 10.0;
const FAILURE_BURST: f64 = 50.0;
/// Addresses remembered at once (beyond it, the record starts afresh).
const MAX_ADDRESSES: usize = 4096;
/// How often, at most, failures are logged (one line for all of them).
const LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct Failures {
    inner: Mutex<FailureLog>,
}

#[derive(Debug, Default)]
struct FailureLog {
    peers: HashMap<IpAddr, Bucket>,
    counts: HashMap<&'static str, u64>,
    /// Failures since the last line, and the last line's time.
    unlogged: u64,
    logged: Option<Instant>,
    last: Option<(Option<IpAddr>, String)>,
}

impl Failures {
    /// Records a failure from `peer`; the error the caller gets (throttled past the address's
    /// allowance).
    pub fn failed(&self, peer: Option<IpAddr>, error: AuthError) -> AuthError {
        let mut log = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let error = match peer {
            Some(ip) => {
                if log.peers.len() >= MAX_ADDRESSES && !log.peers.contains_key(&ip) {
                    log.peers.clear();
                }
                let bucket = log.peers.entry(ip).or_insert_with(|| Bucket::full(FAILURE_BURST));
                match bucket.take(FAILURE_RATE, FAILURE_BURST) {
                    Ok(()) => error,
                    Err(wait) => AuthError::Throttled(wait),
                }
            }
            None => error,
        };
        *log.counts.entry(error.reason()).or_default() += 1;
        log.unlogged += 1;
        log.last = Some((peer, error.message()));
        let due = log.logged.is_none_or(|at| at.elapsed() >= LOG_INTERVAL);
        if due {
            let (peer, message) = log.last.clone().unwrap_or_default();
            let peer = peer.map(|p| p.to_string()).unwrap_or_else(|| "in-process".into());
            tracing::warn!(
                failures = log.unlogged,
                "authentication failed {} time(s) since the last report; the last from {peer}: {message}",
                log.unlogged
            );
            log.unlogged = 0;
            log.logged = Some(Instant::now());
        }
        error
    }

    /// Failures so far, by reason (every reason listed, zeros included).
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        let log = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ["missing", "malformed", "unknown_key", "unknown_certificate", "throttled"]
            .into_iter()
            .map(|r| (r, log.counts.get(r).copied().unwrap_or(0)))
            .collect()
    }
}
