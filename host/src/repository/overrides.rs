//! The temporary directory of a load with file overrides (Triton's `file:<version>/<name>` load
//! parameters): the files written under it, confined to it, and removed when it is dropped.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// The temporary directory of a load with file overrides; removed when dropped.
#[derive(Debug)]
pub(crate) struct OverrideDir {
    pub(super) path: PathBuf,
}

impl OverrideDir {
    /// Writes `files` (relative paths) into a new directory under the system's temporary
    /// directory. The error is Triton's wording for what was wrong.
    pub(super) fn create(model: &str, files: &[(String, Vec<u8>)]) -> Result<Self, String> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let root = std::env::temp_dir();
        let path = loop {
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let nanos = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
            let candidate = root.join(format!("tessera-override-{}-{n}-{nanos:08x}", std::process::id()));
            match std::fs::create_dir(&candidate) {
                Ok(()) => break candidate,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("failed to create a directory for model '{model}': {e}")),
            }
        };
        // From here on, a failure removes what was written.
        let dir = Self { path };
        for (key, contents) in files {
            let relative = key.strip_prefix("file:").unwrap_or(key);
            let target = dir.contained(relative).ok_or_else(|| {
                format!(
                    "Invalid file parameter '{key}' with normalized path '{}' must stay within model directory.",
                    dir.path.join(relative).display()
                )
            })?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|_| format!("Invalid file parameter '{key}', directory has been created as a file"))?;
            }
            std::fs::write(&target, contents).map_err(|e| format!("failed to write file parameter '{key}': {e}"))?;
        }
        Ok(dir)
    }

    /// `relative` under this directory, if it names a file inside it (no `..`, no absolute path).
    fn contained(&self, relative: &str) -> Option<PathBuf> {
        use std::path::Component;
        let mut path = self.path.clone();
        let mut depth = 0usize;
        for part in Path::new(relative).components() {
            match part {
                Component::Normal(p) => {
                    path.push(p);
                    depth += 1;
                }
                Component::CurDir => {}
                Component::ParentDir if depth > 0 => {
                    path.pop();
                    depth -= 1;
                }
                _ => return None,
            }
        }
        (depth > 0).then_some(path)
    }
}

impl Drop for OverrideDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), "could not remove a model override directory: {e}");
        }
    }
}
