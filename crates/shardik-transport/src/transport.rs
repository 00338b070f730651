//! The transport of one node: binding and starting it, its sends on the membership lane, and
//! the handles it gives out (user senders, the user sink's installer, the driver's tables).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
#[cfg(feature = "tls")]
use std::time::Duration;

use shardik_core::membership::{Address, UniqueAddress};
use shardik_wire::LocalIdentity;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::config::TransportConfig;
use crate::identified::Identified;
use crate::inbound;
use crate::lane::{Lane, Outgoing};
use crate::limits;
use crate::members::MemberDirectory;
use crate::outbound;
use crate::received::{Inbound, InboundUser, Sinks, UserSink};
use crate::recipient;
use crate::refused::Refused;
use crate::shared::Shared;
use crate::user_sender::UserSender;

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::transport";

/// At most one log line per peer IP and TLS failure reason in this interval.
#[cfg(feature = "tls")]
const TLS_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why the transport could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The listen address could not be bound (in use, or not an address of this machine).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What the transport delivers to its owner: decoded membership messages and raw user
/// payloads, on separate bounded queues.
#[derive(Debug)]
pub struct Receivers {
    /// Membership messages (heartbeats, gossip), for the node driver.
    pub membership: mpsc::Receiver<Inbound>,
    /// User payloads (sharding envelopes, later). Whoever holds this must keep draining it:
    /// when it is full, new payloads are dropped and counted, never waited for.
    pub user: mpsc::Receiver<InboundUser>,
}

/// The transport of one node: a listener plus outbound writers per peer and lane.
///
/// Owned by the node driver; [`send`](Transport::send) never blocks.
pub struct Transport {
    shared: Arc<Shared>,
    peers: BTreeMap<(Address, Lane), outbound::PeerQueue>,
    local_addr: SocketAddr,
}

impl Transport {
    /// Binds `bind` and starts accepting. Decoded inbound traffic arrives on the returned
    /// receivers: membership messages and user payloads on separate queues.
    ///
    /// The node is `identity` in the cluster; `identity.address` may differ from `bind` (a
    /// node bound to `0.0.0.0`, behind NAT, or known by a name): handshakes addressed to
    /// either, to an address of the accepting socket, or to a name resolving to one, are
    /// taken as meant for this node (`recipient.rs`).
    ///
    /// User traffic is accepted only from the members of [`members`](Self::members), which
    /// starts empty: the node driver keeps it up to date.
    pub async fn start(
        bind: &str,
        identity: LocalIdentity,
        config: TransportConfig,
    ) -> Result<(Transport, Receivers), TransportError> {
        Transport::start_with(bind, identity, config, MemberDirectory::new()).await
    }

    /// [`start`](Self::start) for a transport with no membership behind it (transport tests,
    /// benchmarks): every peer that completes the handshake counts as a member. A node never
    /// uses this.
    pub async fn start_accepting_everyone(
        bind: &str,
        identity: LocalIdentity,
        config: TransportConfig,
    ) -> Result<(Transport, Receivers), TransportError> {
        Transport::start_with(bind, identity, config, MemberDirectory::everyone()).await
    }

    async fn start_with(
        bind: &str,
        identity: LocalIdentity,
        config: TransportConfig,
        members: MemberDirectory,
    ) -> Result<(Transport, Receivers), TransportError> {
        let listener = Transport::bind(bind).await?;
        Transport::start_on(listener, bind, identity, config, members)
    }

    /// Binds the listening socket at `bind` (`host:port`; port 0 lets the OS pick one),
    /// for [`start_bound`](Self::start_bound): a node whose identity is the port the OS
    /// picks binds first and then knows who it is.
    pub async fn bind(bind: &str) -> Result<TcpListener, TransportError> {
        TcpListener::bind(bind)
            .await
            .map_err(|source| TransportError::Bind {
                addr: bind.to_string(),
                source,
            })
    }

    /// [`start`](Self::start) on a socket already bound by [`bind`](Self::bind) at `bind`.
    pub async fn start_bound(
        listener: TcpListener,
        bind: &str,
        identity: LocalIdentity,
        config: TransportConfig,
    ) -> Result<(Transport, Receivers), TransportError> {
        Transport::start_on(listener, bind, identity, config, MemberDirectory::new())
    }

