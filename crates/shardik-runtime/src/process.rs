//! A node that runs itself as a process: its management API served from the moment it
//! starts, the application's own routes added beside it, and SIGTERM/SIGINT turned into a
//! graceful leave.
//!
//! What `shardik node`, `examples/shopping-cart` and every user program would otherwise copy:
//! [`NodeBuilder::management`](crate::NodeBuilder::management) binds the management port
//! before the node joins (so a port in use stops it before it is a member) and serves
//! Akka Management's routes as soon as the node is started, so that probes and cluster
//! bootstrap's contact-point probes are answered while it joins;
//! [`Node::merge_routes`](crate::Node::merge_routes) adds the application's routes to that
//! same port once its entity kinds are registered; [`Node::run_until_signal`](crate::Node::run_until_signal)
//! waits for the node to stop, the first signal making it leave (shards handed off first) and
//! a second one ending the process at once; [`ShutdownReason::exit_code`] says how the process
//! should end.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use shardik_core::membership::ShutdownReason;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tower::ServiceExt;
use tracing::{info, warn};

use crate::config::Settings;
use crate::http::{self, HttpLimits, ManagementApi, WriteGuard};
use crate::metrics::MetricsHandle;
use crate::node::{RunningNode, StartError, StopRequest};
use crate::sharding::Sharding;
use crate::tls::TlsContext;

/// How long the management API may take to finish its requests in flight once the node has
/// stopped.
const HTTP_DRAIN: Duration = Duration::from_secs(2);

/// The exit code of a process ended by a second signal (128 + SIGINT, as shells report it).
pub const SECOND_SIGNAL_EXIT_CODE: i32 = 130;

/// The management port, bound before the node starts.
pub(crate) struct BoundManagement {
    listener: TcpListener,
    address: String,
    guard: WriteGuard,
    tls: Option<TlsContext>,
    limits: HttpLimits,
}

impl BoundManagement {
    /// Reads what the management API needs from `settings` (the write guard's token file,
    /// the TLS files) and binds its port; each failure names the key or address to fix.
    pub(crate) async fn bind(settings: &Settings) -> Result<Self, StartError> {
        let http_settings = &settings.management.http;
        let guard = WriteGuard::from_settings(http_settings)
            .map_err(|e| StartError::Management(e.to_string()))?;
        let tls = TlsContext::for_management(settings)?;
        let address = http_settings.bind_address();
        let listener = TcpListener::bind(&address).await.map_err(|e| {
            StartError::Management(format!(
                "cannot listen on {address} (management.http.hostname and \
                 management.http.port): {e}"
            ))
        })?;
        Ok(BoundManagement {
            listener,
            address,
            guard,
            tls,
            limits: HttpLimits::from_settings(http_settings),
        })
    }

    /// Starts serving Akka Management's routes over `running` and `sharding`, with the
    /// application's routes (none yet) beside them.
    pub(crate) fn serve(
        self,
        settings: &Settings,
        running: &RunningNode,
        sharding: &Sharding,
        metrics: Option<MetricsHandle>,
    ) -> ManagementServer {
        let app_routes = AppRoutes::default();
        let router = ManagementApi::new(running.handle.clone())
            .settings(settings)
            .write_guard(self.guard.clone())
            .metrics(metrics)
            .sharding(sharding.clone())
            .router()
            .fallback_service(app_routes.service());
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        let https = self.tls.is_some();
        let task = match self.tls {
            Some(tls) => tokio::spawn(http::serve_https(
                self.listener,
                router,
                self.limits,
                tls,
                stopped,
            )),
            None => tokio::spawn(http::serve_with(
                self.listener,
                router,
                self.limits,
                stopped,
            )),
        };
        info!(
            node = %running.self_node,
            management = %self.address,
            https,
            writes_enabled = self.guard.writes_enabled(),
            bearer_token = self.guard.requires_token(),
            client_certificates_accepted = self.guard.accepts_client_certificates(),
            "management API listening"
        );
        ManagementServer {
            guard: self.guard,
            app_routes,
            stop: Some(stop),
            task: Some(task),
        }
    }
}

