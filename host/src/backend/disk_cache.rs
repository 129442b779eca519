//! Size caps for the on-disk caches of built Python guests and compiled components, and how their
//! entries are written ([`write_atomically`]): each file is an entry, its modification time says
//! when it was last used ([`touch`] on every hit), and after each addition the least recently
//! used entries go until the cache fits its cap ([`DiskCache::admit`]). Every distinct uploaded
//! `model.py` adds an entry, so without a cap a client with load access could fill the disk.
//!
//! An entry just written or just used is never evicted by the addition that follows it, and a
//! server whose entry was evicted while it runs builds or compiles it again when it needs it.
//! `/metrics` shows each cache's size, cap and evictions ([`render`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

/// The default cap of each build or compile cache: about a hundred numpy guests.
pub(crate) const DEFAULT_CACHE_MAX_BYTES: u64 = 4 << 30;

/// One capped cache directory: entries are the files whose names end with `suffix`.
pub(crate) struct DiskCache {
    name: &'static str,
    suffix: &'static str,
    max_bytes: u64,
    stats: Arc<CacheStats>,
    /// One sweep at a time in this process.
    sweeping: Mutex<()>,
    /// Whether a sweep has measured the cache yet (a hit sweeps only before the first).
    measured: std::sync::atomic::AtomicBool,
    /// Entries about to be read (by how many): no sweep removes them.
    pinned: Mutex<std::collections::HashMap<PathBuf, usize>>,
}

/// Keeps an entry from eviction while it lives ([`DiskCache::pin`]).
pub(crate) struct Pinned<'a> {
    cache: &'a DiskCache,
    path: PathBuf,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        let mut pinned = self.cache.pinned.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = pinned.get_mut(&self.path) {
            *count -= 1;
            if *count == 0 {
                pinned.remove(&self.path);
            }
        }
    }
}

/// What `/metrics` shows of one cache.
#[derive(Default)]
struct CacheStats {
    bytes: AtomicU64,
    max_bytes: AtomicU64,
    evictions: AtomicU64,
    evicted_bytes: AtomicU64,
}

/// The caches of this process, by name, for `/metrics`.
type Registry = Mutex<Vec<(&'static str, Arc<CacheStats>)>>;

fn registry() -> &'static Registry {
    static CACHES: OnceLock<Registry> = OnceLock::new();
    CACHES.get_or_init(Mutex::default)
}

impl DiskCache {
    /// `name` labels the metrics (`python_guests`, `compiled_components`); `max_bytes` 0: no cap.
    pub(crate) fn new(name: &'static str, suffix: &'static str, max_bytes: u64) -> Self {
        let stats = {
            let mut caches = registry().lock().unwrap_or_else(|e| e.into_inner());
            match caches.iter().find(|(n, _)| *n == name) {
                Some((_, stats)) => Arc::clone(stats),
                None => {
                    let stats = Arc::new(CacheStats::default());
                    caches.push((name, Arc::clone(&stats)));
                    stats
                }
            }
        };
        stats.max_bytes.store(max_bytes, Ordering::Relaxed);
        Self {
            name,
            suffix,
            max_bytes,
            stats,
            sweeping: Mutex::default(),
            measured: Default::default(),
            pinned: Mutex::default(),
        }
    }

