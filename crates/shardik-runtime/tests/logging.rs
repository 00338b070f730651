//! What a team reads in the log: every line names the node that wrote it (two nodes share this
//! process), and a graceful leave of a node holding many shards is told in a few INFO lines,
//! none of them a warning.

mod common;

use serde::{Deserialize, Serialize};
use shardik_runtime::Node;
use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, EntityTypeKey, ReplyTo};

/// Starts the entity, and says so.
#[derive(Serialize, Deserialize)]
struct Touch(ReplyTo<()>);

#[derive(Default)]
struct Touched;

impl Entity for Touched {
    type Command = Touch;
    async fn handle(&mut self, Touch(reply_to): Touch, _ctx: &mut EntityContext<Self>) {
        reply_to.send(());
    }
}

const TOUCHED: EntityTypeKey<Touched> = EntityTypeKey::new("touched");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_name_their_node_and_a_leave_of_many_shards_is_a_few_info_lines() {
    let captured = common::LogSink::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let first: shardik_core::membership::Address = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    let second: shardik_core::membership::Address = format!("127.0.0.1:{}", common::free_port())
        .parse()
        .unwrap();
    let a = Node::builder(common::fast_settings())
        .bind(first.clone())
        .seeds([first.clone()])
        .start()
        .await
        .unwrap();
    a.wait_until_up().await.unwrap();
    let b = Node::builder(common::fast_settings())
        .bind(second.clone())
        .seeds([first.clone()])
        .start()
        .await
        .unwrap();
    b.wait_until_up().await.unwrap();
    for node in [&a, &b] {
        node.sharding()
            .init(EntityKind::for_key(TOUCHED, |_id| Touched))
            .unwrap();
    }
    // Enough entities that nearly every one of the 1,000 shards has a home, spread over both.
    for i in 0..4_000 {
        let entity = a
            .sharding()
            .entity_ref_for(TOUCHED, &format!("e-{i}"))
            .unwrap();
        entity.ask(Touch, common::BOUND).await.unwrap();
    }
    let on_second = b.sharding().entity_ref_for(TOUCHED, "probe").unwrap();
    on_second.ask(Touch, common::BOUND).await.unwrap();

    let before_leave = captured.text().len();
    assert_eq!(
        b.leave().await,
        shardik_core::membership::ShutdownReason::Left
    );
    // The coordinator's summary follows the last hand-off; give the first node a moment.
    common::eventually("the hand-off round is told", || {
        captured.text()[before_leave..].contains("handed off")
    })
    .await;

    let all = captured.text();
    let unnamed: Vec<&str> = all
        .lines()
        .filter(|line| !line.contains("node{node="))
        .collect();
    assert!(
        unnamed.is_empty(),
        "lines without their node:\n{}",
        unnamed.join("\n")
    );
    for address in [&first, &second] {
        assert!(
            all.contains(&format!("node{{node={address}}}")),
            "no line of {address}:\n{all}"
        );
    }
    let leave_lines: Vec<&str> = all[before_leave..].lines().collect();
    let alarming: Vec<&&str> = leave_lines
        .iter()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect();
    assert!(
        alarming.is_empty(),
        "a graceful leave warned:\n{}",
        leave_lines.join("\n")
    );
    // Hundreds of shards moved, and the story of the leave, told by both nodes, stays a dozen
    // lines or so.
    let summary = leave_lines
        .iter()
        .find(|line| line.contains("handed off"))
        .expect("the hand-off round is told");
    let moved: usize = summary
        .split("handed off ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no shard count in {summary}"));
    assert!(moved >= 200, "only {moved} shards moved: {summary}");
    // Each node tells its view of Leaving, Exiting, Removed and any change of leader (one or
    // two, by timing), the leaving node its exit tasks and stop, the coordinator its round: 12
    // to 14 lines seen, none per shard.
    assert!(
        leave_lines.len() <= 20,
        "{} INFO lines for one leave:\n{}",
        leave_lines.len(),
        leave_lines.join("\n")
    );
    drop(a);
}
