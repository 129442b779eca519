//! Triton's ensemble scheduler: a model (`platform: "ensemble"`) that is a data-flow graph of
//! other models (`ensemble_scheduling { step [...] }`). It has no instances and no batcher of its
//! own; each step is an ordinary request to a composing model through [`Infer`], so the steps'
//! own schedulers (dynamic batching, sequence batching) and statistics apply to them.
//!
//! Files by job: [`plan`] checks the config against the composing models at load time and builds
//! the graph; [`run`] executes one request.

pub mod plan;
mod run;

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::backend::{ExecRequest, RawResponse, Responder};
use crate::error::{CoreError, CoreResult};
use crate::infer::Infer;
use crate::tensor::Tensor;
pub use plan::{EnsemblePlan, StepCatalog, composing_models, is_ensemble};
use run::{Outlet, Run};

pub struct EnsembleScheduler {
    plan: EnsemblePlan,
    /// The model manager, reached without owning it (it owns this ensemble).
    infer: Weak<dyn Infer>,
}

impl EnsembleScheduler {
    pub fn new(plan: EnsemblePlan, infer: Weak<dyn Infer>) -> Self {
        Self { plan, infer }
    }

    pub fn plan(&self) -> &EnsemblePlan {
        &self.plan
    }

    fn infer(&self) -> CoreResult<Arc<dyn Infer>> {
        self.infer.upgrade().ok_or_else(|| CoreError::unavailable("the server is shutting down"))
    }

    /// Runs a request of a regular ensemble: its outputs, and the steps' summed compute time.
    pub async fn execute(&self, exec: ExecRequest) -> CoreResult<(Vec<Tensor>, Duration)> {
        let mut collect = Collect(None);
        let compute = Run::new(&self.plan, self.infer()?, exec).run(&mut collect).await?;
        let outputs = collect.0.ok_or_else(|| {
            CoreError::internal(format!("in ensemble '{}', no outputs were produced", self.plan.name))
        })?;
        Ok((outputs, compute))
    }

    /// Runs a request of a decoupled ensemble: every complete set of outputs goes out through
    /// `exec.responder` as it is produced; the stream ends when every step is done.
    pub async fn execute_decoupled(&self, mut exec: ExecRequest) -> CoreResult<Duration> {
        let responder = exec
            .responder
            .take()
            .ok_or_else(|| CoreError::internal("a decoupled ensemble request has no responder"))?;
        Run::new(&self.plan, self.infer()?, exec).run(&mut Respond(responder)).await
    }
}

/// A regular ensemble's outlet: its one set of outputs, after which the run ends.
struct Collect(Option<Vec<Tensor>>);

impl Outlet for Collect {
    async fn emit(&mut self, outputs: Vec<Tensor>) -> bool {
        self.0 = Some(outputs);
        false
    }
}

/// A decoupled ensemble's outlet: each set is a response, sent when the caller has room for it.
struct Respond(Responder);

