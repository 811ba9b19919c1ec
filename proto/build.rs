//! Compiles the control-plane proto with `protox`, a pure-Rust protobuf
//! compiler, so a fresh clone builds with cargo alone (no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/loadfleet/v1/control.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