    /// Keeps `path` from eviction until the guard drops (a caller about to read it).
    pub(crate) fn pin(&self, path: &Path) -> Pinned<'_> {
        *self.pinned.lock().unwrap_or_else(|e| e.into_inner()).entry(path.to_path_buf()).or_default() += 1;
        Pinned { cache: self, path: path.to_path_buf() }
    }

    /// `used`, an entry of `dir`, was just read from the cache: it becomes the most recently
    /// used. A hit adds no bytes, so it sweeps only when nothing has measured the cache yet.
    pub(crate) fn hit(&self, dir: &Path, used: &Path) {
        if self.measured.load(Ordering::Relaxed) {
            touch(used);
        } else {
            self.admit(dir, used);
        }
    }

    /// The cache's cap in bytes (0: none).
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// After `added` was written in `dir`: evicts the least recently used entries until the
    /// cache fits its cap, never `added` itself. Returns the entries evicted.
    pub(crate) fn admit(&self, dir: &Path, added: &Path) -> Vec<PathBuf> {
        touch(added);
        self.sweep_keeping(dir, Some(added))
    }

    /// After entries were added to `dir` by another process: evicts the least recently used
    /// entries until the cache fits its cap. Returns the entries evicted.
    pub(crate) fn sweep(&self, dir: &Path) -> Vec<PathBuf> {
        self.sweep_keeping(dir, None)
    }

    fn sweep_keeping(&self, dir: &Path, added: Option<&Path>) -> Vec<PathBuf> {
        self.measured.store(true, Ordering::Relaxed);
        let _sweeping = self.sweeping.lock().unwrap_or_else(|e| e.into_inner());
        let mut entries = self.entries(dir);
        let mut total: u64 = entries.iter().map(|(_, _, size)| size).sum();
        let mut evicted = Vec::new();
        if self.max_bytes > 0 && total > self.max_bytes {
            entries.sort_by_key(|(_, used, _)| *used);
            for (path, _, size) in entries {
                if total <= self.max_bytes {
                    break;
                }
                if Some(path.as_path()) == added
                    || self.pinned.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&path)
                {
                    continue;
                }
                if std::fs::remove_file(&path).is_ok() {
                    total = total.saturating_sub(size);
                    self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                    self.stats.evicted_bytes.fetch_add(size, Ordering::Relaxed);
                    tracing::info!(cache = self.name, entry = %path.display(), bytes = size, "evicted from the cache");
                    evicted.push(path);
                }
            }
        }
        self.stats.bytes.store(total, Ordering::Relaxed);
        evicted
    }

    /// The cache's entries: path, last use, size.
    fn entries(&self, dir: &Path) -> Vec<(PathBuf, SystemTime, u64)> {
        let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
        read.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(self.suffix) && !n.starts_with('.')))
            .filter_map(|e| {
                let meta = e.metadata().ok().filter(|m| m.is_file())?;
                Some((e.path(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len()))
            })
            .collect()
    }
}

/// Marks an entry as just used (its modification time), for the least-recently-used order.
pub(crate) fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Writes through a temporary file and a rename, so a concurrent reader (another server sharing
/// the cache) never sees a half-written entry, and syncs it to disk first.
pub(crate) fn write_atomically(file: &Path, data: &[u8]) -> Result<(), String> {
    write_through_temp(file, data, true, 0o666)
}

/// [`write_atomically`] for a file only the server's user may read (mode 0600 before umask).
pub(crate) fn write_privately(file: &Path, data: &[u8]) -> Result<(), String> {
    write_through_temp(file, data, true, 0o600)
}

/// Lowercase hexadecimal of `bytes`: how digests name cache entries and files.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// [`write_atomically`] without the sync: for entries so many and so cheap that losing one to a
/// crash costs less than syncing each (the function cache's, which checksum their bytes).
pub(crate) fn write_unsynced(file: &Path, data: &[u8]) -> Result<(), String> {
    write_through_temp(file, data, false, 0o666)
}

fn write_through_temp(file: &Path, data: &[u8], sync: bool, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = file.parent().ok_or("cache path has no directory")?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    // A temporary file of its own, created new: servers in other containers sharing the cache
    // may have the same pid (each compiler process counts from 0), and writing into another's
    // temporary file could publish a torn entry.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let (tmp, mut out) = loop {
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp{}-{nanos}-{n}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp) {
            Ok(out) => break (tmp, out),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.to_string()),
        }
    };
    let written = std::io::Write::write_all(&mut out, data).and_then(|()| if sync { out.sync_data() } else { Ok(()) });
    drop(out);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, file)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.to_string());
    }
    Ok(())
}

/// The maker of one entry, across every process that shares the cache directory: held while the
/// entry is built or compiled, so that a second server wanting the same entry (replicas sharing
/// a cache volume, a test suite's parallel workers) waits and then reads it instead of making it
/// again. The lock is `flock` on `<dir>/.<key>.lock`, released by the kernel if the holder dies;
/// the file goes when the maker is done.
pub(crate) struct EntryLock {
    path: PathBuf,
    file: std::fs::File,
}

impl EntryLock {
    /// Waits for the lock of `key` in `dir`, checking `give_up` while another process holds it.
    /// `None` when `give_up` says so, or when no lock file can be made there (the caller then
    /// makes the entry unlocked, as before there were locks). Whoever gets the lock must look for
    /// the entry again: the holder it waited for may have made it.
    pub(crate) fn acquire(dir: &Path, key: &str, give_up: impl Fn() -> bool) -> Option<Self> {
        let path = dir.join(format!(".{key}.lock"));
        std::fs::create_dir_all(dir).ok()?;
        let file = std::fs::File::options().create(true).truncate(false).write(true).open(&path).ok()?;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(Self { path, file }),
                Err(std::fs::TryLockError::WouldBlock) if !give_up() => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(_) => return None,
            }
        }
    }
}

