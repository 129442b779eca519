//! The library front door, as an embedder (the Python package, a Rust program) uses it: start a
//! server from a config, register models from code, run them in-process and over HTTP, stop.

// A test binary: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tessera::{
    CallableBackend, DataType, ErrorKind, ExecRequest, InferRequest, Listen, RegisteredModel, Server, ServerConfig,
    Tensor,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config(text: &str) -> tessera::ModelConfig {
    tessera::parse_config_pbtxt(text, Path::new("config.pbtxt")).expect("valid config")
}

/// Doubles INPUT0 into OUTPUT0 and counts how many times it ran.
fn doubler(calls: Arc<AtomicUsize>) -> CallableBackend {
    CallableBackend::new(move |batch: Vec<ExecRequest>| {
        calls.fetch_add(1, Ordering::SeqCst);
        tessera_batch(batch)
    })
}

fn tessera_batch(batch: Vec<ExecRequest>) -> Vec<tessera::CoreResult<Vec<Tensor>>> {
    batch
        .into_iter()
        .map(|request| {
            let input = &request.inputs[0];
            let doubled: Vec<u8> = input
                .data
                .chunks_exact(4)
                .flat_map(|c| (f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * 2.0).to_le_bytes())
                .collect();
            Tensor::new("OUTPUT0", DataType::Fp32, input.shape.clone(), Bytes::from(doubled)).map(|t| vec![t])
        })
        .collect()
}

