//! Whether the node a handshake wants to reach is this one.
//!
//! A node's identity (its canonical address, `cluster.canonical-address`) is not the only way
//! peers reach it: it may listen on `0.0.0.0`, sit behind NAT, or be named by an alias (a seed
//! list naming `seeds.svc:2552` where the seed is `pod-0.svc:2552`). A handshake names this
//! node if its `to` is
//! - the canonical address or the bind address as configured, or
//! - on the canonical or the bound port, and its host is the canonical or bind host, an IP
//!   literal that is the accepted socket's local address (or a literal canonical or bind
//!   host), or a name that resolves to one of those.
//!
//! A different node listening elsewhere is still refused: its address has another port, or a
//! host that is not an address of this socket. The check only catches mistakes (stale
//! configuration, a port reused by another node): a peer may leave `to` out altogether, so
//! widening it gives an attacker nothing it did not have. What an attacker could do with it is
//! make this node look names up; that is bounded: only names on one of our ports, only valid
//! host names of at most 253 bytes, at most [`MAX_LOOKUPS_IN_FLIGHT`] lookups at once (a
//! lookup that timed out still holds its place until the system resolver returns), each
//! within [`LOOKUP_TIMEOUT`] and the connection's handshake deadline, answers (and failures)
//! cached for [`CACHE_TTL`] in a cache of at most [`MAX_CACHED_NAMES`] names. With TLS, only a
//! peer with a certificate from the cluster's CA gets this far.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardik_core::membership::Address;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The longest one name lookup may take.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an answer (or a failure) is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(5);
/// Most names cached at once.
pub const MAX_CACHED_NAMES: usize = 256;
/// Most lookups running at once, timed-out ones included.
pub const MAX_LOOKUPS_IN_FLIGHT: usize = 8;

/// What [`Recipient::judge`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The handshake names this node.
    Us,
    /// It names another node.
    NotUs,
    /// It names a host that could not be resolved (the reason).
    Unresolved(String),
}

/// This node's names and addresses, for judging a handshake's recipient.
pub(crate) struct Recipient {
    canonical: Address,
    bind: Address,
    /// The canonical port and the port actually bound.
    ports: [u16; 2],
    /// Canonical and bind hosts that are IP literals (not unspecified).
    literal_ips: Vec<IpAddr>,
    names: NameCache,
}

impl Recipient {
    /// A node known as `canonical`, listening on `bind` (as configured) at `bound`.
    pub(crate) fn new(canonical: Address, bind: Address, bound: SocketAddr) -> Self {
        let literal_ips = [&canonical, &bind]
            .into_iter()
            .filter_map(|a| ip_literal(&a.host))
            .filter(|ip| !ip.is_unspecified())
            .collect();
        Recipient {
            ports: [canonical.port, bound.port()],
            canonical,
            bind,
            literal_ips,
            names: NameCache::new(),
        }
    }

    /// Whether `to` names this node, for a connection accepted on `local`; a name lookup
    /// ends by `deadline` at the latest.
    pub(crate) async fn judge(
        &self,
        to: &Address,
        local: Option<SocketAddr>,
        deadline: Instant,
    ) -> Verdict {
        if *to == self.canonical || *to == self.bind {
            return Verdict::Us;
        }
        if !self.ports.contains(&to.port) {
            return Verdict::NotUs;
        }
        let host = to.host.as_ref();
        if host.eq_ignore_ascii_case(&self.canonical.host)
            || host.eq_ignore_ascii_case(&self.bind.host)
        {
            return Verdict::Us;
        }
        let local = local.map(|l| l.ip().to_canonical());
        let ours = |ip: &IpAddr| {
            let ip = ip.to_canonical();
            local == Some(ip) || self.literal_ips.contains(&ip)
        };
        if let Some(ip) = ip_literal(host) {
            return if ours(&ip) {
                Verdict::Us
            } else {
                Verdict::NotUs
            };
        }
        match self.names.resolve(host, deadline).await {
            Ok(ips) if ips.iter().any(ours) => Verdict::Us,
            Ok(_) => Verdict::NotUs,
            Err(e) => Verdict::Unresolved(e),
        }
    }

