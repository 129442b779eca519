//! Where each model and version stands in Triton's model lifecycle, as explicit states: what the
//! repository index reports, what a request may run on, and what a load's outcome says.

use std::sync::{Arc, Weak};

use crate::error::{CoreError, ErrorKind};
use crate::model::LoadedModel;

/// One version's state.
#[derive(Clone)]
pub enum VersionState {
    /// Serving requests.
    Ready(Arc<LoadedModel>),
    /// Unloaded while requests were still running on it: they finish on the version they started
    /// on, and it is gone when the last one ends (UNAVAILABLE "unloaded" from then on).
    Unloading(Weak<LoadedModel>),
    /// Failed to load, or unloaded: why.
    Unavailable(String),
}

impl VersionState {
    pub fn ready(&self) -> Option<&Arc<LoadedModel>> {
        match self {
            Self::Ready(model) => Some(model),
            Self::Unloading(_) | Self::Unavailable(_) => None,
        }
    }

    /// Unloads the version: one still running requests is unloading until they end.
    pub fn unload(&mut self) {
        *self = self.unloaded();
    }

    /// The state after an unload: a version still running requests is unloading until they end.
    pub fn unloaded(&self) -> Self {
        match self {
            Self::Ready(model) => Self::Unloading(Arc::downgrade(model)),
            Self::Unloading(model) => Self::Unloading(model.clone()),
            Self::Unavailable(_) => Self::Unavailable(UNLOADED.into()),
        }
    }

    /// The version, when it is ready and its instances are not failing ([`crate::stats::Health`]):
    /// what readiness reports. (An unhealthy version still serves requests.)
    pub fn ready_and_healthy(&self) -> Option<&Arc<LoadedModel>> {
        self.ready().filter(|model| model.stats.health.healthy())
    }

    /// Triton's state name and reason, as the repository index reports them.
    pub fn reported(&self) -> (&'static str, String) {
        match self {
            Self::Ready(model) => match model.stats.health.reason() {
                None => ("READY", String::new()),
                Some(unhealthy) => ("UNAVAILABLE", unhealthy),
            },
            Self::Unloading(model) if model.strong_count() > 0 => ("UNLOADING", String::new()),
            Self::Unloading(_) => ("UNAVAILABLE", UNLOADED.into()),
            Self::Unavailable(reason) => ("UNAVAILABLE", reason.clone()),
        }
    }
}

/// The reason an unloaded version reports.
const UNLOADED: &str = "unloaded";

/// The state of a model as a whole; its versions have their own.
#[derive(Clone, Default)]
pub enum ModelState {
    /// Its first load is running. (A reload keeps the versions it replaces serving, in state
    /// `Loaded`, until the new ones swap in.)
    Loading,
    /// Loaded: each version says whether it is ready.
    #[default]
    Loaded,
    /// The model as a whole failed to load (a bad config, an ensemble cycle, no backend): it has
    /// no versions.
    Failed(CoreError),
    /// Unloaded by request: kept in the index as UNAVAILABLE "unloaded".
    Unloaded,
}

impl ModelState {
    /// A first load starts: LOADING until its versions swap in.
    pub fn begin_load(&mut self) {
        *self = Self::Loading;
    }

    /// The model as a whole failed to load, with `error`.
    pub fn fail(&mut self, error: CoreError) {
        *self = Self::Failed(error);
    }

    /// Unloaded by request.
    pub fn unload(&mut self) {
        *self = Self::Unloaded;
    }

    pub fn is_loaded(&self) -> bool {
        matches!(self, Self::Loaded)
    }

    pub fn is_unloaded(&self) -> bool {
        matches!(self, Self::Unloaded)
    }

    /// The load's error, in Triton's words, when the whole model failed.
    pub fn load_error(&self, name: &str) -> Option<CoreError> {
        let Self::Failed(error) = self else { return None };
        Some(if error.kind == ErrorKind::Internal {
            CoreError::internal(format!(
                "failed to load '{name}', failed to poll from model repository: {}",
                error.message
            ))
        } else {
            CoreError::invalid_arg(format!("load failed for model '{name}': {}", error.message))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::{ControlMode, ModelManager, RepositoryOptions};

    fn manager() -> ModelManager {
        ModelManager::new(RepositoryOptions::empty(ControlMode::Explicit), crate::backend::BackendRegistry::new())
    }

    #[test]
    fn a_first_load_reports_loading_and_serves_nothing_until_it_swaps_in() {
        let manager = manager();
        assert!(manager.all_ready());
        manager.mark_loading("m");
        let index = manager.index(false);
        assert_eq!(index.len(), 1);
        assert_eq!((index[0].name.as_str(), index[0].state), ("m", Some("LOADING")));
        assert!(manager.index(true).is_empty(), "a loading model counted as ready");
        assert!(!manager.all_ready(), "strict readiness ignored a loading model");
        let refused = manager.get("m", None).err().map(|e| e.message);
        assert_eq!(refused.as_deref(), Some("Request for unknown model: 'm' is not found"));
    }

    #[test]
    fn an_unloaded_version_is_unloading_while_requests_hold_it_then_unavailable() {
        let gone = VersionState::Unloading(Weak::new());
        assert_eq!(gone.reported(), ("UNAVAILABLE", "unloaded".to_string()));
        assert!(gone.ready().is_none());
        let failed = VersionState::Unavailable("bad file".into());
        assert_eq!(failed.reported(), ("UNAVAILABLE", "bad file".to_string()));
        assert_eq!(failed.unloaded().reported(), ("UNAVAILABLE", "unloaded".to_string()));
    }
}
