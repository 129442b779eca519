//! Execution: how a validated request reaches a model instance. A loaded model version picks one
//! [`Scheduler`] from its config, as Triton does:
//! - [`Scheduler::Direct`]: Triton's default scheduler; each request runs alone on the next free
//!   instance of the [`pool::InstancePool`].
//! - [`Scheduler::Dynamic`]: `dynamic_batching`, the queue task in [`dynamic`].
//! - [`Scheduler::Sequence`]: `sequence_batching`, correlation ids and implicit state in
//!   [`sequence`].
//! - [`Scheduler::Ensemble`]: `ensemble_scheduling`, a graph of other models run through
//!   [`crate::infer::Infer`] in [`ensemble`]; it has no instances.
//!
//! The instances live inside the scheduler, so a model whose scheduler needs none (an ensemble
//! runs other models) has none. Statistics for executions are recorded by the pool, once per
//! execution, whichever scheduler formed the batch.

pub mod dynamic;
pub mod ensemble;
mod fair;
pub mod pool;
pub mod rate_limit;
pub mod sequence;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::backend::{ExecRequest, ModelInstance};
use crate::config::ModelConfig;
use crate::config::pb::model_config::SchedulingChoice;
use crate::error::{CoreError, CoreResult};
use crate::stats::ModelStats;
use crate::tensor::Tensor;
use dynamic::{BatcherConfig, DynamicBatcher};
use ensemble::EnsembleScheduler;
use pool::InstancePool;
use rate_limit::{Claim, RateLimiter};
use sequence::{SequenceBatcher, SequenceConfig};

pub enum Scheduler {
    Direct(Arc<InstancePool>),
    Dynamic {
        config: BatcherConfig,
        pool: Arc<InstancePool>,
        model: String,
        /// Started on the first request (inside the async runtime).
        batcher: OnceLock<DynamicBatcher>,
    },
    Sequence {
        config: SequenceConfig,
        pool: Arc<InstancePool>,
        sequencer: OnceLock<SequenceBatcher>,
    },
    Ensemble(EnsembleScheduler),
}

