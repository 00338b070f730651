//! Settings changed in code after they were loaded are checked when the node starts, as
//! loading checks a file: a bad value stops `start()` with an error naming the key, before the
//! node binds or joins anything.

mod common;

use shardik_runtime::Node;
use shardik_runtime::node::StartError;

#[tokio::test]
async fn a_value_changed_in_code_is_checked_at_start_and_named() {
    let port = common::free_port();
    let mut settings = common::fast_settings();
    settings.cluster.sharding.number_of_shards = 0;
    let Err(err) = Node::builder(settings)
        .bind(format!("127.0.0.1:{port}").parse().unwrap())
        .seeds([format!("127.0.0.1:{port}").parse().unwrap()])
        .start()
        .await
    else {
        panic!("a node with no shards started");
    };
    assert!(matches!(err, StartError::Settings(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("cluster.sharding.number-of-shards"),
        "the key is not named: {message}"
    );
    // Nothing was bound: the port is free for a node with valid settings.
    let node = Node::builder(common::fast_settings())
        .bind(format!("127.0.0.1:{port}").parse().unwrap())
        .seeds([format!("127.0.0.1:{port}").parse().unwrap()])
        .start()
        .await
        .expect("the port was left bound");
    node.wait_until_up().await.unwrap();
    node.leave().await;
}
