//! Compile `proto/` at build time with protox (pure Rust: no `protoc` download) into prost
//! messages and a tonic service, and keep the descriptor set for the text format.

use std::path::PathBuf;

fn main() {
    let files = [
        "proto/p4/v1/p4runtime.proto",
        "proto/p4/config/v1/p4info.proto",
        "proto/p4/config/v1/p4types.proto",
        "proto/p4/v1/p4data.proto",
        "proto/google/rpc/status.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = match protox::compile(files, ["proto"]) {
        Ok(f) => f,
        Err(e) => panic!("protox: {e:?}"),
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(out.join("descriptor.bin"), bytes).expect("write descriptor set");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)
        .expect("tonic-prost-build");
}
