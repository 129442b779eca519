//! Compiles the protobuf schemas with protox (pure Rust, no protoc download): Triton's
//! `model_config.proto` (config.pbtxt), the KServe v2 / Triton gRPC service and grpc.health.v1.
//! prost-build generates the messages, tonic-prost-build the gRPC server traits. The encoded file
//! descriptor set is kept so the text-format parser (prost-reflect) sees the same schema.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["model_config.proto", "grpc_service.proto", "health.proto"], ["proto"])?;
    let bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(out_dir.join("model_config_descriptor.bin"), bytes)?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .btree_map(".")
        // Tensor bytes stay reference-counted from the socket to the backend and back.
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .compile_fds(fds)?;
    Ok(())
}
