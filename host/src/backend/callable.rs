//! A backend whose instances run a function: how code that embeds the server (through the library
//! API, e.g. the Python package binding Python callables) serves models that are not files. Every instance
//! shares the function; the scheduler still gives each instance one batch at a time.

use std::path::Path;
use std::sync::Arc;

use super::{Backend, BackendKind, ExecRequest, InstanceContext, ModelInstance};
use crate::config::ModelConfig;
use crate::error::CoreResult;
use crate::tensor::Tensor;

/// Runs a batch: one result per request, in order.
pub type ExecuteFn = dyn Fn(Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> + Send + Sync;

pub struct CallableBackend {
    execute: Arc<ExecuteFn>,
    inline: bool,
}

impl CallableBackend {
    pub fn new(execute: impl Fn(Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> + Send + Sync + 'static) -> Self {
        Self { execute: Arc::new(execute), inline: false }
    }

    /// Runs batches on the dispatching task's thread instead of a blocking thread: see
    /// [`ModelInstance::runs_inline`] for the trade.
    pub fn inline(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }
}

impl Backend for CallableBackend {
    fn kind(&self) -> BackendKind {
        BackendKind { name: "callable", platforms: &["callable"], default_model_filename: "" }
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_path: &Path) -> CoreResult<()> {
        // A function does not describe its tensors: the config must list them.
        Ok(())
    }

    fn create_instance(&self, _ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        Ok(Box::new(CallableInstance { execute: Arc::clone(&self.execute), inline: self.inline }))
    }
}

struct CallableInstance {
    execute: Arc<ExecuteFn>,
    inline: bool,
}

impl ModelInstance for CallableInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        (self.execute)(batch)
    }

    fn runs_inline(&self) -> bool {
        self.inline
    }
}
