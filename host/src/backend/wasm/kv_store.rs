//! The data behind `wasi:keyvalue` (see `keyvalue`): one store per model name, shared by every
//! instance and version of the model, split into spaces: one per tenant (with a tenants file) and
//! one for calls that run as no tenant (`initialize`, callers without a tenants file). Each space
//! holds buckets of keys and may hold at most the model's quota of bytes (keys, values and bucket
//! names, plus [`ENTRY_OVERHEAD`] each); a write past it is refused and changes nothing.
//!
//! Persistence (a model whose config asks for `keyvalue` = `persistent`, on a server given
//! `--guest-keyvalue-dir`): the store is read from `<dir>/<sha256 of the model name>.tkv` when it
//! is first opened and written back (a new file, then renamed over the old) at most a second after
//! a change, and when the last instance of the model goes. The file format (integers u32 LE):
//! `TKV1`, the name's length and bytes, then records of space flag (u8, 1 = a tenant's, then its
//! name's length and bytes), bucket, key and value, each as length and bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::backend::disk_cache::{hex, write_privately};

/// What each entry and bucket costs beyond its bytes.
pub(super) const ENTRY_OVERHEAD: u64 = 32;
/// How long a change may wait to be written to disk while the store stays open.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
const MAGIC: &[u8; 4] = b"TKV1";

/// Who a space belongs to: a tenant's name, or none.
pub(super) type SpaceKey = Option<Arc<str>>;

#[derive(Default)]
struct Space {
    buckets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    used: u64,
}

impl Space {
    fn cost(key: &str, value: &[u8]) -> u64 {
        (key.len() + value.len()) as u64 + ENTRY_OVERHEAD
    }

    /// What the space would take once `key` of `bucket` holds `value` (what [`Self::insert`] adds).
    fn used_after(&self, bucket: &str, key: &str, value: &[u8]) -> u64 {
        let old = self.buckets.get(bucket).and_then(|b| b.get(key)).map_or(0, |v| Self::cost(key, v));
        let new_bucket = if self.buckets.contains_key(bucket) { 0 } else { Self::cost(bucket, &[]) };
        self.used - old + Self::cost(key, value) + new_bucket
    }

    fn insert(&mut self, bucket: &str, key: String, value: Vec<u8>) {
        if !self.buckets.contains_key(bucket) {
            self.used += Self::cost(bucket, &[]);
        }
        let entries = self.buckets.entry(bucket.to_string()).or_default();
        self.used += Self::cost(&key, &value);
        if let Some(old) = entries.insert(key.clone(), value) {
            self.used -= Self::cost(&key, &old);
        }
    }
}

/// Why an operation was refused: the guest gets the message (it names no other tenant's data).
#[derive(Debug, PartialEq)]
pub(super) struct Refused(pub(super) String);

/// One model's store.
pub(super) struct ModelStore {
    model: String,
    quota: u64,
    file: Option<PathBuf>,
    state: Mutex<State>,
    /// Set once the store has gone and its last write is done (see [`KeyValueStores::open`]).
    closed: Arc<Closed>,
}

/// Whether a store has finished closing.
#[derive(Default)]
struct Closed {
    done: Mutex<bool>,
    signal: Condvar,
}

impl Closed {
    fn finish(&self) {
        *self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.signal.notify_all();
    }

    fn is_done(&self) -> bool {
        *self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits (at most `limit`) for the store to finish closing.
    fn wait(&self, limit: Duration) {
        let done = self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = self.signal.wait_timeout_while(done, limit, |done| !*done);
    }
}

#[derive(Default)]
struct State {
    spaces: HashMap<SpaceKey, Space>,
    dirty: bool,
}

impl ModelStore {
    fn open(model: &str, quota: u64, dir: Option<&Path>) -> Result<Arc<Self>, String> {
        let file = dir.map(|d| d.join(format!("{}.tkv", hex(&Sha256::digest(model.as_bytes())))));
        let spaces = match &file {
            Some(path) if path.exists() => read_store(path, model)?,
            _ => HashMap::new(),
        };
        let state = Mutex::new(State { spaces, dirty: false });
        let store = Arc::new(Self { model: model.to_string(), quota, file, state, closed: Arc::default() });
        if store.file.is_some() {
            let weak = Arc::downgrade(&store);
            std::thread::Builder::new()
                .name("tessera-kv-flush".into())
                .spawn(move || flush_while_open(weak))
                .map_err(|e| format!("failed to start the key-value writer: {e}"))?;
        }
        Ok(store)
    }

