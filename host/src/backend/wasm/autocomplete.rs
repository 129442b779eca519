//! Triton's auto-complete for guests that take part in it: a component exporting
//! `auto-complete-config` (world `model-by-value`; the Python SDK exports it, calling the
//! model's `TritonPythonModel.auto_complete_config`) completes its own config at load.
//!
//! The call runs in a store of its own, never initialized, within the model's sandbox: its
//! memory cap and time limit, no BLS, no grants beyond what its config's parameters give.

use std::path::Path;
use std::sync::Arc;

use super::bindings::wit;
use super::cache::Prepared;
use super::convert::kind_from_wit;
use super::instance::{instantiation_failed, sandboxed_store, trap_error};
use super::sandbox::{AllowList, Sandbox};
use super::state::GuestShared;
use super::timing::ExecutionClock;
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

/// The config the component completes `config` to, or `None` when it exports no
/// `auto-complete-config` (a guest of world `model`, or one built before it existed).
pub(super) fn complete(pre: &Prepared, config: &ModelConfig, version_dir: &Path) -> CoreResult<Option<ModelConfig>> {
    let sandbox = Sandbox::from_config(config, version_dir)?;
    let shared = Arc::new(GuestShared {
        model_name: config.name.clone(),
        allowed_models: AllowList::Nothing,
        bls_timeout: sandbox.max_execute,
        infer: None,
        runtime: None,
        clock: ExecutionClock::Wall,
        telemetry: Default::default(),
        // Completing a config reads no secret and keeps nothing.
        capabilities: Default::default(),
    });
    let mut store = sandboxed_store(pre.engine(), &sandbox, shared)?;
    store.epoch_deadline_trap();
    let model = config.name.as_str();
    let instance = pre.instance_pre().instantiate(&mut store).map_err(|e| instantiation_failed(model, e))?;
    // `auto-complete-config: func(config: string) -> result<string, error>`
    let Ok(func) =
        instance.get_typed_func::<(String,), (Result<String, wit::Error>,)>(&mut store, "auto-complete-config")
    else {
        return Ok(None);
    };
    let json = crate::config::to_json(config).to_string();
    let completed = match func.call(&mut store, (json,)) {
        Ok((Ok(completed),)) => completed,
        Ok((Err(e),)) => {
            return Err(CoreError::new(
                kind_from_wit(e.code),
                format!("model '{model}' auto_complete_config failed: {}", e.message),
            ));
        }
        Err(trap) => {
            return Err(trap_error(model, "auto_complete_config", &trap, &sandbox, &store.data().last_log));
        }
    };
    let mut completed = crate::config::parse_json(&completed).map_err(|e| {
        CoreError::invalid_arg(format!(
            "model '{model}' auto_complete_config returned a config that does not parse: {e}"
        ))
    })?;
    if completed.name.is_empty() {
        completed.name = config.name.clone();
    } else if completed.name != config.name {
        return Err(CoreError::invalid_arg(format!(
            "model '{model}' auto_complete_config renamed the model to '{}'",
            completed.name
        )));
    }
    Ok(Some(completed))
}