/// The management API a node serves.
pub(crate) struct ManagementServer {
    pub(crate) guard: WriteGuard,
    pub(crate) app_routes: AppRoutes,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl ManagementServer {
    /// Stops accepting and lets the requests in flight finish, for at most [`HTTP_DRAIN`].
    pub(crate) async fn shut_down(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(HTTP_DRAIN, task).await;
        }
    }
}

/// The application's routes, served on the management port behind Akka Management's own
/// (which win where both have a path). Routes can be added while the port serves, so that
/// it answers probes from the start and the application's routes once they exist.
#[derive(Clone, Default)]
pub(crate) struct AppRoutes {
    routes: Arc<RwLock<Routes>>,
}

#[derive(Default)]
struct Routes {
    /// What the application gave, merged.
    given: Router,
    /// `given` as served: each route names itself for the request metrics, and anything
    /// else is the management API's JSON 404.
    served: Option<Router>,
}

impl AppRoutes {
    /// Adds `routes` (which must not have a fallback of their own).
    pub(crate) fn merge(&self, routes: Router) {
        let mut all = self.routes.write().unwrap_or_else(|e| e.into_inner());
        let given = std::mem::take(&mut all.given).merge(routes);
        all.served = Some(
            given
                .clone()
                .layer(middleware::from_fn(expose_matched_path))
                .fallback(http::not_found),
        );
        all.given = given;
    }

    /// The fallback service of the management router: the application's routes, or 404.
    fn service(&self) -> axum::routing::MethodRouter {
        let routes = self.clone();
        axum::routing::any(move |request: Request| {
            let served = routes
                .routes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .served
                .clone();
            async move {
                match served {
                    Some(router) => match router.oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    },
                    None => http::not_found(request.uri().clone()).await,
                }
            }
        })
    }
}

/// Copies the route an application's request matched into its response, where the request
/// metrics of the outer router (which saw only its fallback) look for it.
async fn expose_matched_path(request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let mut response = next.run(request).await;
    if let Some(matched) = matched {
        response.extensions_mut().insert(matched);
    }
    response
}

/// Waits for the node to stop, turning the first SIGTERM or SIGINT into a graceful leave and
/// a second one into an immediate exit ([`SECOND_SIGNAL_EXIT_CODE`]).
pub(crate) async fn until_signal_or_stop(
    stop: mpsc::Sender<StopRequest>,
    finished: impl Future<Output = ShutdownReason>,
) -> ShutdownReason {
    let signals = tokio::spawn(leave_on_signal(stop));
    let reason = finished.await;
    signals.abort();
    reason
}

async fn leave_on_signal(stop: mpsc::Sender<StopRequest>) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => Some(term),
        Err(e) => {
            warn!(error = %e, "no SIGTERM handler; only SIGINT (Ctrl-C) makes the node leave");
            None
        }
    };
    let mut first = true;
    loop {
        let terminate = async {
            match term.as_mut() {
                Some(term) => {
                    term.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = terminate => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        if first {
            first = false;
            info!(
                "signal received: leaving the cluster (shards are handed off first; send it \
                 again to exit at once)"
            );
            let _ = stop.send(StopRequest::Leave).await;
        } else {
            warn!("second signal: exiting at once");
            std::process::exit(SECOND_SIGNAL_EXIT_CODE);
        }
    }
}

/// Logs why the node stopped, at WARN unless it left as asked.
pub(crate) fn log_shutdown(reason: &ShutdownReason) {
    match reason {
        ShutdownReason::Left => info!("left the cluster"),
        ShutdownReason::Downed | ShutdownReason::Removed => {
            warn!(?reason, "this node was removed from the cluster");
        }
        ShutdownReason::Orphaned => warn!(
            "every other member of the cluster this node was joining went down: stopped, \
             rather than lead a cluster of its own; start it again to join"
        ),
        ShutdownReason::IncompatibleConfig(why) => {
            warn!(%why, "the cluster refused this node's configuration");
        }
    }
}