impl Scheduler {
    /// The scheduler the config asks for, over `instances`. `model_dir` holds sequence
    /// batching's initial-state files.
    pub fn new(
        config: &ModelConfig,
        instances: Vec<Box<dyn ModelInstance>>,
        stats: Arc<ModelStats>,
        model_dir: &Path,
        rate_limits: Option<(Arc<RateLimiter>, Vec<Arc<Claim>>)>,
    ) -> CoreResult<Self> {
        if instances.is_empty() {
            return Err(CoreError::invalid_arg(format!(
                "model '{}' has no instances (instance_group count is 0)",
                config.name
            )));
        }
        let count = instances.len();
        let quotas = Quotas::from_config(config)?;
        let mut pool = InstancePool::new(instances, stats).with_quotas(&config.name, quotas);
        if let Some((limiter, claims)) = rate_limits {
            pool = pool.with_rate_limits(limiter, claims);
        }
        let batched = match &config.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(_)) => true,
            Some(SchedulingChoice::DynamicBatching(_)) => config.max_batch_size > 0,
            _ => false,
        };
        if !batched {
            // The direct scheduler's requests wait for a slot in a fair line per tenant.
            pool = pool.with_fair_waiting();
        }
        let pool = Arc::new(pool);
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        Ok(match &config.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(_)) if decoupled => {
                return Err(CoreError::unsupported(format!(
                    "model '{}': sequence batching for decoupled models is not supported",
                    config.name
                )));
            }
            Some(SchedulingChoice::SequenceBatching(sb)) => Self::Sequence {
                config: SequenceConfig::new(&config.name, config.max_batch_size, count, sb, model_dir)?,
                pool,
                sequencer: OnceLock::new(),
            },
            Some(SchedulingChoice::DynamicBatching(d)) if config.max_batch_size > 0 => Self::Dynamic {
                config: match quotas.max_queue {
                    Some(max) => BatcherConfig::new(config.max_batch_size, d).cap_queues(max),
                    None => BatcherConfig::new(config.max_batch_size, d),
                },
                pool,
                model: config.name.clone(),
                batcher: OnceLock::new(),
            },
            _ => Self::Direct(pool),
        })
    }

    fn pool(&self) -> CoreResult<&Arc<InstancePool>> {
        match self {
            Self::Direct(pool) | Self::Dynamic { pool, .. } | Self::Sequence { pool, .. } => Ok(pool),
            Self::Ensemble(e) => {
                Err(CoreError::unsupported(format!("ensemble '{}' has no instances of its own", e.plan().name)))
            }
        }
    }

    /// The ensemble's graph, for an ensemble.
    pub fn ensemble(&self) -> Option<&EnsembleScheduler> {
        match self {
            Self::Ensemble(e) => Some(e),
            _ => None,
        }
    }

    /// Whether requests depend on state kept between them (never cached).
    pub fn is_stateful(&self) -> bool {
        matches!(self, Self::Sequence { .. })
    }

    /// Runs `batch` `times` times on every instance, outside scheduling (warmup, before the
    /// version is served), handing each result to `check`.
    pub fn execute_on_each(
        &self,
        batch: &[ExecRequest],
        times: usize,
        check: impl FnMut(pool::BatchResults) -> CoreResult<()>,
    ) -> CoreResult<()> {
        self.pool()?.execute_on_each(batch, times, check)
    }

    /// Runs one validated request of `batch_size` rows and returns its outputs.
    pub async fn execute(&self, exec: ExecRequest, batch_size: usize) -> CoreResult<Vec<Tensor>> {
        match self {
            Self::Direct(pool) => pool.execute_one(exec, batch_size).await,
            Self::Dynamic { config, pool, model, batcher } => {
                let batcher =
                    batcher.get_or_init(|| DynamicBatcher::start(config.clone(), Arc::clone(pool), model.clone()));
                batcher.submit(exec, batch_size).await
            }
            Self::Sequence { config, pool, sequencer } => {
                let sequencer = sequencer.get_or_init(|| SequenceBatcher::start(config.clone(), Arc::clone(pool)));
                sequencer.submit(exec, batch_size).await
            }
            Self::Ensemble(ensemble) => {
                let sink = exec.compute.clone();
                // Its steps are requests of their own, which run concurrently within this task
                // and so may not block it (`Caller::Detached`, their default).
                let (outputs, compute) = ensemble.execute(exec).await?;
                if let Some(sink) = sink {
                    sink.add(compute);
                }
                Ok(outputs)
            }
        }
    }

    /// Runs one request of a decoupled model, whose responses go through `exec.responder`;
    /// returns once the instance is done with it. Decoupled models are scheduled directly.
    pub async fn execute_decoupled(&self, exec: ExecRequest, batch_size: usize) -> CoreResult<()> {
        match self {
            Self::Ensemble(ensemble) => {
                let sink = exec.compute.clone();
                let compute = ensemble.execute_decoupled(exec).await?;
                if let Some(sink) = sink {
                    sink.add(compute);
                }
                Ok(())
            }
            _ => self.pool()?.execute_adoptable(exec, batch_size).await,
        }
    }
}

/// Whether two requests can share a batch: same inputs, datatypes and non-batch dims (ragged
/// batching is not supported).
/// Per-model quotas from config `parameters` (string values, positive integers), enforced here
/// for every backend so that a model's own code cannot get around them:
/// - `max_queue_size`: requests waiting for an instance (or in the dynamic batcher's queue)
///   beyond this are refused at once with UNAVAILABLE;
/// - `max_concurrent_executions`: at most this many of the model's instances execute at once,
///   whatever its `instance_group` count says.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quotas {
    pub max_queue: Option<usize>,
    pub max_concurrent: Option<usize>,
}