    /// Runs `f` on the space of `space`, creating it empty.
    fn with<T>(&self, space: &SpaceKey, f: impl FnOnce(&mut Space) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(state.spaces.entry(space.clone()).or_default())
    }

    fn with_mut<T>(&self, space: &SpaceKey, f: impl FnOnce(&mut Space) -> Result<T, Refused>) -> Result<T, Refused> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = f(state.spaces.entry(space.clone()).or_default());
        if result.is_ok() {
            state.dirty = true;
        }
        result
    }

    pub(super) fn get(&self, space: &SpaceKey, bucket: &str, key: &str) -> Option<Vec<u8>> {
        self.with(space, |s| s.buckets.get(bucket).and_then(|b| b.get(key)).cloned())
    }

    pub(super) fn exists(&self, space: &SpaceKey, bucket: &str, key: &str) -> bool {
        self.with(space, |s| s.buckets.get(bucket).is_some_and(|b| b.contains_key(key)))
    }

    pub(super) fn set(&self, space: &SpaceKey, bucket: &str, key: String, value: Vec<u8>) -> Result<(), Refused> {
        let quota = self.quota;
        self.with_mut(space, |s| {
            let after = s.used_after(bucket, &key, &value);
            if after > quota {
                return Err(Refused(format!(
                    "the write would take this model's key-value store to {after} bytes, past its quota of {quota} \
                     (keyvalue_max_bytes)"
                )));
            }
            s.insert(bucket, key, value);
            Ok(())
        })
    }

    pub(super) fn delete(&self, space: &SpaceKey, bucket: &str, key: &str) {
        let _ = self.with_mut(space, |s| {
            let Some(entries) = s.buckets.get_mut(bucket) else { return Ok(()) };
            if let Some(old) = entries.remove(key) {
                s.used -= Space::cost(key, &old);
            }
            if entries.is_empty() {
                s.buckets.remove(bucket);
                s.used -= Space::cost(bucket, &[]);
            }
            Ok(())
        });
    }

    /// Up to `page` keys of `bucket` in order, from position `cursor`, and the next cursor.
    pub(super) fn list(&self, space: &SpaceKey, bucket: &str, cursor: u64, page: usize) -> (Vec<String>, Option<u64>) {
        self.with(space, |s| {
            let Some(entries) = s.buckets.get(bucket) else { return (Vec::new(), None) };
            let start = usize::try_from(cursor).unwrap_or(usize::MAX);
            let keys: Vec<String> = entries.keys().skip(start).take(page).cloned().collect();
            let next = (start.saturating_add(keys.len()) < entries.len()).then(|| (start + keys.len()) as u64);
            (keys, next)
        })
    }

    /// Adds `delta` to the decimal number `key` holds (0 when absent), as wasmtime's own
    /// wasi:keyvalue does, and returns the sum.
    pub(super) fn increment(&self, space: &SpaceKey, bucket: &str, key: String, delta: u64) -> Result<u64, Refused> {
        let quota = self.quota;
        self.with_mut(space, |s| {
            let current = match s.buckets.get(bucket).and_then(|b| b.get(&key)) {
                None => 0,
                Some(bytes) => std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| Refused("increment: the value is not a decimal number".into()))?,
            };
            let sum = current.checked_add(delta).ok_or_else(|| Refused("increment: the sum overflows u64".into()))?;
            let value = sum.to_string().into_bytes();
            if s.used_after(bucket, &key, &value) > quota {
                return Err(Refused(format!("increment: past this model's key-value quota of {quota} bytes")));
            }
            s.insert(bucket, key, value);
            Ok(sum)
        })
    }

    /// Writes the store to its file if it changed since the last write.
    fn flush(&self) -> Result<(), String> {
        let Some(path) = &self.file else { return Ok(()) };
        let bytes = {
            let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !state.dirty {
                return Ok(());
            }
            state.dirty = false;
            encode(&self.model, &state.spaces)
        };
        // A new file, synced, then renamed over the old: a crash leaves the old or the new whole.
        if let Err(e) = write_privately(path, &bytes) {
            // Written again at the next flush.
            self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).dirty = true;
            return Err(format!("failed to write the key-value store of model '{}': {e}", self.model));
        }
        Ok(())
    }
}

