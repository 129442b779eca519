//! The inputs of a Python guest build, read once from the version directory: the entry file
//! (`model.py`, or `default_model_filename`), every `.py` file under the directory (sibling
//! modules and packages) and `requirements.txt`. They are uploads, so every size is bounded and
//! no symbolic link is followed: a link in the directory is not an input, wherever it points.
//! The build sees copies of them in a directory of its own, never the model directory itself,
//! and its cache key is their hash.

use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{CoreError, CoreResult};

/// At most this many input files.
pub(super) const MAX_FILES: usize = 2048;
/// At most this many bytes of inputs in all.
pub(super) const MAX_BYTES: u64 = 64 << 20;
/// At most this deep below the version directory.
const MAX_DEPTH: usize = 16;

/// A build's inputs, by path relative to the version directory.
pub(super) struct Sources {
    pub entry: PathBuf,
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// The version directory's name when it is a number (Triton's version directories are): the
    /// build stages the inputs in a directory of that name, which the guest imports the model
    /// file from as a package (`<version>.model`, as Triton's stub does).
    pub version: Option<String>,
}

impl Sources {
    /// Reads the inputs of the build of `entry` (a file in `version_dir`).
    pub(super) fn read(version_dir: &Path, entry: &Path) -> CoreResult<Self> {
        let entry = entry
            .strip_prefix(version_dir)
            .ok()
            .filter(|p| p.components().all(|c| matches!(c, Component::Normal(_))))
            .map(Path::to_path_buf)
            .ok_or_else(|| CoreError::invalid_arg("the model file must be inside its version directory"))?;
        let version = version_dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_string);
        let mut sources = Self { entry: entry.clone(), files: Vec::new(), version };
        let mut total = 0u64;
        let entry_meta = std::fs::symlink_metadata(version_dir.join(&entry));
        if !entry_meta.is_ok_and(|m| m.is_file()) {
            return Err(CoreError::unavailable(format!(
                "the model file '{}' is not a regular file in the version directory",
                entry.display()
            )));
        }
        sources.walk(version_dir, Path::new(""), 0, &mut total)?;
        if !sources.files.iter().any(|(p, _)| *p == entry) {
            sources.add(version_dir, &entry, &mut total)?;
        }
        sources.files.sort_by(|a, b| a.0.cmp(&b.0));
        if sources.files.iter().any(|(p, bytes)| *p == entry && crate::backend::sealed::is_sealed(bytes)) {
            return Err(CoreError::unavailable(format!(
                "'{}' is sealed (encrypted at rest): sealed Python models are not served yet; seal model.onnx, \
                 model.pt or model.wasm",
                entry.display()
            )));
        }
        Ok(sources)
    }

    fn walk(&mut self, root: &Path, relative: &Path, depth: usize, total: &mut u64) -> CoreResult<()> {
        if depth > MAX_DEPTH {
            return Err(too_many(format!("directories nested deeper than {MAX_DEPTH}")));
        }
        let dir = root.join(relative);
        let read = std::fs::read_dir(&dir)
            .map_err(|e| CoreError::unavailable(format!("failed to read the version directory: {e}")))?;
        for item in read.filter_map(|e| e.ok()) {
            let Ok(name) = item.file_name().into_string() else { continue };
            // `file_type` does not follow links: a link is neither a file nor a directory here.
            let Ok(kind) = item.file_type() else { continue };
            let path = relative.join(&name);
            if kind.is_dir() && !name.starts_with('.') && name != "__pycache__" {
                self.walk(root, &path, depth + 1, total)?;
            } else if kind.is_file() && (name.ends_with(".py") || (depth == 0 && name == "requirements.txt")) {
                self.add(root, &path, total)?;
            }
        }
        Ok(())
    }

    fn add(&mut self, root: &Path, relative: &Path, total: &mut u64) -> CoreResult<()> {
        if self.files.len() >= MAX_FILES {
            return Err(too_many(format!("more than {MAX_FILES} Python files")));
        }
        let path = root.join(relative);
        let size = std::fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
        *total += size;
        if *total > MAX_BYTES {
            return Err(too_many(format!("more than {} MiB of Python files", MAX_BYTES >> 20)));
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| CoreError::unavailable(format!("failed to read '{}': {e}", relative.display())))?;
        self.files.push((relative.to_path_buf(), bytes));
        Ok(())
    }

    /// Whether the build has a requirements.txt (and so a fetch phase).
    pub(super) fn has_requirements(&self) -> bool {
        self.files.iter().any(|(p, _)| p == Path::new("requirements.txt"))
    }

    /// The build key: these inputs with the builder's own hash.
    pub(super) fn key(&self, builder_hash: &str) -> String {
        let mut hash = Sha256::new();
        hash.update(builder_hash.as_bytes());
        hash.update(self.version.as_deref().unwrap_or("").as_bytes());
        hash.update(b"/");
        let entry = self.entry.to_string_lossy();
        hash.update((entry.len() as u64).to_le_bytes());
        hash.update(entry.as_bytes());
        for (path, bytes) in &self.files {
            let name = path.to_string_lossy();
            hash.update((name.len() as u64).to_le_bytes());
            hash.update(name.as_bytes());
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        }
        super::hex(&hash.finalize())
    }

    /// Writes the inputs under `dir` (a fresh build directory).
    pub(super) fn write(&self, dir: &Path) -> std::io::Result<()> {
        for (path, bytes) in &self.files {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(target, bytes)?;
        }
        Ok(())
    }
}

fn too_many(what: String) -> CoreError {
    CoreError::unavailable(format!("the version directory has {what}: a Python model's build inputs are bounded"))
}