impl Quotas {
    pub fn from_config(config: &ModelConfig) -> CoreResult<Self> {
        let number = |key: &str| -> CoreResult<Option<usize>> {
            crate::config::positive_parameter(config, key)
                .map(|n| n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
                .map_err(|e| CoreError::invalid_arg(format!("model '{}': {e}", config.name)))
        };
        Ok(Self { max_queue: number("max_queue_size")?, max_concurrent: number("max_concurrent_executions")? })
    }
}

pub(crate) fn compatible(a: &ExecRequest, b: &ExecRequest) -> bool {
    a.inputs.len() == b.inputs.len()
        && a.inputs.iter().all(|x| {
            b.inputs
                .iter()
                .any(|y| x.name == y.name && x.datatype == y.datatype && x.shape.get(1..) == y.shape.get(1..))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl ModelInstance for Echo {
        fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
            batch.into_iter().map(|r| Ok(r.inputs)).collect()
        }
    }

    fn scheduler(config: &str, instances: usize) -> CoreResult<Scheduler> {
        let config = crate::config::parse_pbtxt(config, Path::new("config.pbtxt")).unwrap();
        let instances = (0..instances).map(|_| Box::new(Echo) as Box<dyn ModelInstance>).collect();
        Scheduler::new(&config, instances, Arc::default(), Path::new("/nonexistent"), None)
    }

    const IO: &str = r#"input [ { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;

    #[test]
    fn the_config_picks_the_scheduler() {
        let kind = |extra: &str| match scheduler(&format!("name: \"m\" {IO} {extra}"), 1) {
            Ok(Scheduler::Direct(_)) => "direct",
            Ok(Scheduler::Dynamic { .. }) => "dynamic",
            Ok(Scheduler::Sequence { .. }) => "sequence",
            Ok(Scheduler::Ensemble(_)) => "ensemble",
            Err(_) => "error",
        };
        assert_eq!(kind(""), "direct");
        assert_eq!(kind("max_batch_size: 4 dynamic_batching { }"), "dynamic");
        // Without a batch dimension there is nothing to batch: Triton's default scheduler.
        assert_eq!(kind("dynamic_batching { }"), "direct");
        assert_eq!(kind("max_batch_size: 4 sequence_batching { }"), "sequence");
        assert_eq!(kind("sequence_batching { } model_transaction_policy { decoupled: true }"), "error");
        let none = scheduler(&format!("name: \"m\" {IO}"), 0).err().unwrap();
        assert!(none.message.contains("has no instances"), "{}", none.message);
    }

    #[tokio::test]
    async fn direct_requests_run_and_are_counted_once() {
        let scheduler = scheduler(&format!("name: \"m\" {IO}"), 1).unwrap();
        let x = Tensor::new("x", crate::tensor::DataType::Int32, vec![1], bytes::Bytes::from_static(&[7, 0, 0, 0]));
        let exec = ExecRequest { inputs: vec![x.unwrap()], ..Default::default() };
        let out = scheduler.execute(exec, 1).await.unwrap();
        assert_eq!(&out[0].data[..], &[7, 0, 0, 0]);
        let stats = scheduler.pool().unwrap().stats().snapshot();
        assert_eq!((stats.execution_count, stats.inference_count, stats.queue.count), (1, 1, 1));
    }

    #[test]
    fn quotas_come_from_parameters_and_bad_values_say_which() {
        let config = |params: &str| {
            crate::config::parse_pbtxt(&format!("name: \"m\" {IO} {params}"), Path::new("config.pbtxt")).unwrap()
        };
        let param = |k: &str, v: &str| format!("parameters {{ key: \"{k}\" value: {{ string_value: \"{v}\" }} }}");
        assert_eq!(Quotas::from_config(&config("")).unwrap(), Quotas::default());
        let both = format!("{} {}", param("max_queue_size", "8"), param("max_concurrent_executions", " 2 "));
        assert_eq!(
            Quotas::from_config(&config(&both)).unwrap(),
            Quotas { max_queue: Some(8), max_concurrent: Some(2) }
        );
        for bad in ["0", "-1", "lots", ""] {
            let e = Quotas::from_config(&config(&param("max_queue_size", bad))).unwrap_err();
            assert_eq!(
                e.message,
                format!("model 'm': parameter 'max_queue_size' must be a positive integer, got '{}'", bad.trim())
            );
        }
    }
}
