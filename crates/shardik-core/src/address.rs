//! Node identity: where a node listens, plus a random incarnation id.
//!
//! Below membership, leases and sharding, which all name nodes by it (a lease's owner is a
//! node's incarnation); membership re-exports it as `membership::address`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where a node listens: host and port. Ordered by host string, then port (as the reference).
#[derive(Clone, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Address {
    /// Host name or IP literal, as configured (compared as a string). Shared, because every
    /// gossip state carries every member's address and states are copied often.
    pub host: Arc<str>,
    /// TCP port.
    pub port: u16,
}

impl Address {
    /// An address from its parts.
    pub fn new(host: impl Into<Arc<str>>, port: u16) -> Self {
        Address {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a `HOST:PORT` string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressParseError {
    /// No `:` separating host and port.
    #[error("`{0}` is not HOST:PORT")]
    MissingPort(String),
    /// The port is not a number in 0..=65535.
    #[error("`{0}` has an invalid port (expected 0..=65535)")]
    BadPort(String),
    /// The host part is empty.
    #[error("`{0}` has an empty host")]
    EmptyHost(String),
}

impl FromStr for Address {
    type Err = AddressParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| AddressParseError::MissingPort(s.to_string()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(AddressParseError::EmptyHost(s.to_string()));
        }
        let port = port
            .parse()
            .map_err(|_| AddressParseError::BadPort(s.to_string()))?;
        Ok(Address::new(host, port))
    }
}

/// Equal host strings and ports, as the derived equality would say, but cheapest first: the
/// port, then whether the hosts are the same shared string (senders compare a message's
/// destination with the last one for every message they batch).
impl PartialEq for Address {
    fn eq(&self, other: &Address) -> bool {
        self.port == other.port && (Arc::ptr_eq(&self.host, &other.host) || self.host == other.host)
    }
}

/// Hashes what equality compares (the fields, as a derived hash would).
impl std::hash::Hash for Address {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.host.hash(state);
        self.port.hash(state);
    }
}

/// One incarnation of a node: its address plus a random 64-bit uid drawn at start.
///
/// A node restarted on the same host:port gets a new uid and is a different member.
/// Ordered by address, then uid (the reference's member ordering, used for leader choice).
#[derive(Clone, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct UniqueAddress {
    /// Where the node listens.
    pub address: Address,
    /// Random id of this incarnation.
    pub uid: u64,
}

/// Equal addresses and uids, as the derived equality would say, but the random uid first:
/// it tells two different nodes apart at once.
impl PartialEq for UniqueAddress {
    fn eq(&self, other: &UniqueAddress) -> bool {
        self.uid == other.uid && self.address == other.address
    }
}

/// Hashes what equality compares (the fields, as a derived hash would).
impl std::hash::Hash for UniqueAddress {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.address.hash(state);
        self.uid.hash(state);
    }
}

impl UniqueAddress {
    /// A unique address from its parts.
    pub fn new(address: Address, uid: u64) -> Self {
        UniqueAddress { address, uid }
    }

    /// An equal address that shares nothing with this one: its host is a string of its own.
    /// For a thread that clones the address at a high rate: clones of one shared host all
    /// count their references in the same place, and threads on other cores cloning and
    /// dropping them move that count between the cores' caches.
    pub fn deep_copy(&self) -> Self {
        UniqueAddress {
            address: Address::new(Arc::<str>::from(&*self.address.host), self.address.port),
            uid: self.uid,
        }
    }

    /// The 32-bit hash the heartbeat ring sorts by: the uid's halves xor-ed, as Java's
    /// `Long.hashCode`, so that ring neighbours are not co-located by address.
    pub fn ring_hash(&self) -> i32 {
        (self.uid ^ (self.uid >> 32)) as u32 as i32
    }
}

impl fmt::Display for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.address, self.uid)
    }
}

impl fmt::Debug for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests;
