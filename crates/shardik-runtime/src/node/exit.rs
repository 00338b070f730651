//! Exit tasks: the work a node does between becoming Exiting and confirming it, the part of
//! the reference's coordinated shutdown that lies between leaving and exit-done.
//!
//! Whatever layer runs on a node (sharding registers "hand my shards off") adds a task here.
//! When the membership core reports this node Exiting, however the leave was asked for (a
//! signal, `PUT /cluster/members/{address}`, [`NodeHandle::leave`](super::handle::NodeHandle::leave)
//! on any node), the driver runs every task in registration order and only then confirms
//! Exiting, upon which the leader removes the node and it stops. The node core
//! (`shardik_core::node::NodeCore`) gives up on tasks that overrun the leave timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tracing::debug;

/// The future of one exit task.
pub type ExitFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

type Task = Arc<dyn Fn() -> ExitFuture + Send + Sync>;

/// The exit tasks of one node (cheap to clone: clones share the list).
#[derive(Clone, Default)]
pub struct ExitTasks {
    tasks: Arc<Mutex<Vec<(String, Task)>>>,
}

impl std::fmt::Debug for ExitTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ExitTasks {
    /// Adds a task, run after those registered before it.
    pub fn register(&self, name: &str, task: impl Fn() -> ExitFuture + Send + Sync + 'static) {
        self.lock().push((name.to_string(), Arc::new(task)));
    }

    /// The registered tasks' names, in the order they run.
    pub fn names(&self) -> Vec<String> {
        self.lock().iter().map(|(n, _)| n.clone()).collect()
    }

    /// Whether no task is registered (the exit is then confirmed at once).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Runs every task in order. (How long they may take is the node core's rule: it
    /// confirms Exiting anyway when they overrun the leave timeout.)
    pub async fn run(&self) {
        let tasks: Vec<(String, Task)> = self.lock().clone();
        for (name, task) in tasks {
            debug!(task = %name, "running exit task");
            task().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Task)>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn tasks_run_in_order_and_a_stuck_one_holds_the_rest_back() {
        let tasks = ExitTasks::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let order = Arc::clone(&order);
            tasks.register(&format!("t{i}"), move || {
                let order = Arc::clone(&order);
                Box::pin(async move { order.lock().unwrap().push(i) })
            });
        }
        tasks.run().await;
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        let after = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&after);
        tasks.register("stuck", || Box::pin(std::future::pending()));
        tasks.register("never reached", move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {})
        });
        let stuck = tokio::time::timeout(Duration::from_millis(50), tasks.run()).await;
        assert!(stuck.is_err(), "a stuck task holds the rest back");
        assert_eq!(after.load(Ordering::SeqCst), 0);
        assert_eq!(tasks.names().len(), 5);
    }
}
