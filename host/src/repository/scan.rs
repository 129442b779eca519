//! Where models are on disk: the repositories' model directories, a model's one directory (or
//! the temporary one of a load with file overrides), and what its files say before it loads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ModelManager;
use super::overrides::OverrideDir;
use crate::error::{CoreError, CoreResult};

impl ModelManager {
    /// Model directories present in the repositories (name -> directory). A name found in two
    /// repositories maps to the first; `load` reports the conflict.
    pub(super) fn scan(&self) -> BTreeMap<String, PathBuf> {
        let mut found = BTreeMap::new();
        for repo in &self.options.repositories {
            let Ok(entries) = std::fs::read_dir(repo) else {
                tracing::warn!(repository = %repo.display(), "model repository is not readable");
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
                if path.is_dir() && !name.starts_with('.') {
                    found.entry(name).or_insert(path);
                }
            }
        }
        found
    }

    /// Where a load reads the model from: its override directory, else its repository directory.
    pub(super) fn source_dir(&self, name: &str, override_dir: Option<&OverrideDir>) -> CoreResult<PathBuf> {
        match override_dir {
            Some(o) => Ok(o.path.clone()),
            None => self.locate(name),
        }
    }

    /// The directories named `name` in the repositories: none, one, or (an error) more.
    pub(super) fn dirs_of(&self, name: &str) -> Vec<PathBuf> {
        self.options.repositories.iter().map(|r| r.join(name)).filter(|p| p.is_dir()).collect()
    }

    pub(super) fn locate(&self, name: &str) -> CoreResult<PathBuf> {
        let dirs = self.dirs_of(name);
        match dirs.as_slice() {
            [] => Err(CoreError::internal(format!("failed to load '{name}', failed to poll from model repository"))),
            [one] => Ok(one.clone()),
            _ => Err(CoreError::invalid_arg(format!(
                "failed to load '{name}': model appears in more than one model repository ({})",
                dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

/// A name given to load (and register): Triton's checks (`ValidateModelName`: not empty once
/// trimmed, not `..`, no `/`) with Triton's messages, then [`valid_name`]'s.
pub(crate) fn check_name(name: &str) -> CoreResult<()> {
    if name.len() > 1024 {
        return Err(CoreError::invalid_arg(format!("invalid model name: {} bytes, more than 1024", name.len())));
    }
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err(CoreError::invalid_arg("Model name cannot be empty. Please enter a valid name to deploy."));
    }
    if trimmed == ".." || trimmed.contains('/') {
        return Err(CoreError::invalid_arg(format!(
            "invalid model name '{name}', model name must not contain path traversal characters"
        )));
    }
    if !valid_name(name) {
        return Err(CoreError::invalid_arg(format!("invalid model name '{name}'")));
    }
    Ok(())
}

/// A name that can be a model directory's: not empty, no `/`, backslash or NUL, not `.` or `..`.
pub(super) fn valid_name(name: &str) -> bool {
    !(name.is_empty() || name.len() > 1024 || name.contains(['/', '\\', '\0']) || name == "." || name == "..")
}

/// Whether a model directory's config.pbtxt mentions an ensemble (a cheap test that sends every
/// ensemble, and perhaps a model with "ensemble" in a comment, to the one-by-one startup loads).
pub(super) fn mentions_ensemble(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("config.pbtxt")).is_ok_and(|text| text.contains("ensemble"))
}
