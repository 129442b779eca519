//! Triton's response cache (`--cache-config local,size=N` for the server, `response_cache {
//! enable: true }` per model): a response computed for a request is kept, keyed by the model,
//! its version, the inputs (names, datatypes, shapes, bytes) and the requested outputs, and an
//! identical later request gets it back without executing. Entries are evicted least recently used
//! first so the cached tensor bytes never exceed the budget.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::infer::{InferRequest, ParamValue};
use crate::tensor::Tensor;

type Key = [u8; 32];

struct Entry {
    outputs: Vec<Tensor>,
    bytes: usize,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// tick of last use -> key, oldest first
    lru: BTreeMap<u64, Key>,
    used: usize,
    tick: u64,
}

pub struct ResponseCache {
    budget: usize,
    inner: Mutex<Inner>,
}

/// Parses Triton's `--cache-config` values (`local,size=N`); other caches are refused.
pub fn parse_cache_config(values: &[String]) -> Result<Option<usize>, String> {
    let mut size = None;
    for value in values {
        let (cache, setting) =
            value.split_once(',').ok_or_else(|| format!("--cache-config '{value}': expected <cache>,<key>=<value>"))?;
        if cache != "local" {
            return Err(format!("--cache-config '{value}': only the 'local' cache is supported"));
        }
        let (key, v) =
            setting.split_once('=').ok_or_else(|| format!("--cache-config '{value}': expected <key>=<value>"))?;
        match key {
            "size" => {
                size = Some(
                    v.parse::<usize>().map_err(|_| format!("--cache-config '{value}': size must be a byte count"))?,
                )
            }
            other => return Err(format!("--cache-config '{value}': unknown local cache setting '{other}'")),
        }
    }
    Ok(size)
}

fn bytes_of(outputs: &[Tensor]) -> usize {
    outputs.iter().map(|t| t.data.len() + t.name.len() + t.shape.len() * 8 + 64).sum()
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache").field("budget", &self.budget).field("used", &self.used_bytes()).finish()
    }
}

impl ResponseCache {
    pub fn new(budget: usize) -> Self {
        Self { budget, inner: Mutex::new(Inner::default()) }
    }

