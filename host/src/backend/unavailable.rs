//! A backend this build or machine cannot provide, registered under its real names so that a
//! model asking for it fails to load with the reason (e.g. the TorchScript backend in a build
//! without the `torch` feature) instead of "backend not supported".

use std::path::Path;

use super::{Backend, BackendKind, InstanceContext, ModelInstance};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

/// Also public for embedders that register a backend of their own build's choosing.
pub struct UnavailableBackend {
    pub kind: BackendKind,
    pub reason: String,
}

impl UnavailableBackend {
    /// The TorchScript backend in a build without `--features torch`.
    pub fn pytorch() -> Self {
        Self {
            kind: super::PYTORCH,
            reason: "this tessera binary was built without the TorchScript backend (build with `--features torch`; \
                scripts/setup.sh does)"
                .into(),
        }
    }
}

impl Backend for UnavailableBackend {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn missing_from_build(&self) -> Option<&str> {
        Some(&self.reason)
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_path: &Path) -> CoreResult<()> {
        Err(CoreError::unsupported(self.reason.clone()))
    }

    fn create_instance(&self, _ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        Err(CoreError::unsupported(self.reason.clone()))
    }
}
