//! The metric handles one kind's task updates ([`KindGauges`]), registered once per kind so
//! that publishing them costs no label lookup.

use crate::metrics as m;

/// The kind's metric handles, registered once: a turn of the task's loop publishes them, and
/// looking them up by name and label every turn cost more than a small turn's work.
pub(super) struct KindGauges {
    pub(super) delivered: metrics::Counter,
    pub(super) entities: metrics::Gauge,
    pub(super) shards: metrics::Gauge,
    pub(super) buffered: metrics::Gauge,
    pub(super) unheard: metrics::Gauge,
}

impl KindGauges {
    pub(super) fn new(kind: &str) -> Self {
        KindGauges {
            delivered: metrics::counter!(m::SHARDING_DELIVERED_TOTAL, "kind" => kind.to_string()),
            entities: metrics::gauge!(m::SHARDING_ENTITIES, "kind" => kind.to_string()),
            shards: metrics::gauge!(m::SHARDING_SHARDS, "kind" => kind.to_string()),
            buffered: metrics::gauge!(m::SHARDING_BUFFERED, "kind" => kind.to_string()),
            unheard: metrics::gauge!(m::SHARDING_UNHEARD_REGIONS, "kind" => kind.to_string()),
        }
    }
}
