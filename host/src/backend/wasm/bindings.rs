//! The bindings wasmtime generates from `wit/` for world `model`, with the host's own types
//! for its resources, and the short names the backend's files use for its interfaces (`wit`:
//! interface `types`, `wit_host`: interface `host`).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "model",
    with: {
        "tessera:model/types.tensor": super::state::HostTensor,
        "tessera:model/types.request": super::state::HostRequest,
        "tessera:model/types.response-sender": super::state::HostSender,
        "tessera:model/host.response-stream": super::bls::HostResponseStream,
        "tessera:model/host.pending-infer": super::bls::HostPendingInfer,
        "tessera:model/telemetry.metric-family": super::telemetry::HostMetricFamily,
        "tessera:model/telemetry.metric": super::telemetry::HostMetric,
        "tessera:model/telemetry.span": super::telemetry::HostSpan,
    },
    imports: { default: trappable },
});

pub(super) use tessera::model::{host as wit_host, types as wit};
