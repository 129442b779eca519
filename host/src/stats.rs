//! Per model-version statistics, recorded once at the model boundary and reported by the
//! statistics extension (`/v2/models/{m}/stats`) in Triton's JSON shape.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

/// A count of events and their summed duration (Triton's `StatisticDuration`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Duration2 {
    pub count: u64,
    pub ns: u64,
}

impl Duration2 {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns = self.ns.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }
    fn json(self) -> Value {
        json!({ "count": self.count, "ns": self.ns })
    }
}

/// Why a request failed, as Triton's `nv_inference_request_failure{reason=...}` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureReason {
    /// Refused by the scheduler (full queue, queue timeout).
    Rejected,
    Canceled,
    /// The model itself failed (execution error, trap).
    Backend,
    /// Anything else (invalid input, ...).
    Other,
}

impl FailureReason {
    pub const ALL: [FailureReason; 4] = [Self::Rejected, Self::Canceled, Self::Backend, Self::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "REJECTED",
            Self::Canceled => "CANCELED",
            Self::Backend => "BACKEND",
            Self::Other => "OTHER",
        }
    }

    pub fn of(error: &crate::error::CoreError) -> Self {
        use crate::error::ErrorKind;
        match error.kind {
            ErrorKind::Unavailable => Self::Rejected,
            ErrorKind::Cancelled => Self::Canceled,
            ErrorKind::Internal | ErrorKind::Unknown => Self::Backend,
            _ => Self::Other,
        }
    }
}

/// A copy of a model version's statistics, for the front doors to encode.
#[derive(Debug, Default, Clone)]
pub struct Inner {
    pub last_inference_ms: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: Duration2,
    pub fail: Duration2,
    pub queue: Duration2,
    pub compute_input: Duration2,
    pub compute_infer: Duration2,
    pub compute_output: Duration2,
    /// batch size -> (compute_input, compute_infer, compute_output)
    pub batches: BTreeMap<usize, [Duration2; 3]>,
    pub failures: BTreeMap<FailureReason, u64>,
    pub cache_hit: Duration2,
    pub cache_miss: Duration2,
}

pub type StatsSnapshot = Inner;

#[derive(Debug, Default)]
pub struct ModelStats {
    inner: Mutex<Inner>,
    /// Requests waiting for an instance (Triton's pending request count).
    pending: AtomicI64,
}

impl ModelStats {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        if let Ok(mut inner) = self.inner.lock() {
            f(&mut inner);
        }
    }

    /// A request finished (successfully or not) after `total` time.
    pub fn record_request(&self, ok: bool, total: Duration, now_ms: u64) {
        self.with(|s| {
            if ok {
                s.success.add(total)
            } else {
                s.fail.add(total)
            }
            s.last_inference_ms = now_ms;
        });
    }

    pub fn record_failure(&self, reason: FailureReason) {
        self.with(|s| *s.failures.entry(reason).or_default() += 1);
    }

    /// A response cache lookup that found (`hit`) or did not find the response, and its cost
    /// (for a miss: the insertion after execution).
    pub fn record_cache(&self, hit: bool, took: Duration) {
        self.with(|s| if hit { s.cache_hit.add(took) } else { s.cache_miss.add(took) });
    }

    pub fn pending_add(&self, n: i64) {
        self.pending.fetch_add(n, Ordering::Relaxed);
    }

    pub fn pending(&self) -> i64 {
        self.pending.load(Ordering::Relaxed).max(0)
    }

    pub fn record_queue(&self, waited: Duration) {
        self.with(|s| s.queue.add(waited));
    }

    /// A successful execution of `batch_size` inferences.
    pub fn record_execution(&self, batch_size: usize, input: Duration, infer: Duration, output: Duration) {
        self.with(|s| {
            s.inference_count += batch_size as u64;
            s.execution_count += 1;
            s.compute_input.add(input);
            s.compute_infer.add(infer);
            s.compute_output.add(output);
            let entry = s.batches.entry(batch_size).or_default();
            entry[0].add(input);
            entry[1].add(infer);
            entry[2].add(output);
        });
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// One entry of the statistics extension's `model_stats` array.
    pub fn to_json(&self, name: &str, version: i64) -> Value {
        let Ok(s) = self.inner.lock() else { return Value::Null };
        let batch_stats: Vec<Value> = s
            .batches
            .iter()
            .map(|(size, [i, c, o])| {
                json!({
                    "batch_size": size,
                    "compute_input": i.json(),
                    "compute_infer": c.json(),
                    "compute_output": o.json(),
                })
            })
            .collect();
        json!({
            "name": name,
            "version": version.to_string(),
            "last_inference": s.last_inference_ms,
            "inference_count": s.inference_count,
            "execution_count": s.execution_count,
            "inference_stats": {
                "success": s.success.json(),
                "fail": s.fail.json(),
                "queue": s.queue.json(),
                "compute_input": s.compute_input.json(),
                "compute_infer": s.compute_infer.json(),
                "compute_output": s.compute_output.json(),
                "cache_hit": s.cache_hit.json(),
                "cache_miss": s.cache_miss.json(),
            },
            "response_stats": {},
            "batch_stats": batch_stats,
            "memory_usage": [],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_batches_accumulate() {
        let stats = ModelStats::default();
        stats.record_execution(2, Duration::from_nanos(10), Duration::from_nanos(20), Duration::from_nanos(30));
        stats.record_request(true, Duration::from_nanos(100), 42);
        stats.record_request(false, Duration::from_nanos(5), 43);
        let j = stats.to_json("m", 3);
        assert_eq!(j["version"], "3");
        assert_eq!(j["inference_count"], 2);
        assert_eq!(j["execution_count"], 1);
        assert_eq!(j["last_inference"], 43);
        assert_eq!(j["inference_stats"]["success"]["count"], 1);
        assert_eq!(j["inference_stats"]["fail"]["count"], 1);
        assert_eq!(j["batch_stats"][0]["batch_size"], 2);
        assert_eq!(j["batch_stats"][0]["compute_infer"]["ns"], 20);
    }
}
