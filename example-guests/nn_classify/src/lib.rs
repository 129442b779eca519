//! nn_classify: an image classifier whose inference goes through the standard wasi:nn interface
//! (`nn.rs`, a port of wasmtime's `nn_wit_image_classification_*_named` test programs), served as
//! a Tessera model. The graph is a model this server serves, loaded by name
//! (`graph::load_by_name`), so batching, statistics and metrics apply to it; the config's
//! `allowed_models` must list it.
//!
//! - With input `IMAGE` (FP32 `[1, 3, 224, 224]`): classifies it with the graph named by the
//!   config parameter `graph` (default `image_classifier`) and returns the top five:
//!   `CLASS_IDS` INT64 `[5]` and `PROBABILITIES` FP32 `[5]`.
//! - Otherwise (a config declaring other inputs): every input goes to the graph as it is, through
//!   wasi:nn tensors, and its outputs come back under their own names. The request parameter
//!   `graph` overrides the config's (e.g. `add_sub:1`).
//!
//! Built for `wasm32-wasip1`: `println!` and `Instant` in `nn.rs` work as written (the host
//! discards stdout; clocks read zero unless the model has the `clocks` grant).

mod nn;

use nn::wasi::nn::tensor::{Tensor as NnTensor, TensorType};
use tessera_guest::{DataType, Error, InitializeArgs, Model, ModelConfig, ParamValue, Request, Tensor, export_model};

struct NnClassify {
    graph: String,
}

fn nn_type(datatype: DataType) -> Result<TensorType, Error> {
    Ok(match datatype {
        DataType::Fp16 => TensorType::Fp16,
        DataType::Fp32 => TensorType::Fp32,
        DataType::Fp64 => TensorType::Fp64,
        DataType::Bf16 => TensorType::Bf16,
        DataType::Uint8 => TensorType::U8,
        DataType::Int32 => TensorType::I32,
        DataType::Int64 => TensorType::I64,
        other => return Err(Error::invalid_arg(format!("wasi:nn has no tensor type for {other:?}"))),
    })
}

fn tessera_type(ty: TensorType) -> DataType {
    match ty {
        TensorType::Fp16 => DataType::Fp16,
        TensorType::Fp32 => DataType::Fp32,
        TensorType::Fp64 => DataType::Fp64,
        TensorType::Bf16 => DataType::Bf16,
        TensorType::U8 => DataType::Uint8,
        TensorType::I32 => DataType::Int32,
        TensorType::I64 => DataType::Int64,
    }
}

impl NnClassify {
    fn graph_for(&self, request: &Request) -> String {
        match request.parameter("graph") {
            Some(ParamValue::String(name)) => name,
            _ => self.graph.clone(),
        }
    }

    fn classify(&self, graph_name: &str, image: &Tensor) -> Result<Vec<Tensor>, Error> {
        let graph = nn::load_by_name(graph_name).map_err(|e| Error::unavailable(format!("load '{graph_name}': {e}")))?;
        let probabilities =
            nn::classify(graph, ("input", image.data())).map_err(|e| Error::internal(format!("classify: {e}")))?;
        let top: Vec<_> = nn::sort_results(&probabilities).into_iter().take(5).collect();
        let ids: Vec<i64> = top.iter().map(|r| r.0 as i64).collect();
        let probabilities: Vec<f32> = top.iter().map(|r| r.1).collect();
        Ok(vec![
            Tensor::from_i64("CLASS_IDS", &[ids.len() as i64], &ids)?,
            Tensor::from_f32("PROBABILITIES", &[probabilities.len() as i64], &probabilities)?,
        ])
    }

    fn forward(&self, graph_name: &str, request: &Request) -> Result<Vec<Tensor>, Error> {
        let graph = nn::load_by_name(graph_name).map_err(|e| Error::unavailable(format!("load '{graph_name}': {e}")))?;
        let context = graph.init_execution_context().map_err(|e| Error::internal(nn::describe(&e)))?;
        let mut inputs = Vec::new();
        for input in request.inputs() {
            let dims = input.shape().iter().map(|&d| d as u32).collect::<Vec<_>>();
            inputs.push((input.name(), NnTensor::new(&dims, nn_type(input.datatype())?, &input.data())));
        }
        let outputs = context.compute(inputs).map_err(|e| Error::internal(format!("compute: {}", nn::describe(&e))))?;
        outputs
            .into_iter()
            .map(|(name, t)| {
                let shape: Vec<i64> = t.dimensions().iter().map(|&d| i64::from(d)).collect();
                Tensor::new(&name, tessera_type(t.ty()), &shape, &t.data())
            })
            .collect()
    }
}

impl Model for NnClassify {
    fn initialize(args: InitializeArgs) -> Result<Self, Error> {
        let config = ModelConfig::parse(&args.model_config)?;
        let graph = config.parameter("graph").unwrap_or("image_classifier").to_string();
        Ok(NnClassify { graph })
    }

    fn execute_request(&mut self, request: &Request) -> Result<Vec<Tensor>, Error> {
        let graph = self.graph_for(request);
        match request.inputs().into_iter().find(|t| t.name() == "IMAGE") {
            Some(image) => self.classify(&graph, &image),
            None => self.forward(&graph, request),
        }
    }
}

export_model!(NnClassify);
