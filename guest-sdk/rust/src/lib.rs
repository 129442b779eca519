//! Write Tessera models in Rust.
//!
//! A Tessera guest is a WebAssembly component that implements the `tessera:model@0.1.0` world
//! (`wit/model.wit`): `initialize`, `execute` and `finalize`, like Triton's Python backend
//! (`TritonPythonModel`). This crate hides the generated bindings behind a small API:
//!
//! * the [`Model`] trait and the [`export_model!`] macro;
//! * [`Tensor`]: a handle to bytes that live in the host, with typed constructors
//!   ([`Tensor::from_f32`], [`Tensor::from_strings`], ...) and readers ([`Tensor::as_f32`], ...);
//! * [`Request`]: inputs ([`Request::input`] fails with an `invalid-arg` error naming the missing
//!   input), requested outputs, parameters and, for decoupled models, the [`ResponseSender`];
//! * BLS: [`infer`], [`infer_stream`] and the [`InferRequest`] builder; parallel BLS (fan-out):
//!   [`infer_async`] / [`InferRequest::start`] return a [`PendingInfer`], collected with
//!   [`PendingInfer::get`], [`wait_all`] or [`wait_any`];
//! * [`ModelConfig`]: the config `initialize` receives, parsed (config parameters, max batch size);
//! * logging to the host log: [`log`] and the [`info!`], [`warn!`], [`error!`], [`verbose!`] macros;
//! * [`telemetry`]: the model's own metrics on `/metrics` (Triton's `pb_utils.MetricFamily` API)
//!   and spans of its own code in request traces;
//! * [`wasi_config`]: configuration values and the operator's secrets granted to the model;
//!   [`keyvalue`]: its key-value store (both standard WASI interfaces, granted per model);
//! * a panic hook that writes the panic message to the host log before the guest aborts, so a trap
//!   in the server log comes with its reason.
//!
//! ```ignore
//! use tessera_guest::{export_model, Error, InitializeArgs, Model, Request, Tensor};
//!
//! struct AddOne;
//!
//! impl Model for AddOne {
//!     fn initialize(_args: InitializeArgs) -> Result<Self, Error> {
//!         Ok(AddOne)
//!     }
//!     fn execute_request(&mut self, request: &Request) -> Result<Vec<Tensor>, Error> {
//!         let input = request.input("INPUT0")?;
//!         let out: Vec<f32> = input.as_f32()?.iter().map(|x| x + 1.0).collect();
//!         Ok(vec![Tensor::from_f32("OUTPUT0", &input.shape(), &out)?])
//!     }
//! }
//!
//! export_model!(AddOne);
//! ```
//!
//! `AddOne` keeps no state: it could be the function alone, exported with
//! `export_model!(fn add_one)` (see [`export_model!`]).
//!
//! Build with `tessera guest build` (see README.md): it compiles the crate to a core wasm module
//! and encodes that as the component a model repository serves.

extern crate self as tessera_guest;

mod bls;
mod config;
mod error;
pub mod keyvalue;
pub mod log;
mod panic;
mod request;
mod runtime;
pub mod telemetry;
mod tensor;
pub mod wasi_config;

pub use bls::{InferRequest, PendingInfer, ResponseStream, infer, infer_async, infer_stream, wait_all, wait_any};
pub use config::ModelConfig;
pub use request::{Request, ResponseSender};
pub use tensor::{Element, Tensor, TensorsExt, decode_bytes_elements, encode_bytes_elements};

/// KServe v2 datatypes (`BOOL`, `UINT8`, ..., `FP32`, `BYTES`).
pub use bindings::tessera::model::types::DataType;
/// An error: a Triton error code and a message. Constructors: [`Error::invalid_arg`], ...
pub use bindings::tessera::model::types::Error;
/// Triton's error codes; the front doors map them to HTTP and gRPC statuses.
pub use bindings::tessera::model::types::ErrorCode;
/// What Triton passes to `TritonPythonModel.initialize(args)`: the model config as JSON, names,
/// version, repository path, instance kind/name/device.
pub use bindings::tessera::model::types::InitializeArgs;
/// A request (or BLS) parameter value.
pub use bindings::tessera::model::types::ParamValue;
/// A request (or BLS) parameter: key and value.
pub use bindings::tessera::model::types::Parameter;
pub use log::LogLevel;
pub use panic::install_panic_hook;

