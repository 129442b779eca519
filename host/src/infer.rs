//! The one request/response type every door (HTTP, later gRPC and in-process BLS) translates to.

use std::collections::BTreeMap;

use crate::tensor::Tensor;

/// Request/response parameter values, as in the KServe v2 `parameters` object.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Double(f64),
    String(String),
}

pub type Parameters = BTreeMap<String, ParamValue>;

/// An output the caller asked for, with the classification extension's `class_count` (0 = raw tensor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestedOutput {
    pub name: String,
    pub class_count: u32,
}

#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    pub model_name: String,
    /// `None` asks for the newest ready version, as Triton does.
    pub model_version: Option<i64>,
    pub id: Option<String>,
    pub inputs: Vec<Tensor>,
    /// Empty means "every output of the model".
    pub outputs: Vec<RequestedOutput>,
    pub parameters: Parameters,
}

#[derive(Debug, Clone, Default)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: i64,
    pub id: Option<String>,
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
}