    fn start_on(
        listener: TcpListener,
        bind: &str,
        identity: LocalIdentity,
        config: TransportConfig,
        members: MemberDirectory,
    ) -> Result<(Transport, Receivers), TransportError> {
        let local_addr = listener
            .local_addr()
            .map_err(|source| TransportError::Bind {
                addr: bind.to_string(),
                source,
            })?;
        let (tx, rx) = mpsc::channel(config.inbound_queue_size.max(1));
        let (user_tx, user_rx) = mpsc::channel(config.inbound_user_queue_size.max(1));
        // The address asked for, with the port the OS picked when it was 0.
        let bind_address = bind
            .parse::<Address>()
            .map(|a| Address::new(a.host.clone(), local_addr.port()))
            .unwrap_or_else(|_| Address::new(local_addr.ip().to_string(), local_addr.port()));
        let recipient =
            recipient::Recipient::new(identity.address.address.clone(), bind_address, local_addr);
        let shared = Arc::new(Shared {
            recipient,
            identified: Arc::default(),
            refused: Arc::default(),
            inbound: limits::Pool::new(config.maximum_inbound_connections),
            pending: limits::Pending::new(config.maximum_unauthenticated_connections),
            non_members: limits::Pool::new(config.maximum_non_member_connections),
            config,
            identity,
            members,
            user_sink: std::sync::OnceLock::new(),
            #[cfg(feature = "tls")]
            tls_failures: crate::tls::HandshakeFailureLog::new(TLS_FAILURE_LOG_INTERVAL),
            connect_errors: Default::default(),
        });
        crate::task::spawn(inbound::accept_loop(
            listener,
            Arc::clone(&shared),
            Sinks {
                membership: tx,
                user: user_tx,
            },
        ));
        Ok((
            Transport {
                shared,
                peers: BTreeMap::new(),
                local_addr,
            },
            Receivers {
                membership: rx,
                user: user_rx,
            },
        ))
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's identity.
    pub fn identity(&self) -> &UniqueAddress {
        &self.shared.identity.address
    }

    /// The member directory the readers consult; the node driver sets the members whenever
    /// its membership state changes.
    pub fn members(&self) -> &MemberDirectory {
        &self.shared.members
    }

    /// Inbound connections open now: in total, still handshaking, and past the handshake from
    /// peers that are not members (for tests and inspection).
    pub fn inbound_connections(&self) -> InboundCounts {
        InboundCounts {
            total: self.shared.inbound.in_use(),
            unauthenticated: self.shared.pending.len(),
            non_member: self.shared.non_members.in_use(),
        }
    }

    /// Queues `msg` for `to`. Returns false (and counts it) if that peer's lane queue is full.
    ///
    /// Peers are created on first use and their writers end after `idle-timeout` without
    /// traffic. Replies go to addresses that peers claim for themselves, so the number of
    /// live peers is capped (`maximum_peers`): beyond it, sends to new addresses are refused,
    /// counted and logged rather than growing without bound.
    pub fn send(&mut self, to: &Address, msg: Outgoing) -> bool {
        let lane = match msg {
            Outgoing::Membership(_) => Lane::Control,
            Outgoing::User(_) => Lane::User,
        };
        let key = (to.clone(), lane);
        let mut msg = msg;
        if let Some(queue) = self.peers.get(&key) {
            match queue.push(msg) {
                Ok(taken) => return taken,
                // Its writer ended (idle) meanwhile: the message goes on a new lane below.
                Err(back) => msg = back,
            }
        }
        if !self.peers.contains_key(&key) && self.peers.len() >= self.shared.config.maximum_peers {
            // Sweep writers that ended (idle) before refusing.
            self.peers.retain(|_, q| !q.is_closed());
            if self.peers.len() >= self.shared.config.maximum_peers {
                metrics::counter!(crate::metrics::DROPPED_MESSAGES_TOTAL, "reason" => "too-many-peers").increment(1);
                tracing::warn!(target: LOG_TARGET, %to, limit = self.shared.config.maximum_peers, "not sending: too many peers");
                return false;
            }
        }
        let queue = outbound::PeerQueue::spawn(to.clone(), lane, Arc::clone(&self.shared));
        // A lane just spawned is open (only its owner or an idle period closes it).
        let sent = queue.push(msg).unwrap_or(false);
        self.peers.insert(key, queue);
        sent
    }

    /// A cloneable sender for user payloads (sharding traffic), usable from any task. It keeps
    /// its own writers, so user traffic never contends with the driver's membership sends.
    pub fn user_sender(&self) -> UserSender {
        UserSender::new(Arc::clone(&self.shared))
    }

    /// A handle that installs where inbound user payloads go (see [`UserInbound`]).
    pub fn user_inbound(&self) -> UserInbound {
        UserInbound {
            shared: Arc::clone(&self.shared),
        }
    }

    /// How many peer lanes have a writer (for tests and inspection).
    pub fn peer_count(&self) -> usize {
        self.peers.values().filter(|q| !q.is_closed()).count()
    }

    /// Whether a membership lane to `to` has a writer (for tests and inspection).
    pub fn has_peer(&self, to: &Address) -> bool {
        self.peers
            .get(&(to.clone(), Lane::Control))
            .is_some_and(|q| !q.is_closed())
    }

    /// Where this node's lanes report addresses they dialled whose handshake reply named
    /// another incarnation (an alias, or another address of the node).
    pub fn identified(&self) -> Arc<Identified> {
        Arc::clone(&self.shared.identified)
    }

    /// Where the lanes record peers whose port refused a connection, for the node driver.
    pub fn refused(&self) -> Arc<Refused> {
        Arc::clone(&self.shared.refused)
    }

    /// Why the last attempt to connect to `to` failed, while attempts keep failing (`None`
    /// once one succeeds, or if none was made).
    pub fn last_connect_error(&self, to: &Address) -> Option<String> {
        self.shared.connect_errors.last(to)
    }

    /// Stops the writers of peers that are no longer members (their tasks end when the queue closes).
    pub fn forget_peer(&mut self, address: &Address) {
        self.peers.retain(|(a, _), _| a != address);
    }
}

/// Inbound connections open at one moment (see [`Transport::inbound_connections`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundCounts {
    /// All of them.
    pub total: usize,
    /// Not yet past our handshake.
    pub unauthenticated: usize,
    /// Past the handshake, from peers that are not current members.
    pub non_member: usize,
}

