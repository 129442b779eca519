//! Compiles Triton's protobuf schemas with protox (pure Rust, no protoc download) and prost-build.
//! The encoded file descriptor set is kept so the text-format parser (prost-reflect) sees the same schema.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["model_config.proto"], ["proto"])?;
    let bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(out_dir.join("model_config_descriptor.bin"), bytes)?;
    prost_build::Config::new()
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