    /// Name lookups started so far (not answered from the cache), for tests.
    #[cfg(test)]
    fn lookups(&self) -> u64 {
        self.names
            .lookups
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// `host` as an IP address, if it is a literal (brackets around IPv6 allowed).
fn ip_literal(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok()
        .map(|ip| ip.to_canonical())
}

/// Whether `host` is a valid host name (letters, digits, `-`, `_` and dots; at most 253
/// bytes): nothing else is ever handed to the system resolver.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

type Answer = Result<Arc<[IpAddr]>, String>;

/// Bounded, briefly cached name lookups through the system resolver (so `/etc/hosts` counts).
struct NameCache {
    entries: Mutex<HashMap<Box<str>, (Instant, Answer)>>,
    in_flight: Arc<Semaphore>,
    #[cfg(test)]
    lookups: std::sync::atomic::AtomicU64,
}

impl NameCache {
    fn new() -> Self {
        NameCache {
            entries: Mutex::new(HashMap::new()),
            in_flight: Arc::new(Semaphore::new(MAX_LOOKUPS_IN_FLIGHT)),
            #[cfg(test)]
            lookups: std::sync::atomic::AtomicU64::new(0),
        }
    }

    async fn resolve(&self, host: &str, deadline: Instant) -> Answer {
        if !is_host_name(host) {
            return Err("not a host name".into());
        }
        let key: Box<str> = host.to_ascii_lowercase().into();
        let now = Instant::now();
        if let Some((at, answer)) = self.lock().get(&key)
            && now.saturating_duration_since(*at) < CACHE_TTL
        {
            return answer.clone();
        }
        let answer = self.look_up(&key, deadline.min(now + LOOKUP_TIMEOUT)).await;
        self.remember(key, answer.clone());
        answer
    }

    /// Caches `answer`, making room first: expired entries go, and if the cache is still
    /// full, everything (names are looked up again, at the same bounded rate).
    fn remember(&self, key: Box<str>, answer: Answer) {
        let mut entries = self.lock();
        if entries.len() >= MAX_CACHED_NAMES {
            let now = Instant::now();
            entries.retain(|_, (at, _)| now.saturating_duration_since(*at) < CACHE_TTL);
            if entries.len() >= MAX_CACHED_NAMES {
                entries.clear();
            }
        }
        entries.insert(key, (Instant::now(), answer));
    }

    async fn look_up(&self, host: &str, until: Instant) -> Answer {
        let permit =
            match tokio::time::timeout_at(until, Arc::clone(&self.in_flight).acquire_owned()).await
            {
                Ok(Ok(permit)) => permit,
                _ => {
                    return Err(format!(
                        "{MAX_LOOKUPS_IN_FLIGHT} name lookups already in flight"
                    ));
                }
            };
        #[cfg(test)]
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = host.to_string();
        // The system resolver blocks and cannot be cancelled: the permit goes with it, so a
        // lookup that outlives its timeout still counts against the bound.
        let lookup = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            (name.as_str(), 0u16)
                .to_socket_addrs()
                .map(|addrs| addrs.map(|a| a.ip().to_canonical()).collect::<Vec<_>>())
        });
        match tokio::time::timeout_at(until, lookup).await {
            Err(_) => Err(format!("no answer within {LOOKUP_TIMEOUT:?}")),
            Ok(Err(e)) => Err(format!("lookup failed: {e}")),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Ok(Ok(ips))) if ips.is_empty() => Err("no addresses".into()),
            Ok(Ok(Ok(ips))) => Ok(ips.into()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, (Instant, Answer)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn local(ip: &str, port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().unwrap(), port))
    }

    #[tokio::test]
    async fn names_and_addresses_of_this_node_are_accepted_and_others_refused() {
        // Bound to every address, known as a name.
        let r = Recipient::new(
            Address::new("pod-7.svc", 2552),
            Address::new("0.0.0.0", 2552),
            "0.0.0.0:2552".parse().unwrap(),
        );
        let on = local("10.1.2.3", 2552);
        let judge = |host: &str, port: u16| {
            let to = Address::new(host, port);
            let r = &r;
            async move { r.judge(&to, on, soon()).await }
        };
        assert_eq!(judge("pod-7.svc", 2552).await, Verdict::Us, "identity");
        assert_eq!(judge("0.0.0.0", 2552).await, Verdict::Us, "bind address");
        assert_eq!(
            judge("10.1.2.3", 2552).await,
            Verdict::Us,
            "the socket's address"
        );
        assert_eq!(
            judge("10.1.2.4", 2552).await,
            Verdict::NotUs,
            "another node's address"
        );
        assert_eq!(
            judge("10.1.2.3", 2553).await,
            Verdict::NotUs,
            "another port"
        );
        assert_eq!(
            judge("pod-7.svc", 2553).await,
            Verdict::NotUs,
            "identity, other port"
        );
        assert_eq!(
            judge("localhost", 2552).await,
            Verdict::NotUs,
            "resolves elsewhere"
        );
        assert_eq!(r.lookups(), 1, "only `localhost` needed a lookup");
        // Accepted on loopback, `localhost` names this node.
        let to = Address::new("localhost", 2552);
        assert_eq!(
            r.judge(&to, local("127.0.0.1", 2552), soon()).await,
            Verdict::Us
        );
        assert_eq!(r.lookups(), 1, "answered from the cache");
        // A name that does not resolve is refused with the reason; no lookup for garbage.
        let to = Address::new("nowhere.invalid", 2552);
        assert!(matches!(
            r.judge(&to, on, soon()).await,
            Verdict::Unresolved(_)
        ));
        let to = Address::new("bad name/with slash", 2552);
        assert_eq!(
            r.judge(&to, on, soon()).await,
            Verdict::Unresolved("not a host name".into())
        );
        assert_eq!(r.lookups(), 2);
    }

    #[tokio::test]
    async fn behind_nat_the_advertised_address_and_the_bound_port_count() {
        // Advertised as the NAT's address and port, bound on another port.
        let r = Recipient::new(
            Address::new("203.0.113.5", 32000),
            Address::new("0.0.0.0", 2552),
            "0.0.0.0:2552".parse().unwrap(),
        );
        let on = local("172.17.0.2", 2552);
        for (host, port, want) in [
            ("203.0.113.5", 32000, Verdict::Us),
            ("172.17.0.2", 2552, Verdict::Us),
            ("203.0.113.5", 2552, Verdict::Us),
            ("172.17.0.2", 32001, Verdict::NotUs),
            ("203.0.113.6", 32000, Verdict::NotUs),
        ] {
            let to = Address::new(host, port);
            assert_eq!(r.judge(&to, on, soon()).await, want, "{to}");
        }
        assert_eq!(r.lookups(), 0);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache = NameCache::new();
        for i in 0..(3 * MAX_CACHED_NAMES) {
            cache.remember(format!("n{i}.example").into(), Err("nope".into()));
            assert!(cache.lock().len() <= MAX_CACHED_NAMES);
        }
        assert!(
            cache.lock().contains_key("n767.example"),
            "the newest is kept"
        );
    }
}
