//! [`KafkaPublisher`]: the Kafka sink's producer. Records go to one partition of the topic (0,
//! or a shared pipeline's slice's own), each keyed by its `id`, in a transaction that each
//! checkpoint commits ([`KafkaPublisher::commit`], before the checkpoint records the
//! partition's end offset). The transactional id is the pipeline's and the sink's (and the
//! partition's, past 0), so a restarted run (a slice's next owner) fences the one before it: whatever that one
//! had not committed is aborted, never seen by a `read_committed` consumer. What it committed
//! after its last checkpoint (it died between its commit and the checkpoint's) is read back from
//! the checkpoint's offset when the sink opens, and those records, made again by the replay,
//! are not produced twice; until the replay has made them all, each checkpoint records that
//! same offset, so a crash before then reads them back again.
//!
//! Without transactions (`transactions = false`, for brokers that have none) the producer is
//! idempotent, a checkpoint waits for every record's acknowledgement, and a recovery reads back
//! the ids past the checkpoint's offset all the same: a record produced again is one that was
//! still on its way to the brokers when the run before died, and has the same key.
//!
//! Used by the sinks (`emit::sink`); depends on `spec`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::spec::KafkaSinkSpec;

/// How long a transaction's commit (or the producer's start) may wait for the brokers.
const BROKER_WAIT: Duration = Duration::from_secs(120);

/// Why records could not be produced.
#[derive(Debug, thiserror::Error)]
#[error("kafka topic {topic} at {brokers}: {what}: {source}")]
pub struct KafkaSinkError {
    topic: String,
    brokers: String,
    what: &'static str,
    #[source]
    source: Box<KafkaError>,
}

/// The transactional id of a producer `base` writing `spec`'s partition: `base` for partition 0,
/// else with the partition after it (each slice of a shared pipeline its own).
fn transactional_id_of(base: &str, spec: &KafkaSinkSpec) -> String {
    match spec.partition {
        0 => base.to_owned(),
        p => format!("{base}-p{p}"),
    }
}

/// Produces to one partition of one topic, in transactions.
pub struct KafkaPublisher {
    producer: ThreadedProducer<Deliveries>,
    spec: KafkaSinkSpec,
    /// Ids the run before this one committed after the checkpoint this one resumes from: not
    /// produced again.
    already: HashSet<String>,
    /// Where those were read back from: while any of them is still to come, a checkpoint
    /// records this offset rather than the end, so that a later recovery reads them back again
    /// (a checkpoint taken before the replay reached them would otherwise forget them, and a
    /// run after it would produce them twice).
    read_from: Option<u64>,
}

impl KafkaPublisher {
    /// A transactional producer named `transactional_id`; with `committed` (a recovery), the
    /// ids committed past that offset are read back first.
    pub fn connect(
        spec: &KafkaSinkSpec,
        transactional_id: &str,
        committed: Option<u64>,
    ) -> Result<KafkaPublisher, KafkaSinkError> {
        let failed = |what, source| KafkaSinkError {
            topic: spec.topic.clone(),
            brokers: spec.kafka.clone(),
            what,
            source: Box::new(source),
        };
        let producer: ThreadedProducer<Deliveries> = producer_config(spec, transactional_id)
            .create_with_context(Deliveries::default())
            .map_err(|e| failed("cannot create the producer", e))?;
        if spec.transactions {
            producer
                .init_transactions(BROKER_WAIT)
                .map_err(|e| failed("cannot start its transactions", e))?;
        }
        // Without a checkpoint: nothing to read back, unless a run before may have committed
        // records without any checkpoint recording it (a slice's earlier owner).
        let committed = committed.or(spec.read_back_from);
        let already = match committed {
            Some(offset) => {
                read_back(spec, offset).map_err(|e| failed("cannot read it back", e))?
            }
            None => HashSet::new(),
        };
        if spec.transactions {
            producer
                .begin_transaction()
                .map_err(|e| failed("cannot begin a transaction", e))?;
        }
        Ok(KafkaPublisher {
            producer,
            spec: spec.clone(),
            already,
            read_from: committed,
        })
    }

    fn failed(&self, what: &'static str, source: KafkaError) -> KafkaSinkError {
        KafkaSinkError {
            topic: self.spec.topic.clone(),
            brokers: self.spec.kafka.clone(),
            what,
            source: Box::new(source),
        }
    }