impl Outlet for Respond {
    async fn emit(&mut self, outputs: Vec<Tensor>) -> bool {
        self.0.send(RawResponse::new(Ok(outputs), false)).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use bytes::Bytes;

    use super::*;
    use crate::config::{ModelConfig, parse_pbtxt};
    use crate::error::ErrorKind;
    use crate::infer::{InferFuture, InferRequest, InferResponse, ResponseStream};
    use crate::tensor::DataType;

    fn config(text: &str) -> ModelConfig {
        let mut c = parse_pbtxt(text, std::path::Path::new("config.pbtxt")).expect("config parses");
        crate::config::normalize(&mut c);
        c
    }

    fn int32(name: &str, shape: Vec<i64>, values: &[i32]) -> Tensor {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(name, DataType::Int32, shape, Bytes::from(data)).expect("tensor")
    }

    fn values(t: &Tensor) -> Vec<i32> {
        t.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    /// Composing models: `inc` (Y = X + 1, batching), `fan` (decoupled, non-batching: three
    /// responses Y = 10 X + i), `fail` (always fails), `pair_a`/`pair_b` (answer only once both
    /// have been called: they finish only if they run at the same time).
    struct Models {
        configs: HashMap<String, ModelConfig>,
        calls: Mutex<Vec<String>>,
        pair: tokio::sync::Barrier,
    }

    const INC: &str = r#"name: "inc" max_batch_size: 8
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;

    impl Models {
        fn new() -> Arc<Self> {
            let mut configs = HashMap::new();
            for name in ["inc", "fail", "pair_a", "pair_b"] {
                configs.insert(name.to_string(), config(&INC.replace("\"inc\"", &format!("\"{name}\""))));
            }
            configs.insert(
                "join".into(),
                config(
                    r#"name: "join" max_batch_size: 8
                    input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] },
                            { name: "X2" data_type: TYPE_INT32 dims: [ 1 ] } ]
                    output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
                ),
            );
            configs.insert(
                "fan".into(),
                config(
                    r#"name: "fan" max_batch_size: 0 model_transaction_policy { decoupled: true }
                    input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
                    output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
                ),
            );
            Arc::new(Self { configs, calls: Mutex::default(), pair: tokio::sync::Barrier::new(2) })
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().expect("lock").clone()
        }
    }

    impl StepCatalog for Models {
        fn step_config(&self, model: &str, version: Option<i64>) -> Option<ModelConfig> {
            self.configs.get(model).filter(|_| version.is_none_or(|v| v == 1)).cloned()
        }
    }

    fn answer(model: &str, request: &InferRequest, y: Vec<i32>) -> InferResponse {
        let shape = request.inputs[0].shape.clone();
        InferResponse {
            model_name: model.into(),
            outputs: vec![int32("Y", shape, &y)],
            is_final: true,
            compute: std::time::Duration::from_micros(5),
            ..Default::default()
        }
    }

    impl Infer for Models {
        fn infer(&self, request: InferRequest) -> InferFuture<'_, InferResponse> {
            Box::pin(async move {
                self.calls.lock().expect("lock").push(request.model_name.clone());
                let x = values(&request.inputs[0]);
                match request.model_name.as_str() {
                    "fail" => Err(CoreError::new(ErrorKind::InvalidArg, "boom")),
                    "pair_a" | "pair_b" => {
                        self.pair.wait().await;
                        Ok(answer(&request.model_name, &request, x))
                    }
                    _ => Ok(answer(&request.model_name, &request, x.iter().map(|v| v + 1).collect())),
                }
            })
        }

        fn infer_stream(&self, request: InferRequest) -> InferFuture<'_, ResponseStream> {
            Box::pin(async move {
                self.calls.lock().expect("lock").push(request.model_name.clone());
                let (tx, rx) = crate::infer::response_stream();
                let x = values(&request.inputs[0]);
                for i in 0..3 {
                    let y = x.iter().map(|v| v * 10 + i).collect();
                    let _ = tx.try_send(Ok(InferResponse { is_final: false, ..answer("fan", &request, y) }));
                }
                Ok(rx)
            })
        }
    }

    fn ensemble(models: &Arc<Models>, text: &str) -> CoreResult<EnsembleScheduler> {
        let plan = EnsemblePlan::new(&config(text), models.as_ref())?;
        let infer: Arc<dyn Infer> = Arc::clone(models) as Arc<dyn Infer>;
        // The test keeps `models` alive, so the weak reference stays good.
        Ok(EnsembleScheduler::new(plan, Arc::downgrade(&infer)))
    }

    fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> String {
        let ins: String = inputs.iter().map(|(k, v)| format!(r#"input_map {{ key: "{k}" value: "{v}" }} "#)).collect();
        let outs: String =
            outputs.iter().map(|(k, v)| format!(r#"output_map {{ key: "{k}" value: "{v}" }} "#)).collect();
        format!(r#"{{ model_name: "{model}" model_version: -1 {ins} {outs} }}"#)
    }

    fn ensemble_config(max_batch: i32, inputs: &[&str], outputs: &[&str], steps: &[String]) -> String {
        let io = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!(r#"{{ name: "{n}" data_type: TYPE_INT32 dims: [ 1 ] }}"#))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            r#"name: "e" platform: "ensemble" max_batch_size: {max_batch} input [ {} ] output [ {} ]
            ensemble_scheduling {{ step [ {} ] }}"#,
            io(inputs),
            io(outputs),
            steps.join(", ")
        )
    }

    fn exec(inputs: Vec<Tensor>, outputs: &[&str]) -> ExecRequest {
        ExecRequest { inputs, outputs: outputs.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[tokio::test]
    async fn a_chain_runs_step_after_step_and_sums_compute() {
        let models = Models::new();
        let text = ensemble_config(
            8,
            &["IN"],
            &["OUT"],
            &[step("inc", &[("X", "IN")], &[("Y", "mid")]), step("inc", &[("X", "mid")], &[("Y", "OUT")])],
        );
        let e = ensemble(&models, &text).expect("valid");
        let (outputs, compute) = e.execute(exec(vec![int32("IN", vec![2, 1], &[1, 5])], &["OUT"])).await.expect("ran");
        assert_eq!(outputs[0].name, "OUT");
        assert_eq!(values(&outputs[0]), vec![3, 7]);
        assert_eq!(compute, std::time::Duration::from_micros(10));
    }

    #[tokio::test]
    async fn steps_no_requested_output_needs_are_skipped() {
        let models = Models::new();
        let text = ensemble_config(
            8,
            &["IN"],
            &["A", "B"],
            &[step("inc", &[("X", "IN")], &[("Y", "A")]), step("fail", &[("X", "IN")], &[("Y", "B")])],
        );
        let e = ensemble(&models, &text).expect("valid");
        let (outputs, _) = e.execute(exec(vec![int32("IN", vec![1, 1], &[1])], &["A"])).await.expect("ran");
        assert_eq!(values(&outputs[0]), vec![2]);
        assert_eq!(models.calls(), vec!["inc"]);
    }

    #[tokio::test]
    async fn independent_steps_run_at_the_same_time() {
        let models = Models::new();
        let text = ensemble_config(
            8,
            &["IN"],
            &["A", "B"],
            &[step("pair_a", &[("X", "IN")], &[("Y", "A")]), step("pair_b", &[("X", "IN")], &[("Y", "B")])],
        );
        let e = ensemble(&models, &text).expect("valid");
        // Each of the two steps waits for the other: run one after the other, this never ends.
        let run = e.execute(exec(vec![int32("IN", vec![1, 1], &[4])], &["A", "B"]));
        let (outputs, _) =
            tokio::time::timeout(std::time::Duration::from_secs(10), run).await.expect("overlap").expect("ran");
        assert_eq!(outputs.len(), 2);
    }

    #[tokio::test]
    async fn a_failing_step_fails_the_request_with_its_code() {
        let models = Models::new();
        let text = ensemble_config(8, &["IN"], &["OUT"], &[step("fail", &[("X", "IN")], &[("Y", "OUT")])]);
        let e = ensemble(&models, &text).expect("valid");
        let err = e.execute(exec(vec![int32("IN", vec![1, 1], &[1])], &["OUT"])).await.expect_err("fails");
        assert_eq!((err.kind, err.message.as_str()), (ErrorKind::InvalidArg, "in ensemble 'e', boom"));
    }

    #[tokio::test]
    async fn each_response_of_a_decoupled_step_drives_the_steps_after_it() {
        let models = Models::new();
        let text = ensemble_config(
            0,
            &["IN"],
            &["OUT"],
            &[step("fan", &[("X", "IN")], &[("Y", "fanned")]), step("inc", &[("X", "fanned")], &[("Y", "OUT")])],
        );
        // `inc` batches ([-1, 1]); the non-batching ensemble's [1] does not fit it.
        let err = ensemble(&models, &text).err().expect("shape mismatch");
        assert!(err.message.contains("inconsistent shape"), "{}", err.message);

        let text = ensemble_config(
            8,
            &["IN"],
            &["OUT"],
            &[step("fan", &[("X", "IN")], &[("Y", "fanned")]), step("inc", &[("X", "fanned")], &[("Y", "OUT")])],
        );
        let e = ensemble(&models, &text).expect("valid");
        assert!(e.plan().decoupled);
        // `fan` does not batch: the ensemble's batch dimension is stripped for it and added back.
        assert!(e.plan().steps[0].inputs[0].strip_batch && e.plan().steps[0].outputs[0].add_batch);
        let (tx, mut rx) = crate::backend::responder();
        let request = ExecRequest { responder: Some(tx), ..exec(vec![int32("IN", vec![1, 1], &[2])], &["OUT"]) };
        e.execute_decoupled(request).await.expect("ran");
        let mut got = Vec::new();
        while let Ok(response) = rx.try_recv() {
            let outputs = response.outputs.expect("outputs");
            assert_eq!(outputs[0].shape, vec![1, 1]);
            got.push(values(&outputs[0])[0]);
        }
        got.sort_unstable();
        assert_eq!(got, vec![21, 22, 23]);
        assert_eq!(models.calls().iter().filter(|c| *c == "inc").count(), 3);

        // A batch of two cannot go through a step that does not batch.
        let (tx, _rx) = crate::backend::responder();
        let request = ExecRequest { responder: Some(tx), ..exec(vec![int32("IN", vec![2, 1], &[2, 3])], &["OUT"]) };
        let err = e.execute_decoupled(request).await.expect_err("batch of two");
        assert!(err.message.contains("model fan does not support batching"), "{}", err.message);
    }

    #[tokio::test]
    async fn the_in_flight_limit_still_delivers_everything() {
        let models = Models::new();
        let text = ensemble_config(
            8,
            &["IN"],
            &["OUT"],
            &[step("fan", &[("X", "IN")], &[("Y", "fanned")]), step("inc", &[("X", "fanned")], &[("Y", "OUT")])],
        )
        .replace("ensemble_scheduling {", "ensemble_scheduling { max_inflight_responses: 1");
        let e = ensemble(&models, &text).expect("valid");
        assert_eq!(e.plan().max_inflight, 1);
        let (tx, mut rx) = crate::backend::responder();
        let request = ExecRequest { responder: Some(tx), ..exec(vec![int32("IN", vec![1, 1], &[1])], &["OUT"]) };
        e.execute_decoupled(request).await.expect("ran");
        let mut count = 0;
        while rx.try_recv().is_ok() {
            count += 1;
        }
        assert_eq!(count, 3);
    }

    #[test]
    fn load_time_checks_use_tritons_messages() {
        let models = Models::new();
        let check = |text: String| ensemble(&models, &text).err().map(|e| e.message).unwrap_or_default();
        let inc = |i: &str, o: &str| step("inc", &[("X", i)], &[("Y", o)]);

        let unknown = check(ensemble_config(8, &["IN"], &["OUT"], &[step("nope", &[("X", "IN")], &[("Y", "OUT")])]));
        assert_eq!(unknown, "ensemble e contains models that are not available or ambiguous: nope");
        let version = check(ensemble_config(8, &["IN"], &["OUT"], &[inc("IN", "OUT").replace("-1", "7")]));
        assert_eq!(version, "ensemble 'e' depends on 'inc' whose required version 7 is not loaded.");
        let batch = check(ensemble_config(16, &["IN"], &["OUT"], &[inc("IN", "OUT")]));
        assert!(batch.contains("allows maximum batch size 16, but it contains model inc which only allows"), "{batch}");
        let unwritten = check(ensemble_config(
            8,
            &["IN"],
            &["OUT"],
            &[step("join", &[("X", "IN"), ("X2", "other")], &[("Y", "OUT")])],
        ));
        assert_eq!(
            unwritten,
            "output 'OUT' for ensemble 'e' is not written: at least one of its depending tensors, 'other', is not \
             connected"
        );
        let unused = check(ensemble_config(8, &["IN", "SPARE"], &["OUT"], &[inc("IN", "OUT")]));
        assert_eq!(unused, "ensemble input 'SPARE' for ensemble e' is not used");
        let unused_output = check(ensemble_config(8, &["IN"], &["OUT"], &[inc("IN", "OUT"), inc("IN", "spare")]));
        assert_eq!(unused_output, "ensemble tensor 'spare' is unused in ensemble 'e'");
        let cycle = check(ensemble_config(8, &["IN"], &["OUT"], &[inc("b", "a"), inc("a", "b"), inc("IN", "OUT")]));
        assert_eq!(cycle, "ensemble tensor 'a' is unused in ensemble 'e'");
        let twice = check(ensemble_config(8, &["IN"], &["OUT"], &[inc("IN", "OUT"), inc("IN", "OUT")]));
        assert_eq!(twice, "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'e' step 1");
        let bad_input = check(ensemble_config(8, &["IN"], &["OUT"], &[step("inc", &[("Z", "IN")], &[("Y", "OUT")])]));
        assert_eq!(bad_input, "in ensemble e, ensemble tensor IN is mapping to non-existing input Z in model inc");
        let no_steps = check(ensemble_config(8, &["IN"], &["OUT"], &[]));
        assert_eq!(no_steps, "must specify 'step' for ensemble 'e'");
        let two_fans = check(ensemble_config(
            8,
            &["IN"],
            &["OUT"],
            &[
                step("fan", &[("X", "IN")], &[("Y", "f1")]),
                step("fan", &[("X", "IN")], &[("Y", "f2")]),
                step("inc", &[("X", "f1")], &[("Y", "g1")]),
                step("inc", &[("X", "f2")], &[("Y", "g2")]),
                step("join", &[("X", "g1"), ("X2", "g2")], &[("Y", "OUT")]),
            ],
        ));
        assert_eq!(
            two_fans,
            "in ensemble e, step of model 'join' receives inputs originated from different decoupled models"
        );
    }
}
