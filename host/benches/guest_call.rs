//! What one inference costs the server in-process, per model, with no HTTP and no client on the
//! cores: the request goes through the one `Infer` entry point (validation, scheduler, instance,
//! statistics) exactly as a front door's does, so the difference between models with the same
//! I/O is the backend's own cost: ONNX Runtime against a Wasm guest's call (the canonical-ABI
//! crossing, its host calls, the guest's code) in each language.
//!
//!   cargo bench --bench guest_call                      (~40 s; prints a table)
//!   MODELS=add_sub_rust,other REPO=/path cargo bench --bench guest_call
//!
//! `REPO` defaults to model-repos/quickstart (its guests are built by scripts/build-guests.sh);
//! `MODELS` to the add_sub family there. Each must take INPUT0 and INPUT1, FP32 [1,16]. A model
//! that fails to load (a guest not built, no ONNX Runtime) is reported and skipped. Rounds are
//! interleaved across models, so a busy machine slows all of them alike; the table gives the
//! median and the min-max of 15 rounds.
//!
//! `CONCURRENCY=N` (default 1) keeps N requests in flight from one task. A model whose dynamic
//! batcher waits (`max_queue_delay_microseconds`, `preferred_batch_size: [ N ]`) then runs them
//! as one batch, and the figures are a request's share of it; without a wait each request runs
//! inline as it comes, as at 1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::CpuSnapshot;
use tessera::{DataType, InferRequest, Server, ServerConfig, Tensor};

const DEFAULT_MODELS: &str = "add_sub,add_sub_rust,add_sub_c,add_sub_js,add_sub_python";
const ROUNDS: usize = 15;
const PER_ROUND: Duration = Duration::from_millis(300);

fn concurrency() -> usize {
    std::env::var("CONCURRENCY").ok().and_then(|c| c.parse().ok()).filter(|&c| c > 0).unwrap_or(1)
}

fn request(model: &str) -> InferRequest {
    let data: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let data = Bytes::from(data);
    let input = |name: &str| Tensor::new(name, DataType::Fp32, vec![1, 16], data.clone()).unwrap();
    InferRequest { model_name: model.into(), inputs: vec![input("INPUT0"), input("INPUT1")], ..Default::default() }
}

fn main() {
    let repo = std::env::var_os("REPO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model-repos/quickstart"));
    let models: Vec<String> = std::env::var("MODELS")
        .unwrap_or_else(|_| DEFAULT_MODELS.into())
        .split(',')
        .filter(|m| !m.is_empty())
        .map(String::from)
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let server = Server::start(ServerConfig::default().repository(&repo)).await.expect("server starts");
        let mut loaded = Vec::new();
        for name in &models {
            match server.load_model(name).await {
                Ok(()) => loaded.push(name.clone()),
                Err(e) => eprintln!("guest_call: skipping {name}: {e}"),
            }
        }
        let infer = server.infer();
        let concurrency = concurrency();
        // Per model: (wall, CPU) per request of each round. Each round runs on a runtime worker,
        // where a front door's handler runs.
        let mut rounds: Vec<Vec<(f64, f64)>> = vec![Vec::new(); loaded.len()];
        for round in 0..=ROUNDS {
            for (i, model) in loaded.iter().enumerate() {
                let infer = Arc::clone(&infer);
                let model = model.clone();
                let (n, wall, cpu) = tokio::spawn(async move {
                    let (started, cpu) = (Instant::now(), CpuSnapshot::now());
                    let mut n = 0u32;
                    while started.elapsed() < PER_ROUND {
                        let batch = (0..concurrency).map(|_| infer.infer(request(&model)));
                        for response in futures_util::future::join_all(batch).await {
                            assert_eq!(response.expect("infers").outputs.len(), 2, "{model}: two outputs");
                            n += 1;
                        }
                    }
                    (n, started.elapsed(), cpu.elapsed_ns())
                })
                .await
                .unwrap();
                if round > 0 {
                    // round 0 warms up (compiled code, instance pools, caches)
                    let us = |ns: f64| ns / 1000.0 / f64::from(n);
                    rounds[i].push((us(wall.as_nanos() as f64), us(cpu as f64)));
                }
            }
        }
        let cell = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            format!("{:.2} ({:.2}-{:.2})", v[v.len() / 2], v[0], v[v.len() - 1])
        };
        let how = format!("{ROUNDS} rounds of {} ms, {concurrency} in flight", PER_ROUND.as_millis());
        println!("| model (in-process, {how}) | wall µs / request | CPU µs / request |");
        println!("|---|---:|---:|");
        for (model, r) in loaded.iter().zip(rounds) {
            let wall = cell(r.iter().map(|x| x.0).collect());
            let cpu = cell(r.iter().map(|x| x.1).collect());
            println!("| {model} | {wall} | {cpu} |");
        }
        server.stop();
    });
}
