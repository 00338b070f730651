//! Join compatibility: which settings a joining node must share with the cluster, and the
//! verdict the member that accepts a join gives on them (the reference's
//! `JoinConfigCompatChecker` and `configuration-compatibility-check`).
//!
//! Every `InitJoin` and every `Join` carries the joiner's [`JoinConfig`]: its cluster name and
//! the values of every key its checkers name. The member that answers computes the
//! differences from its own configuration with its own checkers ([`JoinCompat::differences`]);
//! the joiner never chooses its verdict. With `enforce-on-join` on (the default) any
//! difference refuses the joiner; off, the member welcomes it and reports the differences.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::messages::JoinConfig;

/// A check of a joiner's configuration against the accepting member's (the reference's
/// `JoinConfigCompatChecker`). Add your own with `NodeBuilder::join_config_compat_checker` in
/// `shardik-runtime`; [`MustMatch`] covers the common case of a value that must be equal.
///
/// A checker runs on the member that accepts a join, over the values the joiner sent. A
/// joiner of an older application version may not know a key yet: decide in
/// [`check`](Self::check) whether a missing key is acceptable (the reference's receptionist
/// checker accepts it, for rolling updates that introduce the key).
pub trait JoinConfigCompatChecker: Send + Sync + fmt::Debug {
    /// The keys this checker reads, with this node's values. They travel with every join this
    /// node sends, and are the `member` values [`check`](Self::check) sees on this node when
    /// it accepts a join (the reference's `requiredKeys`).
    fn required_keys(&self) -> BTreeMap<String, String>;

    /// The differences between the joiner's values (`joiner`: every key the joiner sent, of
    /// all its checkers) and this member's (`member`: every key of all of this node's
    /// checkers). Each difference is one sentence naming the key and both values; empty when
    /// the joiner may join.
    fn check(
        &self,
        joiner: &BTreeMap<String, String>,
        member: &BTreeMap<String, String>,
    ) -> Vec<String>;
}

/// What [`MustMatch`] does when the joiner did not send the key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WhenMissing {
    /// The joiner is incompatible (the key has always been sent, so it must be there).
    Refuse,
    /// The joiner is compatible as far as this key goes: a node of an older version that does
    /// not know the key yet may join, so that a rolling update can introduce it.
    Accept,
}

/// A key whose value the joiner must share with the member (the reference's
/// `JoinConfigCompatChecker.fullMatch` for one key).
///
/// ```
/// use shardik_core::membership::compat::{JoinConfigCompatChecker, MustMatch, WhenMissing};
/// let check = MustMatch::new("app.schema-version", "7", WhenMissing::Refuse);
/// let mine = check.required_keys();
/// let joiner = [("app.schema-version".to_string(), "6".to_string())].into();
/// assert_eq!(
///     check.check(&joiner, &mine),
///     vec!["`app.schema-version` differs: the cluster has `7`, the joiner has `6`".to_string()]
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MustMatch {
    key: String,
    value: String,
    when_missing: WhenMissing,
    note: Option<String>,
}

impl MustMatch {
    /// `key` must have `value` (this node's) on every joiner.
    pub fn new(
        key: impl Into<String>,
        value: impl Into<String>,
        when_missing: WhenMissing,
    ) -> Self {
        MustMatch {
            key: key.into(),
            value: value.into(),
            when_missing,
            note: None,
        }
    }

    /// Adds a sentence to the difference, saying what it means or how to fix it.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The key checked.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl JoinConfigCompatChecker for MustMatch {
    fn required_keys(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(self.key.clone(), self.value.clone())])
    }

    fn check(
        &self,
        joiner: &BTreeMap<String, String>,
        member: &BTreeMap<String, String>,
    ) -> Vec<String> {
        // The member's own value, as this node's checkers put it in its configuration.
        let ours = member.get(&self.key).unwrap_or(&self.value);
        let difference = match joiner.get(&self.key) {
            Some(theirs) if theirs == ours => return Vec::new(),
            Some(theirs) => format!(
                "`{}` differs: the cluster has `{ours}`, the joiner has `{theirs}`",
                self.key
            ),
            None if self.when_missing == WhenMissing::Accept => return Vec::new(),
            None => format!(
                "`{}` differs: the cluster has `{ours}`, the joiner sent no value (an older \
                 version, or a node without this check)",
                self.key
            ),
        };
        vec![match &self.note {
            Some(note) => format!("{difference} ({note})"),
            None => difference,
        }]
    }
}

/// The join-compatibility settings of a node: its checkers and whether a difference refuses
/// the joiner (`cluster.configuration-compatibility-check.enforce-on-join`).
#[derive(Clone)]
pub struct JoinCompat {
    /// The checks, in the order their differences are reported.
    pub checkers: Vec<Arc<dyn JoinConfigCompatChecker>>,
    /// `enforce-on-join`: refuse an incompatible joiner (on), or welcome it and report the
    /// differences (off).
    pub enforce_on_join: bool,
}

impl JoinCompat {
    /// Enforced checks.
    pub fn new(checkers: Vec<Arc<dyn JoinConfigCompatChecker>>) -> Self {
        JoinCompat {
            checkers,
            enforce_on_join: true,
        }
    }

    /// Adds a checker after the others.
    pub fn with(mut self, checker: Arc<dyn JoinConfigCompatChecker>) -> Self {
        self.checkers.push(checker);
        self
    }

    /// Every key of every checker with this node's value: what this node sends when it
    /// joins. A key named by two checkers keeps the first one's value.
    pub fn values(&self) -> BTreeMap<String, String> {
        let mut values = BTreeMap::new();
        for checker in &self.checkers {
            for (k, v) in checker.required_keys() {
                values.entry(k).or_insert(v);
            }
        }
        values
    }

    /// Why `joiner` cannot join a cluster configured as `own` (this node's join
    /// configuration): one sentence per difference, each naming the key and both values;
    /// empty when it can. Different cluster names are always a difference.
    pub fn differences(&self, own: &JoinConfig, joiner: &JoinConfig) -> Vec<String> {
        let mut out = Vec::new();
        if own.cluster_name != joiner.cluster_name {
            out.push(format!(
                "`cluster.name` differs: the cluster has `{}`, the joiner has `{}`",
                own.cluster_name, joiner.cluster_name
            ));
        }
        for checker in &self.checkers {
            out.extend(checker.check(&joiner.must_match, &own.must_match));
        }
        out
    }
}

impl Default for JoinCompat {
    /// No checker, enforced: only the cluster name must match.
    fn default() -> Self {
        JoinCompat::new(Vec::new())
    }
}

impl fmt::Debug for JoinCompat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinCompat")
            .field("checkers", &self.checkers)
            .field("enforce_on_join", &self.enforce_on_join)
            .finish()
    }
}

impl PartialEq for JoinCompat {
    /// Equal when they enforce alike and hold the very same checkers (checkers are compared
    /// by identity and by the keys and values they send, not by what their code does).
    fn eq(&self, other: &Self) -> bool {
        self.enforce_on_join == other.enforce_on_join
            && self.checkers.len() == other.checkers.len()
            && self
                .checkers
                .iter()
                .zip(&other.checkers)
                .all(|(a, b)| Arc::ptr_eq(a, b) || a.required_keys() == b.required_keys())
    }
}

#[cfg(test)]
mod tests;