    /// Produces one record keyed by `id`, unless the run before committed it already.
    pub fn publish(&mut self, id: Option<&str>, payload: &[u8]) -> Result<(), KafkaSinkError> {
        if let Some(id) = id
            && !self.already.is_empty()
            && self.already.remove(id)
        {
            return Ok(());
        }
        let key = id.unwrap_or("");
        loop {
            let record = BaseRecord::to(&self.spec.topic)
                .partition(self.spec.partition)
                .key(key)
                .payload(payload);
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((error, _)) => return Err(self.failed("cannot produce", error)),
            }
        }
    }

    /// Waits until every record produced so far reached the brokers (in the open transaction).
    pub fn flush(&mut self) -> Result<(), KafkaSinkError> {
        self.producer
            .flush(BROKER_WAIT)
            .map_err(|e| self.failed("cannot deliver", e))?;
        match self
            .producer
            .context()
            .failed
            .lock()
            .expect("deliveries lock")
            .clone()
        {
            Some(error) => Err(self.failed("a record was not delivered", error)),
            None => Ok(()),
        }
    }

    /// Commits the transaction and begins the next. Returns what the checkpoint records: the
    /// partition's end offset, or, while records the run before committed are still to come,
    /// the offset they were read back from.
    pub fn commit(&mut self) -> Result<u64, KafkaSinkError> {
        match self.spec.transactions {
            true => self
                .producer
                .commit_transaction(BROKER_WAIT)
                .map_err(|e| self.failed("cannot commit", e))?,
            false => self.flush()?,
        }
        let (_, high) = self
            .producer
            .client()
            .fetch_watermarks(&self.spec.topic, self.spec.partition, BROKER_WAIT)
            .map_err(|e| self.failed("cannot read its end offset", e))?;
        if self.spec.transactions {
            self.producer
                .begin_transaction()
                .map_err(|e| self.failed("cannot begin a transaction", e))?;
        }
        match self.read_from {
            // Records the run before committed are still to come: they are read back again.
            Some(from) if !self.already.is_empty() => Ok(from),
            _ => {
                self.read_from = None;
                Ok(high.max(0) as u64)
            }
        }
    }
}

/// The producer's context: it keeps the first record the brokers refused for good, which fails
/// the sink at every flush from then on (without transactions nothing else would say: the checkpoint
/// would record an offset past a record that is not there).
#[derive(Default)]
struct Deliveries {
    failed: std::sync::Mutex<Option<KafkaError>>,
}

impl rdkafka::ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, delivered: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = delivered {
            let mut failed = self.failed.lock().expect("deliveries lock");
            failed.get_or_insert_with(|| error.clone());
        }
    }
}

/// The producer's configuration: idempotent, and transactional under `transactional_id` unless
/// the sink is without transactions.
fn producer_config(spec: &KafkaSinkSpec, transactional_id: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &spec.kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5");
    if spec.transactions {
        config
            .set(
                "transactional.id",
                transactional_id_of(transactional_id, spec),
            )
            .set("transaction.timeout.ms", "120000");
    }
    config
}

/// The ids of the records committed to the sink's partition of the topic from `offset` on.
fn read_back(spec: &KafkaSinkSpec, offset: u64) -> Result<HashSet<String>, KafkaError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &spec.kafka)
        .set("group.id", "weir-read-back")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let (_, high) = consumer.fetch_watermarks(&spec.topic, spec.partition, BROKER_WAIT)?;
    let mut ids = HashSet::new();
    if high <= offset as i64 {
        return Ok(ids);
    }
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(&spec.topic, spec.partition, Offset::Offset(offset as i64))?;
    consumer.assign(&assignment)?;
    let started = Instant::now();
    let (deadline, mut quiet, mut moved) = (started + BROKER_WAIT, 0, false);
    while Instant::now() < deadline && quiet < 10 {
        let position = consumer
            .position()?
            .find_partition(&spec.topic, spec.partition)
            .and_then(|p| p.offset().to_raw())
            .unwrap_or(offset as i64);
        // Transaction markers take offsets too: the end may be past the last record.
        if position >= high {
            break;
        }
        moved |= position > offset as i64;
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                (moved, quiet) = (true, 0);
                if let Some(key) = message.key() {
                    ids.insert(String::from_utf8_lossy(key).into_owned());
                }
                if message.offset() + 1 >= high {
                    break;
                }
            }
            Some(Err(error)) => tracing::warn!(%error, "reading a kafka sink back"),
            // Nothing more to read: only aborted records or markers are left. Before anything
            // has been read, silence is the brokers being slow to answer (a loaded machine):
            // stopping then would miss committed records and produce them twice.
            None if moved || started.elapsed() > Duration::from_secs(30) => quiet += 1,
            None => {}
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_the_brokers_refuse_for_good_fails_the_sink_without_transactions() {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext> =
            MockCluster::new(1).unwrap();
        cluster.create_topic("results", 1, 1).unwrap();
        let spec = KafkaSinkSpec {
            kafka: cluster.bootstrap_servers(),
            topic: "results".into(),
            transactions: false,
            partition: 0,
            read_back_from: None,
        };
        let mut sink = KafkaPublisher::connect(&spec, "weir-p-results", None).unwrap();
        sink.publish(Some("a"), b"{}").unwrap();
        assert!(sink.commit().is_ok(), "delivered");
        let refused = [RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 8];
        cluster.request_errors(RDKafkaApiKey::Produce, &refused);
        sink.publish(Some("b"), b"{}").unwrap();
        let failed = sink
            .commit()
            .expect_err("no offset past a record not delivered");
        assert!(failed.to_string().contains("not delivered"), "{failed}");
    }

    #[test]
    fn a_sink_without_transactions_has_an_idempotent_producer_and_no_transactional_id() {
        let mut spec = KafkaSinkSpec {
            kafka: "127.0.0.1:9092".into(),
            topic: "results".into(),
            transactions: true,
            partition: 2,
            read_back_from: None,
        };
        let config = producer_config(&spec, "weir-p-results");
        assert_eq!(config.get("transactional.id"), Some("weir-p-results-p2"));
        spec.transactions = false;
        let config = producer_config(&spec, "weir-p-results");
        assert_eq!(config.get("transactional.id"), None);
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("acks"), Some("all"));
    }
}
