//! [`NatsFeed`]: one JetStream consumer shared by several runs of one pipeline in a process
//! (a worker's slices, each a run over the whole stream that keeps its own key groups). Each
//! run reads through a [`FeedSource`], which subscribes from its own position; the feed reads
//! the stream once, from the lowest position subscribed (going back when a run that is behind
//! subscribes), and hands each message to every run that has not had it, waiting for the
//! slowest (backpressure): at most [`DEPTH`] messages queued for a run, and at most
//! [`MAX_QUEUED_BYTES`] of payloads not yet taken by every run, whatever their size. Without
//! it, every slice read the stream over the network again.
//!
//! Depends on `spec`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::nats::{Decoded, Framing, NatsSource, StreamEnd, Taken, decode_lines};
use super::{Record, Source, SourceError, SourcePosition};
use crate::spec::NatsSourceSpec;

/// Messages queued for one run before the feed waits for it.
const DEPTH: usize = 4_096;
/// Bytes of payloads handed out and not yet dropped by every run they went to, before the feed
/// waits (messages of up to a server's `max_payload` each: [`DEPTH`] of them could be
/// gigabytes).
const MAX_QUEUED_BYTES: usize = 64 << 20;
/// How long a read waits for the next message before yielding a tick.
const TICK: Duration = Duration::from_millis(100);

/// The key and time fields lines are decoded with.
type Fields = (String, String);

/// One message, shared by the runs it is handed to.
struct FeedMessage {
    sequence: u64,
    subject: Arc<str>,
    published: i64,
    payload: bytes::Bytes,
    /// Its lines decoded by the first run that frames it and decodes for the others, with the
    /// key and time fields it decoded with: a run of other fields (a spec redeployed since)
    /// decodes for itself.
    decoded: std::sync::OnceLock<(Arc<Fields>, Decoded)>,
    /// The feed's count of what it handed out, which this message leaves when the last run
    /// drops it.
    queued: Arc<Queued>,
}

/// Messages handed out and not yet dropped by every run, and their payloads' bytes.
#[derive(Default)]
struct Queued {
    messages: AtomicUsize,
    bytes: AtomicUsize,
}

impl Queued {
    fn add(&self, bytes: usize) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether the feed waits before it reads on, with `runs` runs: more than
    /// [`MAX_QUEUED_BYTES`] are out, and more messages than one a run (slack, so that a
    /// message bigger than the budget never stops the feed alone). A run lets a message go
    /// once it has framed it; its decoded events, kept with the message for the other runs,
    /// are not counted.
    fn full(&self, runs: usize) -> bool {
        self.bytes.load(Ordering::Relaxed) > MAX_QUEUED_BYTES
            && self.messages.load(Ordering::Relaxed) > runs
    }
}

impl Drop for FeedMessage {
    fn drop(&mut self) {
        self.queued.messages.fetch_sub(1, Ordering::Relaxed);
        (self.queued.bytes).fetch_sub(self.payload.len(), Ordering::Relaxed);
    }
}

/// Waits while `queued` is full for `runs` runs, or until `stop`.
fn wait_for_room(queued: &Queued, runs: usize, stop: &AtomicBool) {
    while queued.full(runs) && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A message, or the error that stops every run reading the feed (shared among them).
type Delivery = Result<Arc<FeedMessage>, Arc<SourceError>>;

/// A run reading the feed: the last sequence it has had, and its queue.
struct Subscriber {
    after: u64,
    queue: SyncSender<Delivery>,
}

/// A consumer of one stream whose messages go to every subscribed run.
pub struct NatsFeed {
    stream: String,
    inbox: Arc<Mutex<Vec<Subscriber>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    end: StreamEnd,
}

impl std::fmt::Debug for NatsFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsFeed")
            .field("stream", &self.stream)
            .finish()
    }
}

impl NatsFeed {
    /// Starts reading `spec`'s stream for the runs that subscribe.
    pub fn start(spec: NatsSourceSpec) -> Result<NatsFeed, SourceError> {
        let stream = spec.stream.clone();
        let reader = NatsSource::new(spec)?;
        let end = reader.end();
        let inbox = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("weir-nats-feed".into())
            .spawn({
                let (inbox, stop) = (inbox.clone(), stop.clone());
                move || feed(reader, &inbox, &stop)
            })
            .map_err(|e| SourceError::new(&format!("nats stream {stream}"), e))?;
        Ok(NatsFeed {
            stream,
            inbox,
            stop,
            thread: Some(thread),
            end,
        })
    }

    /// A source for one run, reading from the feed from where the run resumes; with `decoding`
    /// (its key and time fields), each line is decoded once, by the first run of those fields
    /// that frames its message, for all of them (each would otherwise decode every line).
    pub fn source(&self, decoding: Option<(String, String)>) -> FeedSource {
        FeedSource {
            stream: self.stream.clone(),
            inbox: self.inbox.clone(),
            queue: None,
            framing: Framing::default(),
            end: self.end.clone(),
            decoder: decoding.map(|(key, time)| {
                let decoder = crate::event::Decoder::new(&key, &time);
                (Arc::new((key, time)), decoder)
            }),
        }
    }
}