fn floats(values: &[f32]) -> Bytes {
    Bytes::from(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
}

fn request(model: &str, values: &[f32]) -> InferRequest {
    let input = Tensor::new("INPUT0", DataType::Fp32, vec![1, values.len() as i64], floats(values)).unwrap();
    InferRequest { model_name: model.into(), inputs: vec![input], ..Default::default() }
}

const DOUBLER: &str = r#"
name: "double"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
"#;

/// A whole HTTP/1.1 exchange over a fresh connection (`Connection: close`); returns the status
/// line and the body.
async fn http_post(address: std::net::SocketAddr, path: &str, body: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.lines().next().unwrap_or_default().to_string();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_models_serve_in_process_and_over_http_until_unloaded() {
    let config = ServerConfig::default().http(Listen::new("127.0.0.1", 0));
    let server = Server::start(config).await.expect("server starts");
    let calls = Arc::new(AtomicUsize::new(0));
    server.register_model(config_for_test(), Arc::new(doubler(Arc::clone(&calls)))).await.expect("registers");

    // In-process: the same entry point the doors use.
    let infer = server.infer();
    let response = infer.infer(request("double", &[1.0, 2.0, 3.0, 4.0])).await.expect("infers");
    assert_eq!(response.model_version, 1);
    assert_eq!(response.outputs[0].data, floats(&[2.0, 4.0, 6.0, 8.0]));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Validation applies to registered models as to repository ones.
    let wrong = infer.infer(request("double", &[1.0, 2.0])).await.expect_err("wrong shape");
    assert_eq!(wrong.kind, ErrorKind::InvalidArg);
    assert!(wrong.message.contains("unexpected shape for input 'INPUT0'"), "{}", wrong.message);

    // Over HTTP, on the port the handle reports.
    let address = server.http_address().expect("HTTP is on");
    let body = r#"{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[0.5,1,1.5,2]}]}"#;
    let (status, text) = http_post(address, "/v2/models/double/infer", body).await;
    assert!(status.contains("200"), "{status} {text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["outputs"][0]["data"], serde_json::json!([1.0, 2.0, 3.0, 4.0]));

    server.unload_model("double").await.expect("unloads");
    let gone = infer.infer(request("double", &[1.0, 2.0, 3.0, 4.0])).await.expect_err("unloaded");
    assert_eq!(gone.kind, ErrorKind::NotFound, "{}", gone.message);

    server.stop();
    server.wait().await.expect("stops cleanly");
}

fn config_for_test() -> tessera::ModelConfig {
    config(&format!("{DOUBLER}\ndynamic_batching {{ max_queue_delay_microseconds: 100000 }}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_model_gets_the_dynamic_batcher_its_config_asks_for() {
    let server = Server::start(ServerConfig::default()).await.expect("server starts");
    let calls = Arc::new(AtomicUsize::new(0));
    server.register_model(config_for_test(), Arc::new(doubler(Arc::clone(&calls)))).await.expect("registers");
    let infer = server.infer();
    let requests = (0..8).map(|i| {
        let infer = Arc::clone(&infer);
        tokio::spawn(async move { infer.infer(request("double", &[i as f32; 4])).await })
    });
    let requests: Vec<_> = requests.collect();
    for (i, task) in requests.into_iter().enumerate() {
        let response = task.await.unwrap().expect("infers");
        assert_eq!(response.outputs[0].data, floats(&[2.0 * i as f32; 4]), "each caller gets its own rows");
    }
    assert!(calls.load(Ordering::SeqCst) < 8, "8 requests within the queue delay ran as fewer executions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_registered_at_start_come_before_the_repository_and_keep_their_version() {
    // An ensemble in the repository whose step is a registered model loads at startup (with
    // exit_on_error on): registered models are served before the repository loads.
    let repo = std::env::temp_dir().join(format!("tessera-library-test-{}", std::process::id()));
    let ens = repo.join("ens");
    std::fs::create_dir_all(ens.join("1")).unwrap();
    std::fs::write(
        ens.join("config.pbtxt"),
        r#"name: "ens" platform: "ensemble" max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "double" model_version: 3
  input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "Y" } } ] }"#,
    )
    .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let backend = doubler(Arc::clone(&calls)).inline(true);
    let mut config = ServerConfig::default().repository(&repo).control_mode(tessera::ControlMode::None);
    config.registered_models.push(RegisteredModel {
        config: config_for_test(),
        version: 3,
        backend: Arc::new(backend),
    });
    let server = Server::start(config).await.expect("the ensemble loads at startup");
    let infer = server.infer();
    let response = infer.infer(request("double", &[1.0, 2.0, 3.0, 4.0])).await.expect("infers");
    assert_eq!(response.model_version, 3);
    let mut through = request("ens", &[1.0, 2.0, 3.0, 4.0]);
    through.inputs[0].name = "X".into();
    let response = infer.infer(through).await.expect("the ensemble runs its registered step");
    assert_eq!(response.outputs[0].data, floats(&[2.0, 4.0, 6.0, 8.0]));
    let mut wrong = request("double", &[1.0, 2.0, 3.0, 4.0]);
    wrong.model_version = Some(1);
    assert_eq!(infer.infer(wrong).await.expect_err("only version 3").kind, ErrorKind::NotFound);
    let bad = RegisteredModel { config: config_for_test(), version: 0, backend: Arc::new(doubler(Arc::default())) };
    let err = server.register(bad).await.expect_err("version 0");
    assert!(err.message.contains("versions are positive integers"), "{}", err.message);
    server.stop();
    server.wait().await.expect("stops cleanly");
    let _ = std::fs::remove_dir_all(&repo);
}

#[tokio::test]
async fn a_bad_config_is_refused_with_the_reason() {
    let server = Server::start(ServerConfig::default()).await.expect("server starts");
    let mut bad = config(DOUBLER);
    bad.input[0].dims = vec![0];
    let err = server.register_model(bad, Arc::new(doubler(Arc::default()))).await.expect_err("invalid dims");
    assert_eq!(err.kind, ErrorKind::InvalidArg);
    assert!(err.message.contains("INPUT0"), "{}", err.message);
    // A registered model has no directory: a config naming files in one is refused up front.
    let mut labelled = config(DOUBLER);
    labelled.output[0].label_filename = "labels.txt".into();
    let err = server.register_model(labelled, Arc::new(doubler(Arc::default()))).await.expect_err("names a file");
    assert!(err.message.contains("cannot name files (label_filename)"), "{}", err.message);
}

/// `tessera serve` compiles components in a process of its own (`tessera compile-component`,
/// this package's binary): what it compiles loads in the server, through the compile cache or
/// handed back on stdout (no cache directory, or one it cannot write), and a component that is
/// not one fails its load with the reason, as an in-process compile would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_built_by_the_compiler_process_load_and_bad_ones_fail_with_the_reason() {
    let root = std::env::temp_dir().join(format!("tessera-library-compiler-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let repo = root.join("repo");
    // The smallest valid component (it implements nothing), and bytes that are not one.
    for (name, wasm) in [("empty", &b"\0asm\x0d\x00\x01\x00"[..]), ("garbage", &b"garbage"[..])] {
        std::fs::create_dir_all(repo.join(name).join("1")).unwrap();
        std::fs::write(repo.join(name).join("1").join("model.wasm"), wasm).unwrap();
        std::fs::write(
            repo.join(name).join("config.pbtxt"),
            format!(
                r#"name: "{name}" backend: "wasm" max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]"#
            ),
        )
        .unwrap();
    }
    // The binary, through a script that leaves a mark for each compile it runs.
    let compiler = root.join("compiler");
    let marks = root.join("marks");
    std::fs::write(
        &compiler,
        format!("#!/bin/sh\necho >>{}\nexec {} \"$@\"\n", marks.display(), env!("CARGO_BIN_EXE_tessera")),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A thread of this binary forking while the script was open for writing keeps it open until
    // its exec, and running it meanwhile fails with ETXTBSY: run it once first, then forget the
    // mark it left.
    while let Err(e) = std::process::Command::new(&compiler).arg("--version").output() {
        assert_eq!(e.kind(), std::io::ErrorKind::ExecutableFileBusy, "{e}");
        std::thread::yield_now();
    }
    std::fs::remove_file(&marks).unwrap();
    let cache = root.join("cache");
    // A cache directory that cannot be made (under a file, which stops root too): the compiler
    // hands the artifact back on stdout, as with none, and the server still serves.
    let unwritable = compiler.join("cache");
    for cache_dir in [None, Some(cache.clone()), Some(unwritable)] {
        let mut config = ServerConfig::default().repository(&repo).control_mode(tessera::ControlMode::Explicit);
        config.wasm = tessera::WasmOptions {
            cache_dir: cache_dir.clone(),
            compiler: tessera::Compiler::Process(tessera::CompilerProcess::new(&compiler)),
            ..tessera::WasmOptions::default()
        };
        let server = Server::start(config).await.expect("server starts");
        // Compiled, loaded into the server's engine, then found not to implement the world.
        let err = server.load_model("empty").await.expect_err("implements nothing");
        assert!(err.message.contains("does not implement the tessera:model world"), "{cache_dir:?}: {}", err.message);
        let err = server.load_model("garbage").await.expect_err("not a component");
        assert!(
            err.message.contains("is not a valid WebAssembly component: failed to parse WebAssembly module"),
            "{cache_dir:?}: {}",
            err.message
        );
        server.stop();
        server.wait().await.expect("stops cleanly");
    }
    let compiles = std::fs::read_to_string(&marks).unwrap_or_default().lines().count();
    assert_eq!(compiles, 6, "every compile ran in the compiler process");
    // A memory cap too small for any compile: that load fails and says which flag to raise.
    let mut config = ServerConfig::default().repository(&repo).control_mode(tessera::ControlMode::Explicit);
    let capped = tessera::CompilerProcess {
        // Room for the binary's own writable segments (1.6 MiB in a debug build), not for its
        // allocator's first segment.
        memory_limit: Some(4 << 20),
        ..tessera::CompilerProcess::new(env!("CARGO_BIN_EXE_tessera"))
    };
    // No cache: an entry for `empty` in the user's default cache directory would skip the compile.
    config.wasm = tessera::WasmOptions {
        cache_dir: None,
        compiler: tessera::Compiler::Process(capped),
        ..tessera::WasmOptions::default()
    };
    let server = Server::start(config).await.expect("server starts");
    let err = server.load_model("empty").await.expect_err("no memory to compile in");
    assert!(err.message.contains("--wasm-compile-memory-mib is 4 MiB"), "{}", err.message);
    server.stop();
    server.wait().await.expect("stops cleanly");
    let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries.len(), 1, "the compiler process wrote the one valid component's cache entry: {entries:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// A backend this build left out, as TorchScript is without `--features torch`.
fn left_out() -> tessera::UnavailableBackend {
    tessera::UnavailableBackend {
        kind: tessera::BackendKind {
            name: "left_out",
            platforms: &["left_out_platform"],
            default_model_filename: "model.bin",
        },
        reason: "this binary was built without the left_out backend".into(),
    }
}

fn write_model(repo: &Path, name: &str, config: &str) {
    std::fs::create_dir_all(repo.join(name).join("1")).unwrap();
    std::fs::write(repo.join(name).join("config.pbtxt"), config).unwrap();
}

/// `cargo build --release` leaves TorchScript out, and the quickstart has TorchScript models: a
/// server with `exit_on_error` serves the rest, while those models (and ensembles over them)
/// stay unavailable with the reason. A model that is really broken still stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_of_a_backend_left_out_of_the_build_do_not_stop_the_server() {
    let repo = std::env::temp_dir().join(format!("tessera-library-left-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repo);
    let io = r#"max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#;
    write_model(&repo, "needs_it", &format!("name: \"needs_it\" backend: \"left_out\" {io}"));
    write_model(
        &repo,
        "pipeline",
        &format!(
            r#"name: "pipeline" platform: "ensemble" {io}
ensemble_scheduling {{ step [ {{ model_name: "needs_it" model_version: -1
  input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }} }} ] }}"#
        ),
    );
    let start = |repo: &Path| {
        let mut config = ServerConfig::default()
            .repository(repo)
            .control_mode(tessera::ControlMode::None)
            .backend(Arc::new(left_out()))
            .http(Listen::new("127.0.0.1", 0));
        config.registered_models.push(RegisteredModel {
            config: config_for_test(),
            version: 1,
            backend: Arc::new(doubler(Arc::default())),
        });
        Server::start(config)
    };
    let server = start(&repo).await.expect("starts with exit_on_error: the build, not the repository, lacks them");
    let infer = server.infer();
    infer.infer(request("double", &[1.0, 2.0, 3.0, 4.0])).await.expect("the rest is served");
    let (status, text) = http_post(server.http_address().expect("HTTP is on"), "/v2/repository/index", "{}").await;
    assert!(status.contains("200"), "{status} {text}");
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    for model in ["needs_it", "pipeline"] {
        let entry = index.as_array().unwrap().iter().find(|e| e["name"] == model).expect("in the index");
        assert_eq!(entry["state"], "UNAVAILABLE", "{entry}");
        let reason = entry["reason"].as_str().unwrap_or_default();
        let expected = if model == "needs_it" { "built without the left_out backend" } else { "needs_it" };
        assert!(reason.contains(expected), "{model}: {reason}");
        infer.infer(request(model, &[1.0, 2.0, 3.0, 4.0])).await.expect_err("not served");
    }
    server.stop();
    server.wait().await.expect("stops cleanly");

    write_model(&repo, "broken", "name: \"broken\" backend: \"onnxruntime\" input [ { name: \"X\" } ]");
    match start(&repo).await {
        Err(tessera::StartError::ModelLoad(failures)) => {
            let names: Vec<&str> = failures.iter().map(|(name, _)| name.as_str()).collect();
            assert_eq!(names, ["broken"], "only the broken model counts");
        }
        Err(e) => panic!("expected the broken model to stop the start: {e}"),
        Ok(_) => panic!("a broken model stops a server started with exit_on_error"),
    }
    let _ = std::fs::remove_dir_all(&repo);
}
