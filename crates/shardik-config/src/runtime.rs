//! `runtime.*`: the async runtime a node runs on.

use serde::Deserialize;

use crate::error::ConfigError;
use crate::validate::invalid;

/// The most worker threads a node may be given: far above any machine it runs on, low enough
/// that a typo (an extra zero or two) is refused rather than spawning thousands of threads.
pub const MAX_WORKER_THREADS: usize = 1024;

/// `runtime.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RuntimeSettings {
    /// `worker-threads`: threads of the node's async runtime; 0 means one per core this
    /// process may use ([`RuntimeSettings::worker_thread_count`]).
    pub worker_threads: usize,
}

impl RuntimeSettings {
    /// The worker threads to start: `worker-threads`, or, when it is 0, the cores this process
    /// may use (`std::thread::available_parallelism`, which counts the CPU set and cgroup
    /// quota a container is given), at least one.
    pub fn worker_thread_count(&self) -> usize {
        if self.worker_threads > 0 {
            return self.worker_threads;
        }
        std::thread::available_parallelism().map_or(1, usize::from)
    }

    /// The checks of `runtime.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.worker_threads > MAX_WORKER_THREADS {
            return Err(invalid(
                "runtime.worker-threads",
                self.worker_threads,
                &format!("0 (one per core) or a count up to {MAX_WORKER_THREADS}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_one_per_core_and_a_count_is_taken_as_given() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let auto = RuntimeSettings { worker_threads: 0 };
        assert_eq!(auto.worker_thread_count(), cores);
        let three = RuntimeSettings { worker_threads: 3 };
        assert_eq!(three.worker_thread_count(), 3);
        assert!(three.validate().is_ok());
        let typo = RuntimeSettings {
            worker_threads: 40_000,
        };
        assert!(typo.validate().is_err());
    }
}
