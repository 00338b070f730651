//! Finds the traces bundled with this crate (`traces/`, see the README there).

use std::path::PathBuf;

/// Path of a bundled trace, e.g. `trace("ps")` for `traces/ps.trace.gz`.
///
/// A missing file fails the test that needs it: the traces ship in the repository, so a missing
/// one is a broken checkout, not an optional extra to skip.
pub fn trace(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(format!("{name}.trace.gz"));
    assert!(
        path.is_file(),
        "bundled trace {} is missing: it ships in the repository \
         (crates/shardik-passivation-sim/traces, see the README there); restore it with \
         `git checkout -- crates/shardik-passivation-sim/traces`",
        path.display()
    );
    path
}
