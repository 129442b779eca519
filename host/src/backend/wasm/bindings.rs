//! The bindings wasmtime generates from `wit/` for world `model`, with the host's own types
//! for its resources.

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
