//! BLS fan-out: one request calls a model several times, at the same time or one after another.
//!
//! Input `INPUT0`: FP32 `[16]`. Output `OUTPUT0`: FP32 `[16]`, the element-wise sum of the called
//! model's `OUTPUT0` over all calls. Each call sends `INPUT0` as a batch of one as both `INPUT0`
//! and `INPUT1` of the target (an add_sub-like model), so with the quickstart `fanout_target`
//! every call returns `2 * INPUT0` and four calls give `8 * INPUT0`.
//!
//! Config parameter `fanout_target`: the model to call (default `add_sub`); the config's
//! `allowed_models` must list it.
//!
//! Request parameters:
//! * `mode`: `"parallel"` (default) starts every call with `infer_async` and then waits for all
//!   of them, so they run concurrently on the host; `"sequential"` calls `infer` one at a time.
//! * `calls`: how many calls (default 4, 1..=16).
//! * `target`: call this model instead of the configured one (it must be allowed too).

use tessera_guest::{
    Error, InitializeArgs, Model, ModelConfig, ParamValue, Request, Tensor, TensorsExt, export_model,
    infer, infer_async, wait_all,
};

struct Fanout {
    /// The model called unless a request names another (config parameter `fanout_target`).
    target: String,
}

fn string_parameter(request: &Request, key: &str, default: &str) -> Result<String, Error> {
    match request.parameter(key) {
        None => Ok(default.to_string()),
        Some(ParamValue::String(s)) => Ok(s),
        Some(_) => Err(Error::invalid_arg(format!("parameter '{key}' must be a string"))),
    }
}

impl Model for Fanout {
    fn initialize(args: InitializeArgs) -> Result<Self, Error> {
        let config = ModelConfig::of(&args)?;
        Ok(Fanout { target: config.parameter("fanout_target").unwrap_or("add_sub").to_string() })
    }

    fn execute_request(&mut self, request: &Request) -> Result<Vec<Tensor>, Error> {
        let input = request.input("INPUT0")?;
        let x = input.as_f32()?;
        let calls = match request.parameter("calls") {
            None => 4,
            Some(ParamValue::Int(n)) if (1..=16).contains(&n) => n as usize,
            Some(_) => return Err(Error::invalid_arg("parameter 'calls' must be an integer in 1..=16")),
        };
        let target = string_parameter(request, "target", &self.target)?;
        let mode = string_parameter(request, "mode", "parallel")?;
        // One batch-of-one tensor, handed to every call as both inputs (no copies).
        let row = Tensor::from_f32("INPUT0", &[1, x.len() as i64], &x)?;
        let row1 = row.with_name("INPUT1");
        let inputs = [&row, &row1];
        let results: Vec<Result<Vec<Tensor>, Error>> = match mode.as_str() {
            "parallel" => {
                let mut pending = Vec::with_capacity(calls);
                for _ in 0..calls {
                    pending.push(infer_async(&target, &inputs, &["OUTPUT0"])?);
                }
                wait_all(pending)
            }
            "sequential" => (0..calls).map(|_| infer(&target, &inputs, &["OUTPUT0"])).collect(),
            other => {
                return Err(Error::invalid_arg(format!(
                    "parameter 'mode' must be \"parallel\" or \"sequential\", got \"{other}\""
                )));
            }
        };
        let mut sum = vec![0f32; x.len()];
        for (i, result) in results.into_iter().enumerate() {
            let mut outputs = result.map_err(|e| e.context(format!("BLS call {i} to '{target}'")))?;
            let y = outputs.take_named("OUTPUT0")?.as_f32()?;
            if y.len() != sum.len() {
                return Err(Error::internal(format!("'{target}' returned {} values, expected {}", y.len(), sum.len())));
            }
            sum.iter_mut().zip(y).for_each(|(s, v)| *s += v);
        }
        Ok(vec![Tensor::from_f32("OUTPUT0", &[sum.len() as i64], &sum)?])
    }
}

export_model!(Fanout);
