//! The engine every Wasm model shares: its settings ([`super::settings`]), the WIT linker, and
//! the epoch ticker that bounds executions.

use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::Linker;

use super::bindings;
use super::options::WasmOptions;
use super::settings::{Allocation, engine_config};
use super::state::{CapabilityCalls, GuestState, HostCalls, Types};
use super::telemetry::TelemetryCalls;

/// How often the engine's epoch advances: the resolution of `max_execute_ms`.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Builds the engine and linker and starts the epoch ticker. If the engine cannot be built, a
/// default one stands in (so the server still starts) together with the reason, which every
/// Wasm model load then reports.
pub(super) fn build(options: &WasmOptions) -> (Engine, Linker<GuestState>, Option<String>) {
    let pooled = build_engine(Allocation::Pooling(options.max_instances));
    let built = match pooled {
        Ok(built) => Ok(built),
        Err(e) => {
            // Said once, here: the pool's address space reservation failed (too many instances
            // for this machine's virtual memory or map count). Every model still loads, with
            // instances allocated one by one (slower instantiation, same limits).
            tracing::error!(
                max_instances = options.max_instances,
                "could not reserve the WebAssembly instance pool ({e}); allocating instances on demand instead \
                 (lower --wasm-max-instances to get the pool back)"
            );
            build_engine(Allocation::OnDemand)
        }
    };
    match built {
        Ok((engine, linker)) => {
            spawn_epoch_ticker(&engine);
            (engine, linker, None)
        }
        Err(e) => {
            tracing::error!("failed to create the WebAssembly engine: {e}");
            let engine = Engine::default();
            let linker = Linker::new(&engine);
            (engine, linker, Some(e.to_string()))
        }
    }
}

pub(super) fn build_engine(allocation: Allocation) -> wasmtime::Result<(Engine, Linker<GuestState>)> {
    let engine = Engine::new(&engine_config(allocation))?;
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    super::clocks::add_to_linker(&mut linker)?;
    // One interface at a time, each on the view of the store it needs (see `state`).
    bindings::tessera::model::types::add_to_linker::<GuestState, Types>(&mut linker, GuestState::types)?;
    bindings::tessera::model::host::add_to_linker::<GuestState, HostCalls>(&mut linker, GuestState::host)?;
    bindings::tessera::model::telemetry::add_to_linker::<GuestState, TelemetryCalls>(
        &mut linker,
        GuestState::telemetry,
    )?;
    super::nn::add_to_linker(&mut linker)?;
    bindings::wasi::config::store::add_to_linker::<GuestState, CapabilityCalls>(&mut linker, GuestState::capabilities)?;
    bindings::wasi::keyvalue::store::add_to_linker::<GuestState, CapabilityCalls>(
        &mut linker,
        GuestState::capabilities,
    )?;
    bindings::wasi::keyvalue::atomics::add_to_linker::<GuestState, CapabilityCalls>(
        &mut linker,
        GuestState::capabilities,
    )?;
    Ok((engine, linker))
}

/// Epoch interruption needs a clock: one thread ticks the engine until it is dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let ticker = engine.weak();
    std::thread::Builder::new()
        .name("tessera-wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = ticker.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_too_large_for_the_address_space_falls_back_to_on_demand_allocation() {
        // 400,000 memories of 4 GiB: far past the 128 TiB a process can map.
        let options = WasmOptions { cache_dir: None, max_instances: 100_000, ..WasmOptions::default() };
        assert!(build_engine(Allocation::Pooling(options.max_instances)).is_err(), "the pool cannot be reserved");
        let (engine, linker, error) = build(&options);
        assert_eq!(error, None, "the server still gets a working engine");
        drop((engine, linker));
    }
}
