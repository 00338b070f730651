//! A node bound to port 0: the OS picks the port, and the node is known by the port it
//! bound: in its own address, in every member's view, and to whoever dials it.

use std::collections::BTreeSet;

use shardik_runtime::config::Settings;
use shardik_runtime::testkit::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_bound_to_port_0_form_a_cluster_under_the_ports_they_bound() {
    let cluster = TestCluster::start(3, Settings::reference())
        .await
        .expect("the test cluster comes up");
    let addresses: BTreeSet<String> = cluster
        .nodes()
        .iter()
        .map(|node| {
            let address = &node.self_node().address;
            assert_ne!(address.port, 0, "{address}");
            // Something listens there: the node itself.
            std::net::TcpStream::connect(address.to_string()).expect("the node's port answers");
            address.to_string()
        })
        .collect();
    assert_eq!(addresses.len(), 3, "three ports: {addresses:?}");
    for node in cluster.nodes() {
        let seen: BTreeSet<String> = node
            .handle()
            .snapshot()
            .members
            .iter()
            .map(|m| m.addr.address.to_string())
            .collect();
        assert_eq!(seen, addresses);
    }
    cluster.leave().await;
}
