//! wasi:nn as guests written for it use it: bindings of the standard `wasi:nn/ml` world
//! (`wit/deps/wasi-nn`, the WIT wasmtime 48 ships) and a classifier helper in the style of
//! wasmtime's wasi-nn test programs (`nn_wit_image_classification_*_named`): load a graph by
//! name, one FP32 `[1, 3, 224, 224]` input called "input", the first output read as
//! probabilities. Nothing here knows about Tessera: this module runs unchanged under any
//! wasi:nn host that serves a graph of that name.

use std::time::Instant;

wit_bindgen::generate!({
    path: "../../wit/deps/wasi-nn",
    world: "ml",
});

use self::wasi::nn::errors;
use self::wasi::nn::graph::{self, Graph};
use self::wasi::nn::tensor::{Tensor, TensorType};

/// A wasi:nn error as text: its code and the host's message.
pub fn describe(e: &errors::Error) -> String {
    format!("{:?}: {}", e.code(), e.data())
}

/// Loads a graph by name.
pub fn load_by_name(name: &str) -> Result<Graph, String> {
    graph::load_by_name(name).map_err(|e| describe(&e))
}

/// Runs a single-input classifier on `input` (name, FP32 bytes of `[1, 3, 224, 224]`) and
/// returns its first output as f32s.
pub fn classify(graph: Graph, input: (&str, Vec<u8>)) -> Result<Vec<f32>, String> {
    let context = graph.init_execution_context().map_err(|e| describe(&e))?;
    println!("[nn] created wasi-nn execution context with ID: {context:?}");
    let tensor = Tensor::new(&vec![1, 3, 224, 224], TensorType::Fp32, &input.1);
    println!("[nn] input tensor: {} bytes", input.1.len());
    let before = Instant::now();
    let outputs = context.compute(vec![(input.0.to_string(), tensor)]).map_err(|e| describe(&e))?;
    println!("[nn] executed graph inference in {} ms", before.elapsed().as_millis());
    let (_, output) = outputs.first().ok_or("the graph returned no output")?;
    let data = output.data();
    println!("[nn] retrieved output tensor: {} bytes", data.len());
    Ok(data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// Class ids sorted by probability, highest first.
pub fn sort_results(probabilities: &[f32]) -> Vec<InferenceResult> {
    let mut results: Vec<InferenceResult> =
        probabilities.iter().enumerate().map(|(c, p)| InferenceResult(c, *p)).collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    results
}

/// A class id and its probability.
#[derive(Debug, PartialEq)]
pub struct InferenceResult(pub usize, pub f32);
