//! Triton's utility backends, built in so that repositories using them load unchanged:
//! `identity` (outputs are the inputs, `INPUT<k>` -> `OUTPUT<k>`), `repeat` (decoupled: one
//! response per element of IN, paced by DELAY, then WAIT) and `square` (decoupled: IN = n gives
//! n responses of OUT = n). Config checks and their messages follow Triton's identity, repeat
//! and square backends.
//!
//! Decision: native Rust rather than bundled Wasm guests. repeat and square pace their
//! responses with clocks and threads that a guest does not have, and these backends are
//! trusted, tiny and part of the server. Unlike Triton's repeat, both decoupled backends stop
//! producing as soon as the caller has gone (a cancelled stream costs no further work).

mod identity;
mod repeat;
mod square;

use std::time::Duration;

use std::path::Path;

use super::{Backend, BackendKind, InstanceContext, ModelInstance, RawResponse, Responder};
use crate::config::{ModelConfig, TensorConfig, pb};
use crate::error::{CoreError, CoreResult};
use crate::tensor::Tensor;

/// One utility backend: its `backend:` name and how it makes an instance (checking the config
/// first). They need no model file and fill in nothing from one.
pub struct UtilityBackend {
    name: &'static str,
    create: fn(&InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>>,
}

impl UtilityBackend {
    pub fn identity() -> Self {
        Self { name: "identity", create: identity::create }
    }

    pub fn repeat() -> Self {
        Self { name: "repeat", create: repeat::create }
    }

    pub fn square() -> Self {
        Self { name: "square", create: square::create }
    }
}

impl Backend for UtilityBackend {
    fn kind(&self) -> BackendKind {
        BackendKind { name: self.name, platforms: &[], default_model_filename: "" }
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_path: &Path) -> CoreResult<()> {
        Ok(())
    }

    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        (self.create)(ctx)
    }
}

/// Triton's `ShapeToString`: `[a,b]`, no spaces.
fn shape_text(dims: &[i64]) -> String {
    format!("[{}]", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
}

/// The config's enum name for a datatype (`TYPE_INT32`).
fn type_name(data_type: i32) -> &'static str {
    pb::DataType::try_from(data_type).map_or("TYPE_INVALID", |d| d.as_str_name())
}

/// The shape a backend sees for a config tensor: `reshape` when given, else `dims`.
fn model_shape(tensor: &impl TensorConfig) -> Vec<i64> {
    tensor.reshape().map_or_else(|| tensor.dims().to_vec(), |r| r.shape.clone())
}

fn invalid(message: impl Into<String>) -> CoreError {
    CoreError::invalid_arg(message)
}

/// A config `parameters` entry as a number, if present and all digits (as Triton's backends read
/// them; anything else is ignored with a warning).
fn numeric_parameter(config: &ModelConfig, key: &str) -> Option<u64> {
    let value = config.parameters.get(key)?.string_value.trim().to_string();
    match value.parse::<u64>() {
        Ok(n) => Some(n),
        Err(_) => {
            tracing::warn!(model = config.name.as_str(), "parameter {key}: '{value}' is not a number; ignored");
            None
        }
    }
}

fn is_decoupled(config: &ModelConfig) -> bool {
    config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
}

fn input<'a>(inputs: &'a [Tensor], name: &str) -> CoreResult<&'a Tensor> {
    inputs
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| CoreError::unsupported(format!("failed to get input '{name}'")))
}

/// Little-endian 4-byte values of a tensor's data.
fn words(tensor: &Tensor) -> impl Iterator<Item = [u8; 4]> + '_ {
    tensor.data.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]])
}

/// Where a decoupled utility model's responses go: the caller's responder for a decoupled
/// config, or a list that becomes the one allowed response otherwise (Triton's backends do not
/// require decoupled; a regular endpoint accepts exactly one response).
enum Sink {
    Stream(Responder),
    Collect(Vec<CoreResult<Vec<Tensor>>>),
}

impl Sink {
    /// Sends one response; false when the caller has gone (stop producing).
    fn send(&mut self, outputs: CoreResult<Vec<Tensor>>) -> bool {
        match self {
            Self::Stream(responder) => super::send_blocking(responder, RawResponse::new(outputs, false)),
            Self::Collect(list) => {
                list.push(outputs);
                true
            }
        }
    }

    /// The caller went away (a decoupled stream cancelled or disconnected).
    fn closed(&self) -> bool {
        matches!(self, Self::Stream(responder) if responder.is_closed())
    }

    /// What a non-decoupled request returns: its single response.
    fn into_single(self) -> CoreResult<Vec<Tensor>> {
        match self {
            // The final flag is the responder dropping.
            Self::Stream(_) => Ok(Vec::new()),
            Self::Collect(mut list) if list.len() == 1 => list.pop().unwrap_or_else(|| Ok(Vec::new())),
            Self::Collect(list) => Err(CoreError::internal(format!("expected a single response, got {}", list.len()))),
        }
    }
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}
