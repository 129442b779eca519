//! The part of a load that runs before the repository's control lock: the backends' slow
//! preparation of the model's files (a `model.py` build, which runs the uploader's module code
//! and may take up to its time limit). Holding the lock for it would let one upload stall
//! every other load and unload; instead the load under the lock finds the work done, or its
//! failure remembered, and an unload or the server's stop cancels it.

use std::sync::Arc;

use super::overrides::OverrideDir;
use super::{ModelManager, model_filename};
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::scheduler::ensemble::is_ensemble;

impl ModelManager {
    /// Prepares the versions of `name` that a load would serve. `Err` only when the
    /// preparation was cancelled (an unload of the model, the server stopping): the load ends
    /// there. Every other failure is left for the load under the lock to report.
    pub(super) async fn prepare_outside_lock(
        self: &Arc<Self>,
        name: &str,
        config_override: Option<String>,
        override_dir: Option<Arc<OverrideDir>>,
    ) -> CoreResult<()> {
        let this = Arc::clone(self);
        let name = name.to_string();
        tokio::task::spawn_blocking(move || this.prepare_files(&name, config_override.as_deref(), override_dir))
            .await
            .map_err(|e| CoreError::internal(format!("model preparation task failed: {e}")))?
    }

    fn prepare_files(
        &self,
        name: &str,
        config_override: Option<&str>,
        override_dir: Option<Arc<OverrideDir>>,
    ) -> CoreResult<()> {
        let Ok(dir) = self.source_dir(name, override_dir.as_deref()) else { return Ok(()) };
        self.backends.begin_preparation(&dir);
        let (config, versions) = match self.prepare_config(name, &dir, config_override) {
            Ok(prepared) => prepared,
            Err(e) if e.kind == ErrorKind::Cancelled => return Err(e),
            Err(_) => return Ok(()),
        };
        if is_ensemble(&config) {
            return Ok(());
        }
        let Ok(backend) = self.backends.resolve(&config, None) else { return Ok(()) };
        for version in versions {
            let path = dir.join(version.to_string()).join(model_filename(&config, backend.default_model_filename()));
            backend.prepare_outside_lock(name, &path)?;
        }
        Ok(())
    }

    /// The startup's preparation of `name` (see `startup`): only the backends' own slow work
    /// (builds), from the config as written; its auto-complete (which compiles and runs the
    /// guest, or opens an ONNX file) is left to the load, which would do it again. `Err` only
    /// when cancelled.
    pub(super) async fn prepare_builds(self: &Arc<Self>, name: &str) -> CoreResult<()> {
        let this = Arc::clone(self);
        let name = name.to_string();
        tokio::task::spawn_blocking(move || {
            let Ok(dir) = this.source_dir(&name, None) else { return Ok(()) };
            this.backends.begin_preparation(&dir);
            let Ok((config, versions)) = this.read_config(&name, &dir, None) else { return Ok(()) };
            if is_ensemble(&config) {
                return Ok(());
            }
            let latest = versions.last().map(|v| dir.join(v.to_string()));
            let Ok(backend) = this.backends.resolve(&config, latest.as_deref()) else { return Ok(()) };
            for version in versions {
                let file = model_filename(&config, backend.default_model_filename());
                backend.prepare_outside_lock(&name, &dir.join(version.to_string()).join(file))?;
            }
            Ok(())
        })
        .await
        .map_err(|e| CoreError::internal(format!("model preparation task failed: {e}")))?
    }

    /// The server stops: preparations running now end, and none starts after.
    pub fn cancel_preparations(&self) {
        self.backends.cancel_preparation(None);
    }
}
