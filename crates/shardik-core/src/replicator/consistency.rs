//! How many replicas a read or a write must reach, in Akka's vocabulary, and the count each
//! level requires of a cluster of a given size.

/// How many replicas an update (or a deletion) must reach before it succeeds. It is applied
/// locally at once in every case; a write that cannot reach its count in time fails with
/// [`ConsistencyNotReached`](super::ConsistencyNotReached) and still spreads by gossip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteConsistency {
    /// This replica only.
    Local,
    /// `n` replicas, this one included; fails at once if fewer exist.
    To(usize),
    /// A majority of the replicas, and at least `min_cap` of them (as many as exist, if
    /// fewer): a floor for small clusters, where a majority of a changing membership may not
    /// overlap the majority that wrote.
    Majority {
        /// The least number of replicas to reach.
        min_cap: usize,
    },
    /// Every replica.
    All,
}

/// How many replicas a read must hear from (this one included); what they answer is merged,
/// and the merge is written back to this replica before the read returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadConsistency {
    /// This replica only.
    Local,
    /// `n` replicas, this one included; fails at once if fewer exist.
    From(usize),
    /// A majority of the replicas, and at least `min_cap` of them (see
    /// [`WriteConsistency::Majority`]).
    Majority {
        /// The least number of replicas to hear from.
        min_cap: usize,
    },
    /// Every replica.
    All,
}

/// The level of a read or a write, whichever it is: they count alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    Local,
    Exactly(usize),
    Majority { min_cap: usize },
    All,
}

impl From<WriteConsistency> for Level {
    fn from(write: WriteConsistency) -> Self {
        match write {
            WriteConsistency::Local => Level::Local,
            WriteConsistency::To(n) => Level::Exactly(n),
            WriteConsistency::Majority { min_cap } => Level::Majority { min_cap },
            WriteConsistency::All => Level::All,
        }
    }
}

impl From<ReadConsistency> for Level {
    fn from(read: ReadConsistency) -> Self {
        match read {
            ReadConsistency::Local => Level::Local,
            ReadConsistency::From(n) => Level::Exactly(n),
            ReadConsistency::Majority { min_cap } => Level::Majority { min_cap },
            ReadConsistency::All => Level::All,
        }
    }
}

impl Level {
    /// The replicas to reach, this one included, in a cluster of `replicas` (this one
    /// included); `None` if the level asks for more than exist (`To(n)`, `From(n)` only: the
    /// others shrink to what exists).
    pub(super) fn required(self, replicas: usize) -> Option<usize> {
        match self {
            Level::Local => Some(1),
            Level::Exactly(n) => (n <= replicas).then_some(n.max(1)),
            Level::Majority { min_cap } => Some(replicas.min((replicas / 2 + 1).max(min_cap))),
            Level::All => Some(replicas),
        }
    }
}
