//! wasi:clocks timers that cannot outlast the guest's time limit.
//!
//! wasmtime-wasi's `subscribe-duration` and `subscribe-instant` make timers that a guest then
//! waits on inside `wasi:io/poll`: a host call, which the epoch deadline cannot interrupt. A
//! Python guest's `time.sleep(3600)` held its instance (and every later request of the model) an
//! hour past `max_execute_ms`. These definitions shadow wasmtime-wasi's: a timer fires at the
//! execution's deadline at the latest, the guest runs on, and the epoch check stops it there.
//! A guest that sleeps less than its time limit sleeps exactly as long as before.

use std::time::Instant;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as _;

use super::state::GuestState;

/// The interface wasmtime-wasi 48 defines (a guest importing an older 0.2 version is linked to
/// it by semver), whose two timer functions are replaced here.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces the timer functions `wasmtime_wasi::p2::add_to_linker_sync` defined.
pub(super) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap("subscribe-duration", |mut store: StoreContextMut<'_, GuestState>, (nanos,): (u64,)| {
        Ok((store.data_mut().timer(nanos)?,))
    })?;
    clock.func_wrap("subscribe-instant", |mut store: StoreContextMut<'_, GuestState>, (when,): (u64,)| {
        let state = store.data_mut();
        let now = state.clocks().now()?;
        Ok((state.timer(when.saturating_sub(now))?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

impl GuestState {
    fn clocks(&mut self) -> WasiClocksCtxView<'_> {
        WasiClocksCtxView { ctx: self.wasi.clocks(), table: &mut self.handles.table }
    }

    /// A timer of `nanos`, cut to the time left until the execution's deadline (outside
    /// `execute`: one time limit from now).
    fn timer(&mut self, nanos: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let deadline = self.call.deadline.unwrap_or_else(|| Instant::now() + self.shared.bls_timeout);
        self.clocks().subscribe_duration(capped(nanos, deadline))
    }
}

/// How many of `nanos` a timer made now may wait: never past `deadline`.
fn capped(nanos: u64, deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    nanos.min(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timers_end_by_the_deadline() {
        let ms = 1_000_000;
        let deadline = Instant::now() + Duration::from_millis(500);
        assert!(capped(3_600_000 * ms, deadline) <= 500 * ms, "an hour is cut to what is left");
        assert_eq!(capped(10 * ms, deadline), 10 * ms, "a short sleep is whole");
        assert_eq!(capped(ms, Instant::now() - Duration::from_secs(1)), 0, "past the deadline: at once");
    }
}