impl Drop for ModelStore {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!("{e}");
        }
        self.closed.finish();
    }
}

fn flush_while_open(store: Weak<ModelStore>) {
    loop {
        std::thread::sleep(FLUSH_EVERY);
        let Some(store) = store.upgrade() else { return };
        if let Err(e) = store.flush() {
            tracing::error!("{e}");
        }
    }
}

/// How long opening a model's store waits for its previous store to finish its last write.
const CLOSE_PATIENCE: Duration = Duration::from_secs(10);

/// A model's store while any instance holds it, and whether it has finished closing.
type OpenStore = (Weak<ModelStore>, Arc<Closed>);

/// The open stores by model name: every instance of a model shares one while any is alive.
#[derive(Default)]
pub(super) struct KeyValueStores {
    open: Mutex<HashMap<String, OpenStore>>,
}

impl KeyValueStores {
    /// The store of `model`, opened (and read from `dir`) if no instance holds it. An instance
    /// created while an older one lives shares its store, quota included, until all have gone.
    pub(super) fn open(&self, model: &str, quota: u64, dir: Option<&Path>) -> Result<Arc<ModelStore>, String> {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((store, closed)) = open.get(model) {
            if let Some(store) = store.upgrade() {
                return Ok(store);
            }
            // Its last instance has gone: read the file only once the old store has written it.
            closed.wait(CLOSE_PATIENCE);
        }
        open.retain(|_, (store, closed)| store.strong_count() > 0 || !closed.is_done());
        let store = ModelStore::open(model, quota, dir)?;
        open.insert(model.to_string(), (Arc::downgrade(&store), Arc::clone(&store.closed)));
        Ok(store)
    }
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn encode(model: &str, spaces: &HashMap<SpaceKey, Space>) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put(&mut out, model.as_bytes());
    for (space, content) in spaces {
        for (bucket, entries) in &content.buckets {
            for (key, value) in entries {
                match space {
                    Some(tenant) => {
                        out.push(1);
                        put(&mut out, tenant.as_bytes());
                    }
                    None => out.push(0),
                }
                put(&mut out, bucket.as_bytes());
                put(&mut out, key.as_bytes());
                put(&mut out, value);
            }
        }
    }
    out
}

/// Reads a store file; one that is not this model's, or is cut short, is refused whole.
fn read_store(path: &Path, model: &str) -> Result<HashMap<SpaceKey, Space>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("failed to read the key-value store {}: {e}", path.display()))?;
    let bad = || format!("{} is not this model's key-value store (or is damaged)", path.display());
    let mut reader = Reader(bytes.strip_prefix(MAGIC.as_slice()).ok_or_else(bad)?);
    if reader.text().as_deref() != Some(model) {
        return Err(bad());
    }
    let mut spaces: HashMap<SpaceKey, Space> = HashMap::new();
    while let Some(flag) = reader.take(1) {
        let space: SpaceKey = match flag[0] {
            0 => None,
            1 => Some(reader.text().ok_or_else(bad)?.into()),
            _ => return Err(bad()),
        };
        let bucket = reader.text().ok_or_else(bad)?;
        let key = reader.text().ok_or_else(bad)?;
        let value = reader.field().ok_or_else(bad)?.to_vec();
        spaces.entry(space).or_default().insert(&bucket, key, value);
    }
    Ok(spaces)
}

/// What is left of a store file to read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn field(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        self.take(len)
    }

    fn text(&mut self) -> Option<String> {
        String::from_utf8(self.field()?.to_vec()).ok()
    }
}

#[cfg(test)]
#[path = "kv_store_tests.rs"]
mod tests;
