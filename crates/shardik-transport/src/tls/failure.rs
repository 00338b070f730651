//! Handshake failures: a short reason for metrics, and a log that strangers cannot flood.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[cfg(feature = "tls")]
use rustls::{AlertDescription, CertificateError};
use tracing::warn;

#[cfg(feature = "tls")]
use super::identity::WrongIdentity;

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::tls::failure";

/// Why a TLS handshake failed, as a metric label ([`as_str`](Self::as_str)).
///
/// The side that refuses a certificate knows exactly why; the refused side learns only the
/// TLS alert it was sent, which is mapped to the same labels where the alert says as much
/// (`unknown-ca`, `expired`, `no-certificate`) and to `bad-certificate` otherwise.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureReason {
    /// The certificate does not chain to a CA in `ca-cert-file`.
    UnknownCa,
    /// The certificate (or one of its chain) is expired or not yet valid.
    Expired,
    /// The certificate lacks this cluster's URI SAN (another cluster or trust domain).
    WrongCluster,
    /// The client sent no certificate while mutual authentication is required.
    NoCertificate,
    /// The server's certificate does not name the host that was dialled (or the host cannot
    /// be named by a certificate).
    BadName,
    /// Another problem with a certificate (wrong key usage, bad encoding, or the peer
    /// refused ours without saying why).
    BadCertificate,
    /// The peer does not speak TLS (a node without TLS, or something else entirely).
    NotTls,
    /// The connection closed or broke during the handshake.
    Closed,
    /// Anything else.
    Other,
}

impl FailureReason {
    /// Every reason, in a fixed order.
    pub const ALL: [FailureReason; 9] = [
        FailureReason::UnknownCa,
        FailureReason::Expired,
        FailureReason::WrongCluster,
        FailureReason::NoCertificate,
        FailureReason::BadName,
        FailureReason::BadCertificate,
        FailureReason::NotTls,
        FailureReason::Closed,
        FailureReason::Other,
    ];

    /// The `reason` label of a refused connection in the transport's and the management
    /// port's refusal counters: [`as_str`](Self::as_str) prefixed with `tls-`, so that it never
    /// collides with their other reasons.
    pub fn refusal_label(self) -> &'static str {
        match self {
            FailureReason::UnknownCa => "tls-unknown-ca",
            FailureReason::Expired => "tls-expired",
            FailureReason::WrongCluster => "tls-wrong-cluster",
            FailureReason::NoCertificate => "tls-no-certificate",
            FailureReason::BadName => "tls-bad-name",
            FailureReason::BadCertificate => "tls-bad-certificate",
            FailureReason::NotTls => "tls-not-tls",
            FailureReason::Closed => "tls-closed",
            FailureReason::Other => "tls-other",
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::UnknownCa => "unknown-ca",
            FailureReason::Expired => "expired",
            FailureReason::WrongCluster => "wrong-cluster",
            FailureReason::NoCertificate => "no-certificate",
            FailureReason::BadName => "bad-name",
            FailureReason::BadCertificate => "bad-certificate",
            FailureReason::NotTls => "not-tls",
            FailureReason::Closed => "closed",
            FailureReason::Other => "other",
        }
    }

    /// The reason of a failed handshake or of a read that failed right after one (tokio-rustls
    /// reports rustls errors inside `io::Error`s).
    pub fn of_io(error: &io::Error) -> FailureReason {
        #[cfg(feature = "tls")]
        if let Some(tls) = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return FailureReason::of_rustls(tls);
        }
        match error.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => FailureReason::Closed,
            _ => FailureReason::Other,
        }
    }

    /// The reason of a rustls error.
    #[cfg(feature = "tls")]
    pub fn of_rustls(error: &rustls::Error) -> FailureReason {
        match error {
            rustls::Error::InvalidCertificate(e) => Self::of_certificate(e),
            rustls::Error::NoCertificatesPresented => FailureReason::NoCertificate,
            rustls::Error::AlertReceived(alert) => match alert {
                AlertDescription::UnknownCA => FailureReason::UnknownCa,
                AlertDescription::CertificateExpired => FailureReason::Expired,
                AlertDescription::CertificateRequired => FailureReason::NoCertificate,
                AlertDescription::BadCertificate
                | AlertDescription::CertificateUnknown
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::AccessDenied => FailureReason::BadCertificate,
                _ => FailureReason::Other,
            },
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                FailureReason::NotTls
            }
            _ => FailureReason::Other,
        }
    }

    #[cfg(feature = "tls")]
    fn of_certificate(error: &CertificateError) -> FailureReason {
        match error {
            CertificateError::UnknownIssuer => FailureReason::UnknownCa,
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => FailureReason::Expired,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                FailureReason::BadName
            }
            CertificateError::Other(other) if other.0.downcast_ref::<WrongIdentity>().is_some() => {
                FailureReason::WrongCluster
            }
            _ => FailureReason::BadCertificate,
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`HandshakeFailureLog::record`] did with a failure.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Logged {
    /// A line was written; `suppressed` failures of the same peer IP and reason were left out
    /// since the previous line.
    Written {
        /// How many were not logged since the last line for this peer IP and reason.
        suppressed: u64,
    },
    /// Not written: this peer IP and reason were logged less than an interval ago.
    Suppressed,
}

