//! The node's store: `persistence.store` is where the node's entities go unless the code hands
//! a kind another store, it is opened once, and a store that cannot be opened stops a node
//! that asked for it at start.

mod common;

use std::sync::Arc;
use std::time::Duration;

use shardik_runtime::config::Settings;
use shardik_runtime::node::StartError;
use shardik_runtime::persistence::{MemoryStore, Store};
use shardik_runtime::{Node, NodeBuilder};

fn node_on_free_port(settings: Settings) -> NodeBuilder {
    let mut settings = settings;
    settings.cluster.seed_node_timeout = Duration::from_millis(300);
    settings.cluster.periodic_tasks_initial_delay = Duration::from_millis(50);
    let address: shardik_core::membership::Address = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    Node::builder(settings)
        .bind(address.clone())
        .seeds([address])
}

fn settings_with_store(url: &str) -> Settings {
    let mut settings = Settings::load_with_env(None, &[]).unwrap();
    settings.persistence.store = url.to_string();
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_store_is_the_nodes_store_opened_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.db");
    let node = node_on_free_port(settings_with_store(&format!("sqlite:{}", file.display())))
        .start()
        .await
        .unwrap();
    // Nothing opened yet: a node whose entities persist nothing has no file.
    assert!(!file.exists(), "the store was opened before anyone asked");
    let first = node.persistence().await.unwrap();
    assert!(file.exists(), "persistence.store was not the store opened");
    let again = node.persistence().await.unwrap();
    assert!(
        Arc::ptr_eq(first.store(), again.store()),
        "a second call opened a second store"
    );
    node.leave().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_store_is_a_file_in_the_data_directory_which_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let mut settings = settings_with_store("");
    settings.persistence.data_dir = data_dir.display().to_string();
    let node = node_on_free_port(settings).start().await.unwrap();
    node.persistence().await.unwrap();
    assert!(
        data_dir.join("shardik.db").exists(),
        "the default store is not {}/shardik.db",
        data_dir.display()
    );
    node.leave().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_given_to_the_builder_wins_over_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-used.db");
    let given: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let node = node_on_free_port(settings_with_store(&format!("sqlite:{}", file.display())))
        .store(Arc::clone(&given))
        .start()
        .await
        .unwrap();
    let persistence = node.persistence().await.unwrap();
    assert!(Arc::ptr_eq(persistence.store(), &given));
    assert!(!file.exists(), "the configured store was opened too");
    node.leave().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_opened_stops_a_node_that_asked_for_it_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}/no-such-dir/bank.db", dir.path().display());
    let err = node_on_free_port(settings_with_store(&url))
        .persistence()
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::Store { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("no-such-dir") && text.contains("persistence.store"),
        "{text}"
    );
    assert!(
        !dir.path().join("no-such-dir").exists(),
        "a directory was created for a mistyped path"
    );

    // Without asking at start, the node runs, and the store's error comes when it is asked.
    let node = node_on_free_port(settings_with_store(&url))
        .start()
        .await
        .unwrap();
    let err = node.persistence().await.unwrap_err().to_string();
    assert!(err.contains("no-such-dir"), "{err}");
    node.leave().await;
}

/// A node on `url` that joins through `seed`, opening its store before it joins.
fn joiner_on_store(url: &str, seed: &shardik_core::membership::Address) -> NodeBuilder {
    node_on_free_port(settings_with_store(url))
        .seeds([seed.clone()])
        .persistence()
}

/// A node on `url` that joined through `seed` and is Up.
async fn joined(url: &str, seed: &shardik_core::membership::Address) -> Node {
    let node = joiner_on_store(url, seed).start().await.unwrap();
    tokio::time::timeout(common::BOUND, node.wait_until_up())
        .await
        .unwrap_or_else(|_| panic!("the node on {url} was not let in"))
        .unwrap();
    node
}

/// One store per cluster: a node whose store is another file is refused at join, with a
/// message naming both stores and the fix, and stops (exit code 4); a node on the same file,
/// reached through another path, joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_another_store_is_refused_naming_both_stores() {
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("cluster.db");
    let first = node_on_free_port(settings_with_store(&format!("sqlite:{}", ours.display())))
        .persistence()
        .start()
        .await
        .unwrap();
    first.wait_until_up().await.unwrap();
    let seed = first.self_node().address.clone();

    let theirs = dir.path().join("own.db");
    let refused = joiner_on_store(&format!("sqlite:{}", theirs.display()), &seed)
        .start()
        .await
        .unwrap();
    let reason = tokio::time::timeout(common::BOUND, refused.wait())
        .await
        .expect("the joiner on another store was neither refused nor stopped");
    let shardik_core::membership::ShutdownReason::IncompatibleConfig(why) = &reason else {
        panic!("stopped for another reason: {reason:?}");
    };
    assert_eq!(reason.exit_code(), 4);
    for part in [
        "`persistence.store` differs",
        &format!("sqlite:{}", ours.display()),
        &format!("sqlite:{}", theirs.display()),
        "one PostgreSQL server",
        "one SQLite file",
    ] {
        assert!(why.contains(part), "{part:?} missing from: {why}");
    }

    // The same file under another name is the same store.
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&ours, &link).unwrap();
    let welcome = joined(&format!("sqlite:{}", link.display()), &seed).await;
    assert_eq!(
        welcome.persistence().await.unwrap().store().identity(),
        first.persistence().await.unwrap().store().identity()
    );
    welcome.leave().await;
    first.leave().await;
}

/// With `enforce-on-join` off on the member, a node on another store is let in (the member
/// warns, as for every other key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_on_join_off_lets_a_node_on_another_store_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings =
        settings_with_store(&format!("sqlite:{}", dir.path().join("a.db").display()));
    settings
        .cluster
        .configuration_compatibility_check
        .enforce_on_join = false;
    let first = node_on_free_port(settings)
        .persistence()
        .start()
        .await
        .unwrap();
    first.wait_until_up().await.unwrap();
    let seed = first.self_node().address.clone();
    let other = joined(
        &format!("sqlite:{}", dir.path().join("b.db").display()),
        &seed,
    )
    .await;
    other.leave().await;
    first.leave().await;
}