/// Installs the [`UserSink`] that connection readers hand user payloads to, once.
#[derive(Clone)]
pub struct UserInbound {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for UserInbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserInbound").finish_non_exhaustive()
    }
}

impl UserInbound {
    /// From now on, readers hand user payloads to `sink` as they read them, instead of to the
    /// user queue of [`Receivers`] (each connection switches at its next payload; the queue
    /// keeps what it already holds, so its consumer should drain it). False if a sink was
    /// installed already.
    pub fn install(&self, sink: Arc<dyn UserSink>) -> bool {
        self.shared.user_sink.set(sink).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::received::{Backpressure, UserConnection};

    async fn transport(cluster: &str) -> (Transport, Receivers) {
        transport_with(cluster, TransportConfig::default()).await
    }

    async fn transport_with(cluster: &str, config: TransportConfig) -> (Transport, Receivers) {
        // Bind first to learn a free port: the identity must name the address we listen on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let identity = LocalIdentity {
            cluster_name: cluster.into(),
            address: UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) + 1),
        };
        Transport::start_accepting_everyone(&format!("127.0.0.1:{port}"), identity, config)
            .await
            .expect("transport starts")
    }

    /// Addresses nobody listens on (ports just released).
    fn dead_addresses(n: usize) -> Vec<Address> {
        let listeners: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        listeners
            .iter()
            .map(|l| Address::new("127.0.0.1", l.local_addr().unwrap().port()))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn peers_are_capped_and_idle_writers_end() {
        let config = TransportConfig {
            maximum_peers: 3,
            idle_timeout: Duration::from_millis(200),
            ..TransportConfig::default()
        };
        let (mut t, _rx) = transport_with("t", config).await;
        let dead = dead_addresses(5);
        let ping = || Outgoing::User(bytes::Bytes::from_static(b"x"));
        for a in &dead[..3] {
            assert!(t.send(a, ping()), "room for three peers");
        }
        assert!(
            !t.send(&dead[3], ping()),
            "a fourth peer is refused, not added"
        );
        assert_eq!(t.peer_count(), 3);
        // Their writers fail to connect, then end after the idle timeout: room again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while t.peer_count() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "idle writers did not end"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            t.send(&dead[4], ping()),
            "a new peer fits once idle ones ended"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn user_payloads_arrive_in_order_with_their_sender() {
        let (mut a, _a_rx) = transport("t").await;
        let (b, mut b_rx) = transport("t").await;
        let to = b.identity().address.clone();
        for i in 0..100u32 {
            assert!(a.send(
                &to,
                Outgoing::User(bytes::Bytes::from(i.to_be_bytes().to_vec()))
            ));
        }
        for i in 0..100u32 {
            let got = tokio::time::timeout(Duration::from_secs(10), b_rx.user.recv())
                .await
                .expect("in time")
                .expect("open");
            assert_eq!(got.from, *a.identity());
            assert_eq!(&got.payload[..], &i.to_be_bytes());
        }
        // User traffic never reaches the membership queue.
        assert!(b_rx.membership.try_recv().is_err());
    }

    /// Direct writes, partial writes and the writer's backlog interleave without losing or
    /// reordering anything: the receiver does not read at first, so the sockets fill up and the
    /// rest waits in the lane (senders wait for room), then it reads everything.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_socket_and_a_full_lane_keep_every_payload_in_order() {
        let config = TransportConfig {
            outbound_user_queue_size: 64,
            inbound_user_queue_size: 16,
            ..TransportConfig::default()
        };
        let (a, _a_rx) = transport_with("t", config.clone()).await;
        let (b, mut b_rx) = transport_with("t", config).await;
        let to = b.identity().address.clone();
        let sender = a.user_sender();
        const N: u32 = 20_000;
        let produce = crate::task::spawn(async move {
            let payload = |i: u32| {
                let mut p = i.to_be_bytes().to_vec();
                p.resize(1024, 0xab);
                bytes::Bytes::from(p)
            };
            let mut i = 0;
            while i < N {
                // Alternate single sends and runs, as replies and a kind's flushes do.
                if i % 3 == 0 {
                    assert!(sender.send(&to, payload(i)).await);
                    i += 1;
                } else {
                    let end = (i + 50).min(N);
                    assert_eq!(sender.send_all(&to, (i..end).map(payload)).await, 0);
                    i = end;
                }
            }
        });
        // Let the sender run into the full socket and lane before anything is read.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !produce.is_finished(),
            "the lane bound made the sender wait"
        );
        for i in 0..N {
            // Read in spurts, so that the socket keeps filling and draining while the sender
            // and the lane's writer take turns.
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let got = tokio::time::timeout(Duration::from_secs(20), b_rx.user.recv())
                .await
                .expect("in time")
                .expect("open");
            assert_eq!(&got.payload[..4], &i.to_be_bytes(), "payload {i} in order");
            assert_eq!(got.payload.len(), 1024);
        }
        produce.await.unwrap();
    }

    /// Once a sink is installed, readers hand it every user payload themselves and the user
    /// queue gets nothing; a second sink is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_installed_sink_takes_user_payloads_from_the_reader() {
        struct Collect(tokio::sync::mpsc::UnboundedSender<(UniqueAddress, bytes::Bytes)>);
        struct CollectConnection(tokio::sync::mpsc::UnboundedSender<(UniqueAddress, bytes::Bytes)>);
        impl UserSink for Collect {
            fn connection(&self) -> Box<dyn UserConnection> {
                Box::new(CollectConnection(self.0.clone()))
            }
        }
        impl UserConnection for CollectConnection {
            fn deliver(
                &mut self,
                from: &UniqueAddress,
                payload: bytes::Bytes,
            ) -> Option<Backpressure> {
                let _ = self.0.send((from.clone(), payload));
                None
            }
        }
        let (a, _a_rx) = transport("t").await;
        let (b, mut b_rx) = transport("t").await;
        let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
        assert!(b.user_inbound().install(Arc::new(Collect(tx.clone()))));
        assert!(
            !b.user_inbound().install(Arc::new(Collect(tx))),
            "only one sink"
        );
        let sender = a.user_sender();
        let to = b.identity().address.clone();
        for i in 0..10u8 {
            assert!(sender.send(&to, bytes::Bytes::from(vec![i])).await);
        }
        for i in 0..10u8 {
            let (from, payload) = tokio::time::timeout(Duration::from_secs(10), got.recv())
                .await
                .expect("in time")
                .expect("open");
            assert_eq!(from, *a.identity());
            assert_eq!(&payload[..], &[i]);
        }
        assert!(b_rx.user.try_recv().is_err(), "nothing went to the queue");
    }
}
