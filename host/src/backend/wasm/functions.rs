//! The function cache: Cranelift's incremental compilation cache, one file per compiled
//! function, shared by every compile that has the compile cache directory.
//!
//! Why: components differ while most of their code does not. Every Python guest carries the
//! same interpreter (and numpy, when it uses it); only the snapshot of its own module differs.
//! Cranelift keys each function by its body and the compiler's settings, so a second guest's
//! compile finds the interpreter's functions here and compiles only what is new: on two cores a
//! numpy guest's compile drops to about a third of a cold one (docs/benchmarks.md).
//!
//! The entries are machine code the compiler process wrote, and the compiled components they
//! end up in are loaded as they are: the directory is trusted exactly as the `.cwasm` files
//! beside it are. Each entry ends with a checksum of its bytes, so a torn or truncated file is a
//! miss (the function is compiled again), never code. Its size is bounded twice: one compile
//! adds at most `max_bytes` (a hostile component cannot fill the disk through it), and after each
//! compile the server evicts the least recently used entries until the cache fits that cap
//! (`CompileCache`, through `DiskCache`); a hit marks its entry as used.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::CacheStore;

use crate::backend::disk_cache::{touch, write_unsynced};

/// The entries' file name suffix (what `DiskCache` counts and evicts).
pub(super) const SUFFIX: &str = ".fn";

/// The directory of the function cache inside a compile cache directory.
pub(super) fn dir_in(cache_dir: &Path) -> PathBuf {
    cache_dir.join("functions")
}

/// The cap of the function cache: an eighth of the compile cache's (0: none). Two families of
/// guests (with and without numpy) take about 100 MB.
pub(super) fn cap_for(compile_cache_max_bytes: u64) -> u64 {
    compile_cache_max_bytes / 8
}

/// Where compiler processes keep compiled functions, and how many bytes one compile may add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionCache {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

/// One compile's view of the function cache ([`wasmtime::Config::enable_incremental_compilation`]).
#[derive(Debug)]
pub(super) struct FunctionStore {
    dir: PathBuf,
    /// Bytes this store may still add (one compile's share of the cap).
    budget: AtomicU64,
}

impl FunctionStore {
    /// A store over `dir` that adds at most `max_bytes` (0: no bound).
    pub(super) fn new(dir: PathBuf, max_bytes: u64) -> Self {
        let budget = if max_bytes == 0 { u64::MAX } else { max_bytes };
        Self { dir, budget: AtomicU64::new(budget) }
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let hex: String = key.iter().take(32).map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}{SUFFIX}"))
    }

    /// Takes `bytes` from the budget; false when they do not fit.
    fn spend(&self, bytes: u64) -> bool {
        self.budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(bytes)).is_ok()
    }
}

fn checksum(value: &[u8]) -> [u8; 8] {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish().to_le_bytes()
}

impl CacheStore for FunctionStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let path = self.path(key);
        let mut entry = std::fs::read(&path).ok()?;
        let split = entry.len().checked_sub(8)?;
        if entry[split..] != checksum(&entry[..split]) {
            return None;
        }
        touch(&path);
        entry.truncate(split);
        Some(Cow::Owned(entry))
    }

    fn insert(&self, key: &[u8], mut value: Vec<u8>) -> bool {
        let sum = checksum(&value);
        value.extend_from_slice(&sum);
        if !self.spend(value.len() as u64) {
            return false;
        }
        // No fsync: an entry lost or torn by a crash is a miss (the checksum), and a compile
        // writes thousands of them.
        write_unsynced(&self.path(key), &value).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wasm::test_support::TempDir;

    #[test]
    fn an_entry_comes_back_and_a_damaged_one_is_a_miss() {
        let tmp = TempDir::new("functions");
        let store = FunctionStore::new(tmp.0.join("functions"), 0);
        assert!(store.get(b"key").is_none(), "nothing stored yet");
        assert!(store.insert(b"key", b"compiled code".to_vec()));
        assert_eq!(store.get(b"key").as_deref(), Some(&b"compiled code"[..]));
        let file = store.path(b"key");
        let mut bytes = std::fs::read(&file).expect("entry");
        bytes[0] ^= 1;
        std::fs::write(&file, &bytes).expect("damage");
        assert!(store.get(b"key").is_none(), "a damaged entry is a miss, not code");
        std::fs::write(&file, b"short").expect("truncate");
        assert!(store.get(b"key").is_none(), "a truncated entry is a miss");
    }

    #[test]
    fn one_compile_adds_no_more_than_its_budget() {
        let tmp = TempDir::new("functions-budget");
        let store = FunctionStore::new(tmp.0.join("functions"), 100);
        assert!(store.insert(b"a", vec![0; 50]), "58 bytes with the checksum fit");
        assert!(!store.insert(b"b", vec![0; 50]), "another 58 do not");
        assert!(store.insert(b"c", vec![0; 30]), "38 more still fit");
        assert!(store.get(b"b").is_none());
        let size: u64 = std::fs::read_dir(tmp.0.join("functions"))
            .expect("dir")
            .map(|e| e.expect("entry").metadata().expect("meta").len())
            .sum();
        assert_eq!(size, 96, "what was written is within the budget");
    }
}
