//! The bindings wasmtime generates from `wit/` for world `model` (the standard `wasi:config` and
//! `wasi:keyvalue` interfaces it imports included), with the host's own types for its resources,
//! and the short names the backend's files use for its interfaces (`wit`: interface `types`,
//! `wit_host`: interface `host`).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "model",
    with: {
        "tessera:model/types.tensor": super::resources::HostTensor,
        "tessera:model/types.request": super::resources::HostRequest,
        "tessera:model/types.response-sender": super::resources::HostSender,
        "tessera:model/host.response-stream": super::resources::HostResponseStream,
        "tessera:model/host.pending-infer": super::resources::HostPendingInfer,
        "tessera:model/telemetry.metric-family": super::resources::HostMetricFamily,
        "tessera:model/telemetry.metric": super::resources::HostMetric,
        "tessera:model/telemetry.span": super::resources::HostSpan,
        "wasi:keyvalue/store.bucket": super::resources::KvBucket,
    },
    imports: { default: trappable },
});

pub(super) use self::tessera::model::{host as wit_host, types as wit};