/// The generated bindings (wit-bindgen 0.60.0, `wit/model.wit`). Not part of the API: use the
/// wrappers at the crate root.
#[doc(hidden)]
#[allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "model",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_bindings",
        // The standard WASI interfaces the world imports (wasi:config, wasi:keyvalue).
        generate_all,
    });
}

/// A model: one instance of it lives in each component instance the host creates.
///
/// Implement [`Model::execute_request`] (one request in, its outputs out) or, to see the whole
/// batch (or to answer through response senders, for decoupled models), [`Model::execute`].
/// Then export the type with [`export_model!`].
pub trait Model: Sized + 'static {
    /// Called once per instance before any request. An error fails the model's load.
    fn initialize(args: InitializeArgs) -> Result<Self, Error>;

    /// A batch of requests in; exactly one result per request, in order.
    ///
    /// Decoupled models return an empty `Vec` and answer through each request's
    /// [`Request::sender`]; when `execute` returns, the host closes every request that has not
    /// sent its final response with an empty final one.
    ///
    /// The default calls [`Model::execute_request`] for each request.
    fn execute(&mut self, requests: Vec<Request>) -> Vec<Result<Vec<Tensor>, Error>> {
        requests.iter().map(|r| self.execute_request(r)).collect()
    }

    /// One request in, its output tensors (or an error for that request alone) out. Used by the
    /// default [`Model::execute`]; implement one of the two.
    fn execute_request(&mut self, request: &Request) -> Result<Vec<Tensor>, Error> {
        let _ = request;
        Err(Error::unsupported(
            "this model implements neither Model::execute nor Model::execute_request",
        ))
    }

    /// Called once when the instance is unloaded; the model is dropped afterwards.
    fn finalize(&mut self) {}
}

/// Exports a [`Model`] type as the component's `initialize`/`execute`/`finalize`.
///
/// Use it once, at the root of the guest crate (a `cdylib`): `export_model!(MyModel);`. A model
/// that keeps no state can be a function of one request instead, exported as
/// `export_model!(fn add_one);` with `fn add_one(request: &Request) -> Result<Vec<Tensor>, Error>`:
/// the model [`Model::initialize`] makes has nothing to set up, and its
/// [`Model::execute_request`] calls the function.
#[macro_export]
macro_rules! export_model {
    (fn $execute_request:path) => {
        const _: () = {
            struct __TesseraFunction;

            impl $crate::Model for __TesseraFunction {
                fn initialize(
                    _args: $crate::InitializeArgs,
                ) -> ::core::result::Result<Self, $crate::Error> {
                    ::core::result::Result::Ok(__TesseraFunction)
                }

                fn execute_request(
                    &mut self,
                    request: &$crate::Request,
                ) -> ::core::result::Result<::std::vec::Vec<$crate::Tensor>, $crate::Error> {
                    $execute_request(request)
                }
            }

            $crate::export_model!(__TesseraFunction);
        };
    };
    ($model:ty) => {
        const _: () = {
            struct __TesseraGuest;

            impl $crate::bindings::Guest for __TesseraGuest {
                fn initialize(
                    args: $crate::InitializeArgs,
                ) -> ::core::result::Result<(), $crate::Error> {
                    $crate::__private::initialize::<$model>(args)
                }

                fn execute(
                    requests: ::std::vec::Vec<$crate::__private::RawRequest>,
                ) -> ::std::vec::Vec<
                    ::core::result::Result<
                        ::std::vec::Vec<$crate::__private::RawTensor>,
                        $crate::Error,
                    >,
                > {
                    $crate::__private::execute::<$model>(requests)
                }

                fn finalize() {
                    $crate::__private::finalize::<$model>()
                }
            }

            $crate::bindings::__tessera_export_bindings!(__TesseraGuest with_types_in $crate::bindings);
        };
    };
}

/// Support for [`export_model!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::tessera::model::types::Request as RawRequest;
    pub use crate::bindings::tessera::model::types::Tensor as RawTensor;
    pub use crate::runtime::{execute, finalize, initialize};
}