/// Most peer IP and reason pairs tracked at once: a stranger with many addresses costs at
/// most this many entries, after which failures from new addresses share one summary line.
const MAX_TRACKED: usize = 1024;

/// Logs TLS handshake failures at most once per peer IP and reason per interval, with the
/// number of failures left out since the previous line, in bounded memory. Strangers can fail
/// handshakes as fast as they can connect; members need their one line.
#[derive(Debug)]
pub struct HandshakeFailureLog {
    interval: Duration,
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    entries: BTreeMap<(IpAddr, FailureReason), Entry>,
    /// Failures from peers that found the table full, since the last summary line.
    overflow: u64,
    overflow_logged_at: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    logged_at: Instant,
    suppressed: u64,
}

impl HandshakeFailureLog {
    /// A log that writes at most one line per peer IP and reason per `interval`.
    pub fn new(interval: Duration) -> Self {
        HandshakeFailureLog {
            interval,
            state: Mutex::new(LogState::default()),
        }
    }

    /// Logs (or counts as suppressed) one failed handshake with `peer`; `inbound` says which
    /// side we were.
    pub fn record(
        &self,
        peer: IpAddr,
        reason: FailureReason,
        inbound: bool,
        error: &dyn fmt::Display,
    ) -> Logged {
        self.record_at(Instant::now(), peer, reason, inbound, error)
    }

    fn record_at(
        &self,
        now: Instant,
        peer: IpAddr,
        reason: FailureReason,
        inbound: bool,
        error: &dyn fmt::Display,
    ) -> Logged {
        let direction = if inbound { "inbound" } else { "outbound" };
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (peer, reason);
        if let Some(entry) = st.entries.get_mut(&key) {
            if now.saturating_duration_since(entry.logged_at) < self.interval {
                entry.suppressed += 1;
                return Logged::Suppressed;
            }
            let suppressed = std::mem::take(&mut entry.suppressed);
            entry.logged_at = now;
            warn!(target: LOG_TARGET, %peer, reason = reason.as_str(), direction, %error, suppressed, "TLS handshake failed");
            return Logged::Written { suppressed };
        }
        if st.entries.len() >= MAX_TRACKED {
            self.forget_quiet(&mut st, now);
        }
        if st.entries.len() >= MAX_TRACKED {
            st.overflow += 1;
            let due = st
                .overflow_logged_at
                .is_none_or(|at| now.saturating_duration_since(at) >= self.interval);
            if !due {
                return Logged::Suppressed;
            }
            let suppressed = std::mem::take(&mut st.overflow) - 1;
            st.overflow_logged_at = Some(now);
            warn!(target: LOG_TARGET, %peer, reason = reason.as_str(), direction, %error, suppressed,
                "TLS handshake failed (failures from too many peers to log each; this line \
                 stands for them)");
            return Logged::Written { suppressed };
        }
        st.entries.insert(
            key,
            Entry {
                logged_at: now,
                suppressed: 0,
            },
        );
        warn!(target: LOG_TARGET, %peer, reason = reason.as_str(), direction, %error, suppressed = 0u64, "TLS handshake failed");
        Logged::Written { suppressed: 0 }
    }

