//! Fuzz entry points: one per parser that reads bytes from outside the server, each taking
//! arbitrary bytes and asserting only that nothing panics (every malformed input must become an
//! error value). `fuzz/` runs them under libFuzzer with cargo-fuzz (nightly); [`mutate`] runs
//! them on the stable toolchain with a small mutation fuzzer, and this module's tests give every
//! target a short bounded run in the test command (`TESSERA_FUZZ_SECS` per target, default 2).

use std::path::Path;

use bytes::Bytes;
use prost::Message;

use crate::http::json_data::JsonParameters;
use crate::model::io::ModelIo;

/// The HTTP infer body: JSON with Triton's binary tensor extension. The first byte chooses the
/// Inference-Header-Content-Length (none, or a split point inside the body, or 0 for a raw binary
/// request to a one-input model); the rest is the body.
pub fn http_infer(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let body = Bytes::copy_from_slice(body);
    match mode % 4 {
        0 => drop(crate::http::codec::decode_request(body, None, "m", None)),
        1 => {
            let split = i64::try_from(body.len() / 2).unwrap_or(0).max(1);
            drop(crate::http::codec::decode_request(body, Some(split), "m", Some(1)));
        }
        2 => {
            let header = i64::from(mode) * 3 % i64::try_from(body.len().max(1)).unwrap_or(1);
            drop(crate::http::codec::decode_request(body, Some(header), "m", None));
        }
        _ => {
            if let Some(io) = raw_model() {
                drop(crate::http::codec::decode_raw_for(body, &io.name, io.max_batch_size > 0, &io.inputs));
            }
        }
    }
}

/// A gRPC `ModelInferRequest` message: scanned for its bounds as the gRPC door does before
/// decoding (which must never call a message the decoder accepts malformed), then decoded to the
/// core request.
pub fn grpc_infer(data: &[u8]) {
    let scanned = crate::grpc::limits::scan_infer_request(data);
    if let Ok(request) = crate::config::pb::ModelInferRequest::decode(data) {
        assert!(
            !matches!(scanned, Err(crate::grpc::limits::ScanError::Malformed)),
            "the scan refused a message that decodes"
        );
        drop(crate::grpc::codec::decode_request(request));
    }
}

/// `config.pbtxt` text, normalised and validated as a repository load does; and the same bytes as
/// a JSON config override.
pub fn model_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parsed = [crate::config::parse_pbtxt(text, Path::new("config.pbtxt")), crate::config::parse_json(text)];
    for mut config in parsed.into_iter().flatten() {
        crate::config::normalize(&mut config);
        drop(crate::config::validate(&config, "m"));
    }
}

/// A tensor's `parameters` object as JSON, read for its shared-memory target.
pub fn shm_parameters(data: &[u8]) {
    if let Ok(JsonParameters { entries: parameters, .. }) = serde_json::from_slice::<JsonParameters>(data) {
        drop(crate::shm::parse_target(&parameters));
    }
}

/// A tensor pack as a Wasm guest answers `execute-by-value` with it: whatever it accepts packs
/// back to the same bytes (there is one way to write a pack).
pub fn tensor_pack(data: &[u8]) {
    use crate::backend::wasm::pack;
    if let Ok(tensors) = pack::unpack_outputs(Bytes::copy_from_slice(data)) {
        let mut budget = usize::MAX;
        assert_eq!(pack::pack_inputs(&tensors, u64::MAX, &mut budget), data, "a pack reads back as it was written");
    }
}

/// A fuzz target: arbitrary bytes in, no panic out.
pub type Target = fn(&[u8]);

/// The targets by name, for drivers.
pub const TARGETS: &[(&str, Target)] = &[
    ("http_infer", http_infer),
    ("grpc_infer", grpc_infer),
    ("model_config", model_config),
    ("shm_parameters", shm_parameters),
    ("tensor_pack", tensor_pack),
];

fn raw_model() -> Option<ModelIo> {
    let config = crate::config::parse_pbtxt(
        r#"name: "m" max_batch_size: 4 input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
           output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]"#,
        Path::new("config.pbtxt"),
    )
    .ok()?;
    ModelIo::from_config(&config, Path::new("")).ok()
}

