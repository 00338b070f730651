//! The protobuf code in `src/generated/` is generated here, at development time, and checked
//! in: users' builds then need neither prost-build nor protox (nor their dependency trees),
//! which was a large share of a small application's first build (docs/PERFORMANCE.md).
//!
//! This test regenerates it from `proto/` and fails if the checked-in files differ, so a
//! schema change cannot ship with stale code. After editing a `.proto` file run
//!
//! ```sh
//! SHARDIK_REGENERATE=1 cargo test -p shardik-wire --test generated_code
//! ```
//!
//! which rewrites the files, then review and commit them.

use std::path::{Path, PathBuf};

const SCHEMAS: [&str; 3] = ["membership.proto", "transport.proto", "sharding.proto"];

fn generate(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(SCHEMAS, [root.join("proto")])?;
    let mut config = prost_build::Config::new();
    config.out_dir(out);
    config.btree_map(["."]);
    // Sharding payloads become `Bytes`: decoding from a `Bytes` buffer (a received frame)
    // then slices the payload out of it instead of copying, and encoding clones a refcount.
    config.bytes([".shardik.sharding.v1"]);
    config.compile_fds(fds)?;
    Ok(())
}

fn checked_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated")
}

#[test]
fn checked_in_code_matches_the_schemas() {
    let fresh = tempfile::tempdir().unwrap();
    generate(fresh.path()).expect("the schemas compile");
    let regenerate = std::env::var_os("SHARDIK_REGENERATE").is_some();
    let mut stale = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(fresh.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names.len(),
        SCHEMAS.len(),
        "one generated file per schema: {names:?}"
    );
    for name in names {
        let generated = std::fs::read_to_string(fresh.path().join(&name)).unwrap();
        let target = checked_in().join(&name);
        if std::fs::read_to_string(&target).ok().as_deref() != Some(generated.as_str()) {
            if regenerate {
                std::fs::write(&target, &generated).unwrap();
            } else {
                stale.push(target.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "generated code out of date with proto/: {stale:?}; run \
         `SHARDIK_REGENERATE=1 cargo test -p shardik-wire --test generated_code` and commit"
    );
}
