//! The engine's settings, shared by the server's engine ([`super::engine`]) and the compiler
//! process's ([`super::compile`]): an artifact the compiler writes must load in the server.

use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy};

/// How the engine allocates instances: from a pool reserved up front for this many live
/// instances (fast instantiation), or one by one.
#[derive(Clone, Copy, Debug)]
pub(super) enum Allocation {
    Pooling(u32),
    OnDemand,
}

/// The engine's settings for an allocation strategy.
pub(super) fn engine_config(allocation: Allocation) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    if let Allocation::Pooling(max_instances) = allocation {
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool_config(max_instances)));
    }
    // For profiling guests with `perf`: compiled guest functions get names in /tmp/perf-<pid>.map.
    if std::env::var_os("TESSERA_WASM_PERFMAP").is_some_and(|v| v == "1") {
        config.profiler(ProfilingStrategy::PerfMap);
    }
    config
}

fn pool_config(max_instances: u32) -> PoolingAllocationConfig {
    let n = max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n * 16)
        .max_core_instances_per_component(32)
        .total_memories(n * 4)
        .max_memories_per_component(8)
        .total_tables(n * 16)
        .max_tables_per_component(16)
        .table_elements(100_000)
        .max_memory_size(4 << 30)
        .max_core_instance_size(16 << 20)
        .max_component_instance_size(4 << 20)
        .total_stacks(n);
    pool
}
