//! The bounds the store keeps its connections within: the pool's size, how long connecting,
//! logging in and waiting for a free connection may take, and how long the server lets a
//! session of ours idle inside a transaction.

use std::time::Duration;

/// How long connecting to the server may take, unless the URL sets `connect_timeout`.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections in the pool: enough for the batching callers of one node, few enough that many
/// nodes fit within the server's `max_connections`.
pub(super) const POOL_SIZE: usize = 8;

/// How long connecting and logging in may take: the driver's connect timeout covers only the
/// TCP connection, and a server that accepts but never answers must not hang the caller.
pub(super) const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call waits for a free connection before failing.
pub(super) const POOL_WAIT: Duration = Duration::from_secs(30);

/// How long the server lets one of our sessions sit idle inside a transaction before it ends
/// the session (`idle_in_transaction_session_timeout`). Our transactions send their statements
/// back to back, so only a client that stopped running (frozen, SIGSTOPped, a VM paused) idles
/// in one for long, and meanwhile it holds its row locks: the fence rows of the shards it
/// wrote, which the shard's next home must lock to write. Ended by the server, the frozen
/// transaction rolls back and the locks go, shorter than the default lease's time to live (6
/// s), so a shard taken over from a frozen node is not kept from writing by it. A client that
/// resumes finds its session gone and that write failed (the pool drops the connection).
pub(super) const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);
