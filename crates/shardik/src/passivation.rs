//! `shardik passivation-sim`: wired to the passivation crate's simulator.

use std::process::ExitCode;

/// Runs the passivation simulator with raw arguments.
pub fn run(args: &[String]) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("passivation-sim is not available in this build yet")
}
