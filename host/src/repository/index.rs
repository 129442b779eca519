//! Readiness and the repository index: which models and versions are ready, Triton's strict
//! readiness, and the index's state and reason per version.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{IndexEntry, ModelManager, VersionState};
use crate::error::{CoreError, CoreResult};
use crate::model::LoadedModel;

impl ModelManager {
    /// Every ready version, oldest first (for `/v2/models/stats`).
    pub fn ready_models(&self) -> Vec<Arc<LoadedModel>> {
        let Ok(models) = self.models.read() else { return Vec::new() };
        models
            .values()
            .flat_map(|e| e.versions.values())
            .filter_map(|s| match s {
                VersionState::Ready(m) => Some(Arc::clone(m)),
                VersionState::Unavailable(_) => None,
            })
            .collect()
    }

    /// Ready versions of one model, oldest first; NotFound for an unknown model.
    pub fn ready_versions(&self, name: &str) -> CoreResult<Vec<Arc<LoadedModel>>> {
        let models = self.models.read().map_err(|_| CoreError::internal("model table poisoned"))?;
        let entry = models.get(name).ok_or_else(|| CoreError::unknown_model(name))?;
        Ok(entry
            .versions
            .values()
            .filter_map(|s| match s {
                VersionState::Ready(m) => Some(Arc::clone(m)),
                VersionState::Unavailable(_) => None,
            })
            .collect())
    }

    /// Triton's strict readiness: every model that was loaded (and not unloaded) has all its
    /// versions ready.
    pub fn all_ready(&self) -> bool {
        let Ok(models) = self.models.read() else { return false };
        models.values().filter(|e| !e.unloaded).all(|e| {
            e.error.is_none()
                && !e.versions.is_empty()
                && e.versions.values().all(|s| matches!(s, VersionState::Ready(_)))
        })
    }

    /// The repository index: every model directory, with the state of each known version.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let on_disk: BTreeSet<String> = self.scan().into_keys().collect();
        let Ok(models) = self.models.read() else { return Vec::new() };
        let mut names: BTreeSet<&String> = on_disk.iter().collect();
        names.extend(models.keys());
        let mut out = Vec::new();
        for name in names {
            let Some(entry) = models.get(name) else {
                if !ready_only {
                    out.push(IndexEntry { name: name.clone(), version: None, state: None, reason: String::new() });
                }
                continue;
            };
            if let Some(error) = &entry.error {
                if !ready_only {
                    out.push(IndexEntry {
                        name: name.clone(),
                        version: None,
                        state: Some("UNAVAILABLE"),
                        reason: error.message.clone(),
                    });
                }
                continue;
            }
            for (version, state) in &entry.versions {
                let (state, reason) = match state {
                    VersionState::Ready(_) => ("READY", String::new()),
                    VersionState::Unavailable(reason) => ("UNAVAILABLE", reason.clone()),
                };
                if ready_only && state != "READY" {
                    continue;
                }
                out.push(IndexEntry {
                    name: name.clone(),
                    version: Some(version.to_string()),
                    state: Some(state),
                    reason,
                });
            }
        }
        out
    }
}