impl Drop for EntryLock {
    fn drop(&mut self) {
        // Removed while still held (and only if it is still this lock's file): a process that
        // opened it before and gets the lock next finds the entry made (or makes it); one
        // arriving later starts a new lock file.
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ours), Ok(there)) = (self.file.metadata(), std::fs::metadata(&self.path))
            && (ours.dev(), ours.ino()) == (there.dev(), there.ino())
        {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// The caches' gauges and counters, in the Prometheus text format.
pub(crate) fn render() -> String {
    let caches = registry().lock().unwrap_or_else(|e| e.into_inner());
    if caches.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    type Read = fn(&CacheStats) -> u64;
    let families: [(&str, &str, &str, Read); 4] = [
        ("tessera_disk_cache_bytes", "gauge", "Bytes the cache's entries take on disk", |s| {
            s.bytes.load(Ordering::Relaxed)
        }),
        ("tessera_disk_cache_max_bytes", "gauge", "The cache's size cap in bytes (0: none)", |s| {
            s.max_bytes.load(Ordering::Relaxed)
        }),
        ("tessera_disk_cache_evictions_total", "counter", "Entries evicted, least recently used first", |s| {
            s.evictions.load(Ordering::Relaxed)
        }),
        ("tessera_disk_cache_evicted_bytes_total", "counter", "Bytes of the entries evicted", |s| {
            s.evicted_bytes.load(Ordering::Relaxed)
        }),
    ];
    for (name, kind, help, read) in families {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (cache, stats) in caches.iter() {
            out.push_str(&format!("{name}{{cache=\"{cache}\"}} {}\n", read(stats)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entries_go_first_and_the_new_one_stays() {
        let dir = std::env::temp_dir().join(format!("tessera-disk-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let cache = DiskCache::new("test_cache", ".bin", 250);
        let old = SystemTime::now() - std::time::Duration::from_secs(3600);
        for (i, name) in ["a.bin", "b.bin", "c.bin"].iter().enumerate() {
            let path = dir.join(name);
            std::fs::write(&path, [0u8; 100]).expect("write");
            let file = std::fs::File::options().append(true).open(&path).expect("open");
            file.set_modified(old + std::time::Duration::from_secs(i as u64)).expect("mtime");
        }
        std::fs::write(dir.join("other.txt"), [0u8; 1000]).expect("write");
        touch(&dir.join("a.bin"));
        let evicted = cache.admit(&dir, &dir.join("c.bin"));
        assert_eq!(evicted, vec![dir.join("b.bin")], "b was used least recently; a was just touched");
        assert!(dir.join("other.txt").exists(), "files that are not entries stay");
        let metrics = render();
        assert!(metrics.contains("tessera_disk_cache_evictions_total{cache=\"test_cache\"} 1"), "{metrics}");
        assert!(metrics.contains("tessera_disk_cache_bytes{cache=\"test_cache\"} 200"), "{metrics}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_maker_waits_for_the_first_and_the_lock_file_goes_with_it() {
        let dir = std::env::temp_dir().join(format!("tessera-entry-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let first = EntryLock::acquire(&dir, "k", || false).expect("the first maker gets the lock");
        assert!(dir.join(".k.lock").is_file());
        let polls = std::sync::atomic::AtomicUsize::new(0);
        let second = EntryLock::acquire(&dir, "k", || polls.fetch_add(1, Ordering::Relaxed) >= 2);
        assert!(second.is_none(), "the second maker gives up while the first holds the lock");
        assert_eq!(polls.load(Ordering::Relaxed), 3, "it asked whether to give up on each wait");
        let other = EntryLock::acquire(&dir, "other", || true).expect("another key is not held");
        drop(other);
        let waiter = {
            let dir = dir.clone();
            std::thread::spawn(move || EntryLock::acquire(&dir, "k", || false).is_some())
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!waiter.is_finished(), "a maker without a way to give up waits for the holder");
        drop(first);
        assert!(waiter.join().expect("waiter"), "it gets the lock once the first maker is done");
        assert!(!dir.join(".k.lock").exists(), "the lock file goes with its last holder");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn write_atomically_creates_the_directory_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("tessera-atomic-test-{}", std::process::id()));
        let file = dir.join("nested").join("entry.cwasm");
        write_atomically(&file, b"first").expect("write");
        write_atomically(&file, b"second").expect("overwrite");
        assert_eq!(std::fs::read(&file).expect("read back"), b"second");
        let names: Vec<_> =
            std::fs::read_dir(dir.join("nested")).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("entry.cwasm")]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