    /// Drops the entries whose interval has passed, with one line for the failures they had
    /// left out (they would otherwise never be reported).
    fn forget_quiet(&self, st: &mut LogState, now: Instant) {
        let mut peers = 0u64;
        let mut unlogged = 0u64;
        st.entries.retain(|_, e| {
            let keep = now.saturating_duration_since(e.logged_at) < self.interval;
            if !keep && e.suppressed > 0 {
                peers += 1;
                unlogged += e.suppressed;
            }
            keep
        });
        if unlogged > 0 {
            warn!(target: LOG_TARGET,
                peers,
                suppressed = unlogged,
                "TLS handshake failures not logged individually"
            );
        }
    }

    /// Peer IP and reason pairs currently tracked (bounded).
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn one_line_per_peer_and_reason_per_interval_with_the_count_left_out() {
        let log = HandshakeFailureLog::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let rec = |t: Instant, peer: IpAddr, reason| log.record_at(t, peer, reason, true, &"x");
        assert_eq!(
            rec(t0, ip(1), FailureReason::UnknownCa),
            Logged::Written { suppressed: 0 }
        );
        assert_eq!(rec(t0, ip(1), FailureReason::UnknownCa), Logged::Suppressed);
        assert_eq!(
            rec(
                t0 + Duration::from_secs(59),
                ip(1),
                FailureReason::UnknownCa
            ),
            Logged::Suppressed
        );
        // Another reason or another peer has its own line.
        assert_eq!(
            rec(t0, ip(1), FailureReason::Expired),
            Logged::Written { suppressed: 0 }
        );
        assert_eq!(
            rec(t0, ip(2), FailureReason::UnknownCa),
            Logged::Written { suppressed: 0 }
        );
        // After the interval, the next line says how many were left out.
        assert_eq!(
            rec(
                t0 + Duration::from_secs(60),
                ip(1),
                FailureReason::UnknownCa
            ),
            Logged::Written { suppressed: 2 }
        );
        assert_eq!(
            rec(
                t0 + Duration::from_secs(61),
                ip(1),
                FailureReason::UnknownCa
            ),
            Logged::Suppressed
        );
    }

    #[test]
    fn many_peers_cost_bounded_memory_and_share_a_summary_line() {
        let log = HandshakeFailureLog::new(Duration::from_secs(60));
        let t0 = Instant::now();
        for n in 0..MAX_TRACKED as u32 {
            assert_eq!(
                log.record_at(t0, ip(n), FailureReason::NotTls, true, &"x"),
                Logged::Written { suppressed: 0 }
            );
        }
        // The table is full: the first newcomer gets the summary line, the rest wait.
        let r = |n: u32, t| log.record_at(t, ip(n), FailureReason::NotTls, true, &"x");
        assert_eq!(
            r(5_000, t0),
            Logged::Written { suppressed: 0 },
            "first overflow line"
        );
        for n in 5_001..5_100 {
            assert_eq!(r(n, t0), Logged::Suppressed);
        }
        assert_eq!(log.tracked(), MAX_TRACKED);
        // Once the old entries' interval has passed they make room again.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(r(6_000, later), Logged::Written { suppressed: 0 });
        assert!(log.tracked() <= MAX_TRACKED);
    }

    #[test]
    fn reasons_have_distinct_labels() {
        use std::collections::BTreeSet;
        let all = FailureReason::ALL;
        let labels: BTreeSet<_> = all.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), all.len());
        for r in all {
            assert_eq!(r.refusal_label(), format!("tls-{}", r.as_str()));
        }
    }

    #[test]
    #[cfg(feature = "tls")]
    fn io_errors_without_rustls_inside() {
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(FailureReason::of_io(&eof), FailureReason::Closed);
        let tls = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(FailureReason::of_io(&tls), FailureReason::UnknownCa);
        let alert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
        );
        assert_eq!(FailureReason::of_io(&alert), FailureReason::NoCertificate);
    }
}
