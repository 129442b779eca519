//! Test helpers of the Wasm backend's unit tests.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use wasmtime_wasi::WasiCtx;

use super::sandbox::{AllowList, GuestLimiter};
use super::state::{GuestShared, GuestState};
use super::timing::ExecutionClock;
use crate::infer::Infer;

/// The smallest valid component: the preamble (magic, component version 0x0d, layer 1).
pub(super) const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

/// A fresh directory under the system temp dir, removed on drop.
pub(super) struct TempDir(pub PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tessera-wasm-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What every store of a test guest called "guest" shares.
pub(super) fn shared(allowed_models: AllowList, infer: Option<Weak<dyn Infer>>) -> Arc<GuestShared> {
    Arc::new(GuestShared {
        model_name: "guest".into(),
        allowed_models,
        bls_timeout: Duration::from_millis(500),
        infer,
        runtime: None,
        clock: ExecutionClock::Wall,
        telemetry: Default::default(),
        capabilities: Default::default(),
    })
}

/// A store's data with no grants and a 1 MiB memory limit.
pub(super) fn state(shared: Arc<GuestShared>) -> GuestState {
    GuestState::new(WasiCtx::builder().build(), GuestLimiter::new(1 << 20), shared)
}