/// Inputs each target starts from: valid requests and configs, so mutations explore near them.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "http_infer" => {
            let json = concat!(
                r#"{"id":"1","parameters":{"binary_data_output":true},"inputs":["#,
                r#"{"name":"INPUT0","shape":[1,4],"datatype":"INT32","data":[[1,2,3,4]]},"#,
                r#"{"name":"INPUT1","shape":[2],"datatype":"BYTES","data":["a","b"]},"#,
                r#"{"name":"INPUT2","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}}],"#,
                r#""outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true,"classification":2}},"#,
                r#"{"name":"OUTPUT1","parameters":{"shared_memory_region":"r","shared_memory_byte_size":64,"#,
                r#""shared_memory_offset":0}}]}"#
            )
            .as_bytes();
            let mut binary = vec![0u8];
            binary.extend_from_slice(json);
            binary.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
            let mut raw = vec![3u8];
            raw.extend_from_slice(&[0u8; 16]);
            vec![[&[0u8][..], json].concat(), binary, [&[1u8][..], json].concat(), raw]
        }
        "grpc_infer" => {
            use crate::config::pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
            let request = crate::config::pb::ModelInferRequest {
                model_name: "m".into(),
                model_version: "1".into(),
                id: "x".into(),
                inputs: vec![
                    InferInputTensor {
                        name: "INPUT0".into(),
                        datatype: "INT32".into(),
                        shape: vec![1, 2],
                        ..Default::default()
                    },
                    InferInputTensor {
                        name: "INPUT1".into(),
                        datatype: "BYTES".into(),
                        shape: vec![1],
                        ..Default::default()
                    },
                ],
                outputs: vec![InferRequestedOutputTensor { name: "OUTPUT0".into(), ..Default::default() }],
                raw_input_contents: vec![
                    Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]),
                    Bytes::from_static(&[1, 0, 0, 0, b'z']),
                ],
                ..Default::default()
            };
            vec![request.encode_to_vec()]
        }
        "model_config" => [
            include_str!("../../model-repos/quickstart/simple/config.pbtxt"),
            include_str!("../../model-repos/quickstart/text_pipeline/config.pbtxt"),
            include_str!("../../model-repos/quickstart/simple_sequence/config.pbtxt"),
            include_str!("../../model-repos/quickstart/bls_router/config.pbtxt"),
            concat!(
                r#"{"name":"m","backend":"onnxruntime","max_batch_size":4,"#,
                r#""input":[{"name":"I","data_type":"TYPE_FP32","dims":[-1]}],"#,
                r#""output":[{"name":"O","data_type":"TYPE_FP32","dims":[-1]}],"#,
                r#""dynamic_batching":{"preferred_batch_size":[2]}}"#
            ),
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        "shm_parameters" => vec![
            br#"{"shared_memory_region":"r","shared_memory_byte_size":64,"shared_memory_offset":8}"#.to_vec(),
            br#"{"shared_memory_region":"r","shared_memory_byte_size":18446744073709551615}"#.to_vec(),
        ],
        "tensor_pack" => {
            let tensor = |name: &str, datatype, shape: Vec<i64>, data: &'static [u8]| {
                crate::tensor::Tensor::unchecked(name, datatype, shape, Bytes::from_static(data))
            };
            use crate::tensor::DataType;
            let outputs = [
                tensor("OUTPUT0", DataType::Fp32, vec![1, 2], &[0, 0, 128, 63, 0, 0, 0, 64]),
                tensor("OUTPUT1", DataType::Bytes, vec![2], &[1, 0, 0, 0, b'a', 0, 0, 0, 0]),
                tensor("flag", DataType::Bool, vec![], &[1]),
            ];
            let mut budget = usize::MAX;
            vec![
                crate::backend::wasm::pack::pack_inputs(&outputs, u64::MAX, &mut budget),
                crate::backend::wasm::pack::pack_inputs(&outputs[..1], u64::MAX, &mut budget),
            ]
        }
        _ => Vec::new(),
    }
}

