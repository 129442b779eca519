//! What an ensemble step costs the server, in-process (no HTTP, no client sharing the cores):
//! the same request to a registered echo model directly, and through ensembles of 1 and 4 echo
//! steps. Per-step overhead = (ensemble time - steps x direct time) / steps.
//!
//!   cargo bench --bench ensemble_overhead            (prints a table; ~20 s)
//!
//! The echo model runs on the server's instance pool like any model, so the step's own cost
//! (validation, scheduling, statistics) is in "direct"; the difference is the ensemble's own work.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::CpuSnapshot;
use tessera::{CallableBackend, DataType, ExecRequest, InferRequest, Server, ServerConfig, Tensor};

const ECHO: &str = r#"
name: "echo"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] },
        { name: "INPUT1", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] },
         { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 16 ] } ]
"#;

fn chain(name: &str, steps: usize) -> String {
    let mut parts = Vec::new();
    let (mut a, mut b) = ("INPUT0".to_string(), "INPUT1".to_string());
    for i in 0..steps {
        let (x, y) =
            if i + 1 == steps { ("OUTPUT0".into(), "OUTPUT1".into()) } else { (format!("s{i}"), format!("d{i}")) };
        parts.push(format!(
            r#"{{ model_name: "echo" model_version: -1 input_map {{ key: "INPUT0" value: "{a}" }}
               input_map {{ key: "INPUT1" value: "{b}" }} output_map {{ key: "OUTPUT0" value: "{x}" }}
               output_map {{ key: "OUTPUT1" value: "{y}" }} }}"#
        ));
        (a, b) = (x, y);
    }
    format!(
        r#"name: "{name}" platform: "ensemble" max_batch_size: 8
        input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] }},
                {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 16 ] }} ]
        output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] }},
                 {{ name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 16 ] }} ]
        ensemble_scheduling {{ step [ {} ] }}"#,
        parts.join(", ")
    )
}

/// Wall and CPU time per request of: echo direct, the 1-step ensemble, the 4-step ensemble.
type Row = ((Duration, Duration), (Duration, Duration), (Duration, Duration));

fn request(model: &str) -> InferRequest {
    let data = Bytes::from(vec![0u8; 64]);
    let input = |name: &str| Tensor::new(name, DataType::Fp32, vec![1, 16], data.clone()).unwrap();
    InferRequest { model_name: model.into(), inputs: vec![input("INPUT0"), input("INPUT1")], ..Default::default() }
}

fn main() {
    let repo = tempfile_dir();
    for (name, steps) in [("ens_x1", 1), ("ens_x4", 4)] {
        std::fs::create_dir_all(repo.join(name).join("1")).unwrap();
        std::fs::write(repo.join(name).join("config.pbtxt"), chain(name, steps)).unwrap();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let server = Server::start(ServerConfig::default().repository(&repo)).await.expect("server starts");
        let echo = CallableBackend::new(|batch: Vec<ExecRequest>| {
            batch
                .into_iter()
                .map(|r| {
                    Ok(r.inputs.into_iter().map(|t| Tensor { name: t.name.replace("INPUT", "OUTPUT"), ..t }).collect())
                })
                .collect()
        });
        let config = tessera::parse_config_pbtxt(ECHO, Path::new("config.pbtxt")).unwrap();
        server.register_model(config, Arc::new(echo)).await.expect("echo registers");
        for name in ["ens_x1", "ens_x4"] {
            server.load_model(name).await.expect("ensemble loads");
        }
        let infer = server.infer();
        let time = |model: &'static str, n: u32| {
            let infer = Arc::clone(&infer);
            async move {
                let (started, cpu) = (Instant::now(), CpuSnapshot::now());
                for _ in 0..n {
                    infer.infer(request(model)).await.expect("infers");
                }
                (started.elapsed() / n, Duration::from_nanos(cpu.elapsed_ns() / u64::from(n)))
            }
        };
        time("ens_x4", 2000).await; // warm-up (and the ensembles are ready once echo is)
        let mut rows: Vec<Row> = Vec::new();
        for _ in 0..7 {
            rows.push((time("echo", 5000).await, time("ens_x1", 5000).await, time("ens_x4", 2000).await));
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[0], v[v.len() - 1])
        };
        let us = |d: Duration| d.as_nanos() as f64 / 1000.0;
        let cell = |v: Vec<f64>| {
            let (m, lo, hi) = median(v);
            format!("{m:.2} ({lo:.2}-{hi:.2})")
        };
        type Pick = fn(&Row) -> (Duration, Duration);
        let paths: [(&str, Pick, f64); 3] = [
            ("echo, direct", |r| r.0, 0.0),
            ("ensemble of 1 echo step", |r| r.1, 1.0),
            ("ensemble of 4 echo steps", |r| r.2, 4.0),
        ];
        println!(
            "| path (in-process, 7 rounds) | wall µs / request | ensemble wall µs / step | CPU µs / request \
             | ensemble CPU µs / step |"
        );
        println!("|---|---:|---:|---:|---:|");
        for (label, pick, steps) in paths {
            let wall = cell(rows.iter().map(|r| us(pick(r).0)).collect());
            let cpu = cell(rows.iter().map(|r| us(pick(r).1)).collect());
            let (step_wall, step_cpu) = if steps > 0.0 {
                (
                    cell(rows.iter().map(|r| (us(pick(r).0) - steps * us(r.0.0)) / steps).collect()),
                    cell(rows.iter().map(|r| (us(pick(r).1) - steps * us(r.0.1)) / steps).collect()),
                )
            } else {
                (String::new(), String::new())
            };
            println!("| {label} | {wall} | {step_wall} | {cpu} | {step_cpu} |");
        }
        server.stop();
    });
    let _ = std::fs::remove_dir_all(&repo);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-bench-ensemble-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