    /// The cache key of a request to a model version. Request ids and parameters that do not
    /// change the outputs (priority, timeout) are left out.
    pub fn key(model: &str, version: i64, request: &InferRequest) -> Key {
        let mut h = Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(model.as_bytes());
        field(&version.to_le_bytes());
        // Every variable-length part is preceded by its count, so no two requests share a byte
        // stream (and so a key).
        let mut inputs: Vec<&Tensor> = request.inputs.iter().collect();
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
        field(&(inputs.len() as u64).to_le_bytes());
        for t in inputs {
            field(t.name.as_bytes());
            field(t.datatype.as_str().as_bytes());
            field(&(t.shape.len() as u64).to_le_bytes());
            for d in &t.shape {
                field(&d.to_le_bytes());
            }
            field(&t.data);
        }
        field(&(request.outputs.len() as u64).to_le_bytes());
        for o in &request.outputs {
            field(o.name.as_bytes());
            field(&o.class_count.to_le_bytes());
        }
        let params: Vec<_> = request
            .parameters
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "priority" | "timeout" | "binary_data_output"))
            .collect();
        field(&(params.len() as u64).to_le_bytes());
        for (k, v) in params {
            field(k.as_bytes());
            match v {
                ParamValue::Bool(b) => field(&[0, u8::from(*b)]),
                ParamValue::Int(i) => field(&[&[1u8][..], &i.to_le_bytes()].concat()),
                ParamValue::Double(d) => field(&[&[2u8][..], &d.to_le_bytes()].concat()),
                ParamValue::Uint(u) => field(&[&[3u8][..], &u.to_le_bytes()].concat()),
                ParamValue::String(s) => field(&[&[4u8][..], s.as_bytes()].concat()),
            }
        }
        h.finalize().into()
    }

    pub fn get(&self, key: &Key) -> Option<Vec<Tensor>> {
        let mut inner = self.inner.lock().ok()?;
        inner.tick += 1;
        let tick = inner.tick;
        let old = {
            let entry = inner.entries.get_mut(key)?;
            std::mem::replace(&mut entry.tick, tick)
        };
        inner.lru.remove(&old);
        inner.lru.insert(tick, *key);
        inner.entries.get(key).map(|e| e.outputs.clone())
    }

    /// Stores a response, evicting the least recently used ones to stay within the budget. A
    /// response larger than the whole budget is not stored.
    pub fn insert(&self, key: Key, outputs: Vec<Tensor>) {
        let bytes = bytes_of(&outputs);
        if bytes > self.budget {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else { return };
        if let Some(old) = inner.entries.remove(&key) {
            inner.lru.remove(&old.tick);
            inner.used -= old.bytes;
        }
        while inner.used + bytes > self.budget {
            let Some((_, victim)) = inner.lru.pop_first() else { break };
            if let Some(e) = inner.entries.remove(&victim) {
                inner.used -= e.bytes;
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.lru.insert(tick, key);
        inner.used += bytes;
        inner.entries.insert(key, Entry { outputs, bytes, tick });
    }

    pub fn used_bytes(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.used)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::tensor::DataType;

    fn request(v: u8) -> InferRequest {
        InferRequest {
            inputs: vec![Tensor::new("x", DataType::Uint8, vec![4], Bytes::from(vec![v; 4])).unwrap()],
            ..Default::default()
        }
    }

    fn outputs(n: usize) -> Vec<Tensor> {
        vec![Tensor::new("y", DataType::Uint8, vec![n as i64], Bytes::from(vec![1; n])).unwrap()]
    }

    #[test]
    fn keys_depend_on_what_changes_the_answer() {
        let a = ResponseCache::key("m", 1, &request(1));
        assert_eq!(a, ResponseCache::key("m", 1, &request(1)));
        assert_ne!(a, ResponseCache::key("m", 1, &request(2)));
        assert_ne!(a, ResponseCache::key("m", 2, &request(1)));
        assert_ne!(a, ResponseCache::key("n", 1, &request(1)));
        let mut with_id = request(1);
        with_id.id = Some("other".into());
        with_id.parameters.insert("priority".into(), ParamValue::Int(1));
        assert_eq!(a, ResponseCache::key("m", 1, &with_id), "ids and priorities do not change outputs");
        // A requested output and a parameter that spell the same bytes are still different requests.
        let mut asks_output = request(1);
        asks_output.outputs.push(crate::infer::RequestedOutput::named("y"));
        let mut has_param = request(1);
        has_param.parameters.insert("y".into(), ParamValue::String("\0\0\0\0".into()));
        assert_ne!(ResponseCache::key("m", 1, &asks_output), ResponseCache::key("m", 1, &has_param));
    }

    #[test]
    fn evicts_least_recently_used_within_budget() {
        let one = bytes_of(&outputs(100));
        let cache = ResponseCache::new(one * 2);
        let (k1, k2, k3) = ([1; 32], [2; 32], [3; 32]);
        cache.insert(k1, outputs(100));
        cache.insert(k2, outputs(100));
        assert!(cache.get(&k1).is_some(), "k1 is now the most recently used");
        cache.insert(k3, outputs(100));
        assert!(cache.get(&k2).is_none(), "k2 was the least recently used");
        assert!(cache.get(&k1).is_some() && cache.get(&k3).is_some());
        assert!(cache.used_bytes() <= one * 2);
        cache.insert([4; 32], outputs(10_000));
        assert_eq!(cache.len(), 2, "a response bigger than the budget is not cached");
    }

    #[test]
    fn parses_triton_cache_config() {
        assert_eq!(parse_cache_config(&["local,size=1048576".into()]), Ok(Some(1_048_576)));
        assert_eq!(parse_cache_config(&[]), Ok(None));
        assert!(parse_cache_config(&["redis,host=x".into()]).is_err());
        assert!(parse_cache_config(&["local,size=lots".into()]).is_err());
    }
}
