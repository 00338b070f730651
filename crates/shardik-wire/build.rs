//! Compiles the wire schemas with protox (pure Rust, no `protoc` needed) and prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["membership.proto", "transport.proto"], ["proto"])?;
    let mut config = prost_build::Config::new();
    config.btree_map(["."]);
    config.compile_fds(fds)?;
    Ok(())
}