/// A small deterministic mutation fuzzer for the stable toolchain: starting from `seeds`, runs
/// `target` on mutated inputs until `budget` passes or `max_runs` inputs ran. Returns the first
/// input that panicked, if any (the panic message is printed by the default hook).
pub fn mutate(
    target: Target,
    seeds: &[Vec<u8>],
    rng_seed: u64,
    budget: std::time::Duration,
    max_runs: usize,
) -> (usize, Option<Vec<u8>>) {
    const INTERESTING: &[u8] = b"\0\x01\x7f\x80\xff-0123456789[]{}\":,eE.\\ ";
    let mut rng = rng_seed | 1;
    let mut next = move || {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let started = std::time::Instant::now();
    let mut corpus: Vec<Vec<u8>> = if seeds.is_empty() { vec![Vec::new()] } else { seeds.to_vec() };
    let mut runs = 0;
    while runs < max_runs && started.elapsed() < budget {
        let pick = (next() as usize) % corpus.len();
        let mut input = corpus[pick].clone();
        for _ in 0..=(next() % 4) {
            let len = input.len();
            let at = if len == 0 { 0 } else { (next() as usize) % len };
            match next() % 7 {
                0 if len > 0 => input[at] ^= 1 << (next() % 8),
                1 if len > 0 => input[at] = INTERESTING[(next() as usize) % INTERESTING.len()],
                2 => input.insert(at, INTERESTING[(next() as usize) % INTERESTING.len()]),
                3 if len > 0 => {
                    let end = (at + 1 + (next() as usize) % 16).min(len);
                    input.drain(at..end);
                }
                4 if len > 0 => {
                    let end = (at + 1 + (next() as usize) % 32).min(len);
                    let copy = input[at..end].to_vec();
                    let to = (next() as usize) % (len + 1);
                    input.splice(to..to, copy);
                }
                5 => {
                    let other = &corpus[(next() as usize) % corpus.len()];
                    if !other.is_empty() {
                        let from = (next() as usize) % other.len();
                        let piece = other[from..].iter().take(1 + (next() as usize) % 64).copied().collect::<Vec<_>>();
                        input.splice(at..at, piece);
                    }
                }
                _ if len > 0 => {
                    let digits = format!("{}", next() as i64);
                    input.splice(at..at, digits.into_bytes());
                }
                _ => input.push(next() as u8),
            }
        }
        runs += 1;
        if std::panic::catch_unwind(|| target(&input)).is_err() {
            return (runs, Some(input));
        }
        // Keep some mutants as new starting points, bounded.
        if corpus.len() < 256 && next() % 8 == 0 {
            corpus.push(input);
        }
    }
    (runs, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parser_survives_a_short_fuzz_run() {
        let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
        let secs = env("TESSERA_FUZZ_SECS").unwrap_or(2);
        // A fixed seed and input cap keep the test command's run reproducible; a long run sets
        // its own seed (so that runs explore different inputs) and lifts the cap.
        let seed = env("TESSERA_FUZZ_SEED").unwrap_or(0x5eed);
        let max_inputs = env("TESSERA_FUZZ_MAX_INPUTS").map_or(5_000_000, |n| usize::try_from(n).unwrap_or(usize::MAX));
        for (name, target) in TARGETS {
            let seeds = seeds(name);
            // The seeds themselves must be handled (and mostly accepted) first.
            for seed in &seeds {
                target(seed);
            }
            let started = std::time::Instant::now();
            let (runs, crash) =
                mutate(*target, &seeds, seed ^ name.len() as u64, std::time::Duration::from_secs(secs), max_inputs);
            println!("{name}: {runs} inputs in {:.0?}, seed {seed:#x}", started.elapsed());
            assert!(
                crash.is_none(),
                "{name} panicked after {runs} inputs on {:?}",
                crash.map(|c| String::from_utf8_lossy(&c).into_owned())
            );
            assert!(runs > 100, "{name}: only {runs} inputs ran");
        }
    }

    /// `fuzz/seed-corpus.sh`: the seeds as files in fuzz/corpus/<target>/ for cargo-fuzz.
    #[test]
    #[ignore = "writes files; run by fuzz/seed-corpus.sh"]
    fn write_seed_corpus() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        for (name, _) in TARGETS {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, seed) in seeds(name).iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), seed).unwrap();
            }
        }
    }
}
