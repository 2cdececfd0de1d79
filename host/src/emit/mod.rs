//! Output: the JSON Lines records Weir writes (results, enriched events, late events, dead
//! letters) and the sinks that receive them. Depends on `event`, `field_name`, `hashing`,
//! `nats_client`, `spec`, `time`, `value` and `window`; the Kafka sink on `rdkafka`.

mod kafka;
mod nats;
mod record;
mod sink;

pub use record::{
    EventResult, OperatorLabel, ResultRecord, WindowResult, dead_letter_record, event_record,
    late_record, output_id, result_record, result_records,
};
pub use sink::{Record, SinkError, SinkWriter};
