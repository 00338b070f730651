//! Driver errors as the store's errors, naming the server.

use std::sync::Arc;

use deadpool_postgres::{PoolError, TimeoutType};
use tokio_postgres::config::Host;

use super::limits::{CREATE_TIMEOUT, POOL_SIZE};
use crate::error::StoreError;
use crate::util::describe;

/// `host:port` of every host the configuration names, for messages.
pub(super) fn server_name(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let names: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            // One port for all hosts, one per host, or none (the default).
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect();
    if names.is_empty() {
        "(no host given)".to_string()
    } else {
        names.join(",")
    }
}

/// Turns driver errors into the store's, naming the server.
#[derive(Clone, Debug)]
pub(crate) struct PgErr {
    pub(super) server: Arc<str>,
}

impl PgErr {
    /// A connection could not be had.
    pub(super) fn pool(&self, e: PoolError) -> StoreError {
        let server = &self.server;
        StoreError::Unavailable(match e {
            PoolError::Backend(e) => {
                format!("cannot connect to PostgreSQL at {server}: {}", describe(&e))
            }
            PoolError::Timeout(TimeoutType::Create) => format!(
                "PostgreSQL at {server} did not complete the login within {} s",
                CREATE_TIMEOUT.as_secs()
            ),
            PoolError::Timeout(_) => format!(
                "timed out waiting for a free connection to PostgreSQL at {server} (all {POOL_SIZE} busy)"
            ),
            PoolError::Closed => format!("the PostgreSQL store for {server} is closed"),
            other => format!("no connection to PostgreSQL at {server}: {other}"),
        })
    }

    /// A statement failed.
    pub(super) fn query(&self, doing: &str, e: tokio_postgres::Error) -> StoreError {
        let why = format!("PostgreSQL at {}: {doing}: {}", self.server, describe(&e));
        if e.as_db_error().is_none() && e.is_closed() {
            StoreError::Unavailable(why)
        } else {
            StoreError::Failed(why)
        }
    }

    /// A row did not decode as shardik wrote it.
    pub(super) fn decode(&self, what: &str, e: tokio_postgres::Error) -> StoreError {
        StoreError::Corrupt(format!(
            "PostgreSQL at {}: {what}: {}",
            self.server,
            describe(&e)
        ))
    }
}
