//! Readiness and the repository index: which models and versions are ready, Triton's strict
//! readiness, and the index's state and reason per version.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::state::ModelState;
use super::{IndexEntry, ModelManager};
use crate::error::{CoreError, CoreResult};
use crate::model::LoadedModel;

impl ModelManager {
    /// Every ready version, oldest first (for `/v2/models/stats`).
    pub fn ready_models(&self) -> Vec<Arc<LoadedModel>> {
        let Ok(models) = self.models.read() else { return Vec::new() };
        models.values().flat_map(|e| e.versions.values()).filter_map(|s| s.ready().cloned()).collect()
    }

    /// Ready versions of one model, oldest first; NotFound for an unknown model.
    pub fn ready_versions(&self, name: &str) -> CoreResult<Vec<Arc<LoadedModel>>> {
        let models = self.models.read().map_err(|_| CoreError::internal("model table poisoned"))?;
        let entry = models.get(name).ok_or_else(|| CoreError::unknown_model(name))?;
        Ok(entry.versions.values().filter_map(|s| s.ready().cloned()).collect())
    }

    /// Triton's strict readiness: every model that was loaded (and not unloaded) has all its
    /// versions ready, and none of them is failing in its instances.
    pub fn all_ready(&self) -> bool {
        let Ok(models) = self.models.read() else { return false };
        models.values().filter(|e| !e.state.is_unloaded()).all(|e| {
            e.state.is_loaded()
                && !e.versions.is_empty()
                && e.versions.values().all(|s| s.ready_and_healthy().is_some())
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
            // A model that failed as a whole, or is loading for the first time, has one entry.
            let whole = match &entry.state {
                ModelState::Failed(error) => Some(("UNAVAILABLE", error.message.clone())),
                ModelState::Loading => Some(("LOADING", String::new())),
                ModelState::Loaded | ModelState::Unloaded => None,
            };
            if let Some((state, reason)) = whole {
                if !ready_only {
                    out.push(IndexEntry { name: name.clone(), version: None, state: Some(state), reason });
                }
                continue;
            }
            for (version, state) in &entry.versions {
                if ready_only && state.ready_and_healthy().is_none() {
                    continue;
                }
                let (state, reason) = state.reported();
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
