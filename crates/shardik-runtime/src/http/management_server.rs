//! The management API a node serves on its own port: bound before the node joins (so a port
//! in use or a bad token or TLS file stops it first), then serving Akka Management's routes
//! with the application's own beside them ([`crate::cluster_node::Node::merge_routes`]).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use shardik_config::Settings;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt;
use tracing::info;

use super::answer::not_found;
use super::api::ManagementApi;
use super::guard::WriteGuard;
use super::serve::{HttpLimits, serve_https, serve_with};
use crate::metrics::MetricsHandle;
use crate::node::{RunningNode, StartError};
use crate::sharding::Sharding;
use shardik_transport::tls::TlsContext;

/// How long the management API may take to finish its requests in flight once the node has
/// stopped.
const HTTP_DRAIN: Duration = Duration::from_secs(2);

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
            Some(tls) => crate::task::spawn(serve_https(
                self.listener,
                router,
                self.limits,
                tls,
                stopped,
            )),
            None => crate::task::spawn(serve_with(self.listener, router, self.limits, stopped)),
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
                .fallback(not_found),
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
                    None => not_found(request.uri().clone()).await,
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
