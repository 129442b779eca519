//! Requests handed to `execute`, and the response senders of decoupled models.

use crate::bindings::tessera::model::types::{
    Request as RawRequest, ResponseSender as RawResponseSender,
};
use crate::{Error, ParamValue, Parameter, Tensor};

/// One inference request.
#[derive(Debug)]
pub struct Request(RawRequest);

impl Request {
    #[doc(hidden)]
    pub fn from_raw(raw: RawRequest) -> Request {
        Request(raw)
    }

    /// The request's id (empty when the client gave none).
    pub fn id(&self) -> String {
        self.0.id()
    }

    /// Whether the caller has gone (a cancelled stream): seen for a decoupled model's requests,
    /// false for the others.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// The named input, or an `invalid-arg` error naming it when the request lacks it.
    pub fn input(&self, name: &str) -> Result<Tensor, Error> {
        self.0.input(name).map(Tensor::from_raw).ok_or_else(|| {
            let id = self.id();
            let of = if id.is_empty() {
                String::new()
            } else {
                format!(" of request '{id}'")
            };
            Error::invalid_arg(format!("missing input '{name}'{of}"))
        })
    }

    /// The named input if present.
    pub fn optional_input(&self, name: &str) -> Option<Tensor> {
        self.0.input(name).map(Tensor::from_raw)
    }

    /// Every input, in request order.
    pub fn inputs(&self) -> Vec<Tensor> {
        self.0.inputs().into_iter().map(Tensor::from_raw).collect()
    }

    /// The output names the caller asked for (every output of the model if it named none).
    pub fn requested_outputs(&self) -> Vec<String> {
        self.0.requested_outputs()
    }

    /// Whether the caller wants this output (each call asks the host; call
    /// [`Request::requested_outputs`] once when checking many).
    pub fn is_requested(&self, output: &str) -> bool {
        self.0.requested_outputs().iter().any(|o| o == output)
    }

    /// The request's parameters.
    pub fn parameters(&self) -> Vec<Parameter> {
        self.0.parameters()
    }

    /// The value of one parameter, if the request has it.
    pub fn parameter(&self, key: &str) -> Option<ParamValue> {
        self.0
            .parameters()
            .into_iter()
            .find(|p| p.key == key)
            .map(|p| p.value)
    }

    /// For decoupled models: the sender for this request's responses (0..n responses, then a
    /// final flag). Take it once per request.
    pub fn sender(&self) -> ResponseSender {
        ResponseSender(self.0.sender())
    }
}

/// Sends the responses of one request of a decoupled model.
#[derive(Debug)]
pub struct ResponseSender(RawResponseSender);

impl ResponseSender {
    /// Whether the caller has gone: sends then fail with `cancelled`, so stop producing.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Sends one response; `final_` marks it as the request's last one.
    pub fn send(&self, outputs: Vec<Tensor>, final_: bool) -> Result<(), Error> {
        self.0
            .send(outputs.into_iter().map(Tensor::into_raw).collect(), final_)
    }

    /// Sends an error response; `final_` marks it as the request's last one.
    pub fn send_error(&self, error: Error, final_: bool) -> Result<(), Error> {
        self.0.send_error(&error, final_)
    }

    /// Sends the final flag without a response (Triton's `TRITONSERVER_RESPONSE_COMPLETE_FINAL`
    /// with no response): an empty output list marked final.
    pub fn finish(&self) -> Result<(), Error> {
        self.0.send(Vec::new(), true)
    }
}
