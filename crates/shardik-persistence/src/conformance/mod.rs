//! The rules every [`Store`] keeps, as checks any implementation runs in its tests
//! (`conformance::run_all(&store).await`). Each check uses persistence ids, kinds, fence scopes
//! and lease names of its own under a fresh prefix, so the checks can share one database with
//! other data. The lease checks wait for real leases to expire, so [`run_all`] takes a few
//! seconds; [`race_for_lease`] and [`check_tenures`] race contenders for one lease.
//!
//! The checks are grouped by the rules they hold a store to: `journal` (events, snapshots,
//! durable state, remembered entities), `fences`, `leases` and `lease_race`, and `delivery`
//! (marks, producer epochs and queues, removing a kind's data), over the `fixtures` they
//! share; this file runs them all.

mod delivery;
mod fences;
mod fixtures;
mod journal;
mod lease_race;
mod leases;

pub use delivery::{
    delivery_calls_are_refused, lease_names_by_prefix,
    marks_changing_one_producer_twice_are_malformed, marks_only_writes, marks_round_trip,
    marks_with_durable_state, producer_epochs_count_up, producer_queues_round_trip,
    refused_writes_change_no_marks, removing_a_kinds_data,
};
pub use fences::{
    fenced_writers_racing, fences_on_durable_state, fences_refuse_older_tokens,
    fences_within_one_batch,
};
pub use journal::{
    batch_answers_each_write, clashes_within_one_batch, deleted_events_keep_their_numbers,
    durable_state_moves_one_revision_at_a_time, events_by_tag_in_commit_order, journal_round_trip,
    manifests_round_trip, many_writes_in_one_batch, racing_writers_never_interleave,
    remembered_entities_per_shard, snapshots_latest_and_deletion,
    tags_and_empty_payloads_round_trip, taken_sequence_refuses_the_whole_write,
};
pub use lease_race::{Tenure, check_tenures, contend_for_lease, race_for_lease};
pub use leases::{
    lease_arguments_are_checked, leases_acquire_renew_release,
    leases_are_taken_over_only_after_expiry,
};

use crate::store::Store;

/// Runs every check. The delivery checks run on a store that keeps delivery data
/// ([`Store::keeps_delivery_data`]); one that does not must refuse the delivery calls.
pub async fn run_all<S: Store + ?Sized>(store: &S) {
    journal_round_trip(store).await;
    taken_sequence_refuses_the_whole_write(store).await;
    batch_answers_each_write(store).await;
    clashes_within_one_batch(store).await;
    tags_and_empty_payloads_round_trip(store).await;
    deleted_events_keep_their_numbers(store).await;
    snapshots_latest_and_deletion(store).await;
    durable_state_moves_one_revision_at_a_time(store).await;
    remembered_entities_per_shard(store).await;
    events_by_tag_in_commit_order(store).await;
    manifests_round_trip(store).await;
    fences_refuse_older_tokens(store).await;
    fences_within_one_batch(store).await;
    fences_on_durable_state(store).await;
    leases_acquire_renew_release(store).await;
    leases_are_taken_over_only_after_expiry(store).await;
    lease_arguments_are_checked(store).await;
    if store.keeps_delivery_data() {
        run_delivery(store).await;
    } else {
        delivery_calls_are_refused(store).await;
    }
}

/// Runs every check of reliable delivery's data (for a store that keeps it).
pub async fn run_delivery<S: Store + ?Sized>(store: &S) {
    marks_round_trip(store).await;
    marks_only_writes(store).await;
    refused_writes_change_no_marks(store).await;
    marks_changing_one_producer_twice_are_malformed(store).await;
    marks_with_durable_state(store).await;
    producer_epochs_count_up(store).await;
    producer_queues_round_trip(store).await;
    lease_names_by_prefix(store).await;
    removing_a_kinds_data(store).await;
}

/// Stores opened on the same data (`same`: the same file or database, opened again, maybe by
/// another process) have one identity; a store on other data (`other`) has another. The
/// identity is what nodes compare when one joins another, so it must not depend on who
/// opened the store, or how.
pub fn one_identity_per_store(same: &[&dyn Store], other: &dyn Store) {
    let first = same.first().expect("at least one store").identity();
    assert!(!first.is_empty(), "a store has an identity");
    for store in same {
        assert_eq!(
            store.identity(),
            first,
            "{} opened twice has two identities",
            store.location()
        );
    }
    assert_ne!(
        other.identity(),
        first,
        "{} and {} share an identity",
        other.location(),
        same[0].location()
    );
}