impl Drop for NatsFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.inbox.lock().expect("feed lock").clear();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The feed's loop: take new subscribers (going back for one that is behind), read, deliver.
fn feed(mut reader: NatsSource, inbox: &Mutex<Vec<Subscriber>>, stop: &AtomicBool) {
    let mut subscribers: Vec<Subscriber> = Vec::new();
    let queued = Arc::new(Queued::default());
    while !stop.load(Ordering::SeqCst) {
        wait_for_room(&queued, subscribers.len(), stop);
        let joined: Vec<Subscriber> = std::mem::take(&mut *inbox.lock().expect("feed lock"));
        if let Some(behind) = joined.iter().map(|s| s.after).min()
            && (subscribers.is_empty() || behind < reader.framing_sequence())
        {
            let _ = reader.resume(&SourcePosition {
                offset: behind,
                ..SourcePosition::default()
            });
        }
        subscribers.extend(joined);
        if subscribers.is_empty() {
            std::thread::sleep(TICK);
            continue;
        }
        let Taken {
            message,
            sequence,
            published,
        } = match reader.next_message() {
            Ok(Some(taken)) => taken,
            Ok(None) => continue,
            Err(e) => {
                // The stream cannot be read at all (no such stream): every run fails with it.
                let e = Arc::new(e);
                for subscriber in subscribers.drain(..) {
                    let _ = subscriber.queue.try_send(Err(e.clone()));
                }
                std::thread::sleep(TICK);
                continue;
            }
        };
        if sequence <= reader.framing_sequence() {
            continue;
        }
        reader.skip_to(sequence);
        queued.add(message.payload.len());
        let shared = Arc::new(FeedMessage {
            sequence,
            subject: message.subject.as_str().into(),
            published,
            payload: message.payload.clone(),
            decoded: std::sync::OnceLock::new(),
            queued: queued.clone(),
        });
        // A run that stopped has dropped its queue: it is forgotten.
        subscribers.retain_mut(|subscriber| {
            if sequence <= subscriber.after {
                return true;
            }
            subscriber.after = sequence;
            subscriber.queue.send(Ok(shared.clone())).is_ok()
        });
    }
}

/// One run's reading of a [`NatsFeed`]: the same records a [`NatsSource`] of its own would
/// give, from the position the run resumes at.
pub struct FeedSource {
    stream: String,
    inbox: Arc<Mutex<Vec<Subscriber>>>,
    queue: Option<Receiver<Delivery>>,
    framing: Framing,
    /// The last sequence on the stream's subjects, as the feed's reader keeps it.
    end: StreamEnd,
    /// Its fields and decoder, if it shares its decoding: used for the messages it frames
    /// first.
    decoder: Option<(Arc<Fields>, crate::event::Decoder)>,
}

impl FeedSource {
    /// Hands the run the decoded events of key groups outside `owned` without their fields: it
    /// takes their time and key only (the router routes them nowhere). Not for a run whose
    /// dead letters are written (it shows whole events) or whose watermark partitions are a
    /// field's.
    pub fn owning(mut self, owned: std::ops::Range<u32>) -> Self {
        self.framing.owned = Some(owned);
        self
    }

    fn fail(&self, error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SourceError {
        SourceError::new(
            &format!("nats stream {}", self.stream),
            std::io::Error::other(error),
        )
    }
}

impl Source for FeedSource {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        if let Some(line) = self.framing.take_pending() {
            return Ok(Some(line));
        }
        let queue = self.queue.get_or_insert_with(|| {
            let (queue, receiver) = sync_channel(DEPTH);
            let after = self.framing.position().offset;
            self.inbox
                .lock()
                .expect("feed lock")
                .push(Subscriber { after, queue });
            receiver
        });
        match queue.recv_timeout(TICK) {
            Ok(Ok(message)) => Ok(Some(self.framing.frame_decoded(
                message.sequence,
                &message.subject,
                message.published,
                message.payload.clone(),
                || {
                    let (ours, decoder) = self.decoder.as_mut()?;
                    let decode = || {
                        let lines = decode_lines(decoder, message.sequence, &message.payload);
                        (ours.clone(), lines)
                    };
                    let (theirs, decoded) = message.decoded.get_or_init(decode);
                    (theirs == ours).then(|| decoded.clone())
                },
            ))),
            Ok(Err(e)) => Err(self.fail(e)),
            Err(RecvTimeoutError::Timeout) => Ok(Some(Record::Tick)),
            Err(RecvTimeoutError::Disconnected) => Err(self.fail("the shared reader stopped")),
        }
    }

    fn position(&self) -> SourcePosition {
        self.framing.position()
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        self.framing.resume(position);
        self.queue = None;
        Ok(())
    }

    fn backlog(&self) -> Option<u64> {
        self.end.behind(self.framing.position().offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: usize, queued: &Arc<Queued>) -> Arc<FeedMessage> {
        queued.add(bytes);
        Arc::new(FeedMessage {
            sequence: 1,
            subject: "s".into(),
            published: 0,
            payload: bytes::Bytes::from(vec![b'x'; bytes]),
            decoded: std::sync::OnceLock::new(),
            queued: queued.clone(),
        })
    }

    #[test]
    fn the_feed_waits_while_more_than_its_bytes_are_queued_until_the_last_run_drops_them() {
        let (queued, stop) = (Arc::new(Queued::default()), AtomicBool::new(false));
        // One run reading a big message, and another message queued behind it.
        let reading = message(MAX_QUEUED_BYTES, &queued);
        let waiting = message(2, &queued);
        let (for_one, for_other) = (waiting.clone(), waiting.clone());
        drop(waiting);
        assert!(queued.full(1), "two runs hold the queued one");
        let started = std::time::Instant::now();
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(for_one);
            std::thread::sleep(Duration::from_millis(50));
            drop(for_other);
        });
        wait_for_room(&queued, 1, &stop);
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "until both dropped it"
        );
        dropper.join().unwrap();
        // What each run is reading alone never holds the feed back, however big.
        assert!(!queued.full(1));
        drop(reading);
        assert_eq!(queued.bytes.load(Ordering::Relaxed), 0);
        let (_one, _two) = (message(MAX_QUEUED_BYTES, &queued), message(2, &queued));
        stop.store(true, Ordering::SeqCst);
        wait_for_room(&queued, 1, &stop); // a stop does not wait
    }
}
