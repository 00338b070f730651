//! Compiles the wire schemas with protox (pure Rust, no `protoc` needed) and prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(
        ["membership.proto", "transport.proto", "sharding.proto"],
        ["proto"],
    )?;
    let mut config = prost_build::Config::new();
    config.btree_map(["."]);
    // Sharding payloads become `Bytes`: decoding from a `Bytes` buffer (a received frame)
    // then slices the payload out of it instead of copying, and encoding clones a refcount.
    config.bytes([".shardik.sharding.v1"]);
    config.compile_fds(fds)?;
    Ok(())
}
