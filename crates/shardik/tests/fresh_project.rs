//! A new user's first hour, replayed: a project outside this workspace made only of the files
//! the guide's testing chapter lists (docs/guide/07-testing.md: its `Cargo.toml`, an
//! event-sourced entity, and tests of it with the test kit and a test cluster), built and
//! tested with cargo as the user would, against this checkout of `shardik`.
//!
//! The listings are taken from the chapter as they are rendered, so what the guide shows is
//! what runs. The test also checks that they need nothing a new user would not know: no port,
//! no timing key, no type from outside `shardik`'s curated surface.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The chapter whose listings make the project.
const CHAPTER: &str = "docs/guide/07-testing.md";

/// What the chapter's test files may not contain: ports, timing keys and internal types.
const NOT_FOR_A_NEW_USER: [&str; 8] = [
    ".bind(",
    "127.0.0.1",
    "shardik::advanced",
    "shardik_runtime",
    "shardik_core",
    "gossip_interval",
    "seed_node_timeout",
    "leader_actions_interval",
];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The chapter's files: each fenced block that follows a `<!-- file: PATH -->` line, as
/// rendered (rustdoc's hidden `# ` lines left out).
fn listed_files(chapter: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut lines = chapter.lines();
    while let Some(line) = lines.next() {
        let Some(path) = line
            .trim()
            .strip_prefix("<!-- file: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().expect("a fenced block after a file marker");
        assert!(
            fence.starts_with("```"),
            "{path}: no block after its marker"
        );
        let mut text = String::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            if fence.starts_with("```rust") && (line == "#" || line.starts_with("# ")) {
                continue;
            }
            text.push_str(line);
            text.push('\n');
        }
        files.push((path.to_string(), text));
    }
    files
}

/// The names of the tests in `text`: the functions under a `#[test]` or `#[tokio::test]`.
fn test_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut marked = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            marked = true;
        } else if marked && let Some(rest) = line.split("fn ").nth(1) {
            names.push(rest.split('(').next().unwrap_or(rest).to_string());
            marked = false;
        }
    }
    names
}

#[test]
fn the_testing_chapter_builds_a_project_that_tests_green() {
    let repository = repository();
    let chapter = std::fs::read_to_string(repository.join(CHAPTER)).expect("the chapter");
    let files = listed_files(&chapter);
    let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Cargo.toml",
            "src/lib.rs",
            "tests/handlers.rs",
            "tests/account.rs",
            "tests/cluster.rs"
        ],
        "the chapter lists the project's files"
    );
    for (path, text) in files.iter().filter(|(p, _)| p.starts_with("tests/")) {
        for word in NOT_FOR_A_NEW_USER {
            assert!(!text.contains(word), "{path} uses {word:?}");
        }
    }

    // Outside the workspace, so that nothing of its configuration applies.
    let project = tempfile::Builder::new()
        .prefix("shardik-first-hour-")
        .tempdir()
        .expect("a directory");
    let shardik = repository.join("crates/shardik").canonicalize().unwrap();
    for (path, text) in &files {
        let text = if path == "Cargo.toml" {
            // The one line a user of a release writes differently: this checkout, not 0.1.
            let released = "shardik = \"0.1\"";
            assert!(
                text.contains(released),
                "the manifest depends on shardik 0.1"
            );
            text.replace(
                released,
                &format!("shardik = {{ path = {:?} }}", shardik.display().to_string()),
            )
        } else {
            text.clone()
        };
        let file = project.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
    }
    // The workspace's lock file pins the same versions of every dependency, so the project
    // builds offline from what the workspace fetched (cargo drops what the project does not
    // use).
    std::fs::copy(
        repository.join("Cargo.lock"),
        project.path().join("Cargo.lock"),
    )
    .unwrap();

    // A target directory that outlives the project, so that a second run rebuilds only `bank`.
    let target = repository.join("target/first-hour");
    let output = Command::new(env!("CARGO"))
        .args(["test", "--offline", "--jobs", "2"])
        .current_dir(project.path())
        .env("CARGO_TARGET_DIR", &target)
        // Line tables only would do for a user; none keeps the extra build small on CI's disk.
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Shown with `--nocapture`: what the user's `cargo test` printed.
    println!("{stdout}");
    assert!(
        output.status.success(),
        "cargo test failed in the guide's project:\n{stdout}\n{stderr}"
    );
    // Every test the chapter shows ran and passed: the same count as it lists, by name.
    let listed: Vec<String> = files
        .iter()
        .filter(|(p, _)| p.starts_with("tests/"))
        .flat_map(|(_, text)| test_names(text))
        .collect();
    assert_eq!(listed.len(), 7, "{listed:?}");
    for name in &listed {
        assert!(
            stdout.contains(&format!("test {name} ... ok")),
            "{name} did not pass:\n{stdout}"
        );
    }
    let failed = stdout.matches(" ... FAILED").count();
    assert_eq!(failed, 0, "{stdout}");
}
