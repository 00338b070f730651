//! `shardik passivation-sim`: the passivation policies' trace simulator (`shardik-passivation-sim`).

use std::process::ExitCode;

use shardik_passivation_sim::SimError;

/// Runs the passivation simulator with the arguments after `passivation-sim`.
pub fn run(args: &[String]) -> anyhow::Result<ExitCode> {
    match shardik_passivation_sim::run_from_args(args) {
        Ok(output) => {
            print!("{output}");
            Ok(ExitCode::SUCCESS)
        }
        Err(SimError::Usage(text)) if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}
