//! Request bodies being received: the server's budget of body bytes in memory, shared so that
//! no one caller or pipeline can take it all, and the minimum rate a body must arrive at, so
//! that a sender trickling bytes cannot hold a connection and its handler for long.
//!
//! A body is charged the bytes it has delivered, as they arrive, against three budgets at once:
//! the server's (`--max-inflight`), its token's (half of the server's) and, for a pipeline's
//! routes, the pipeline's (a quarter); the charge is held until the request is answered (the
//! handler keeps the bytes until then). A body whose next bytes no budget has room for is
//! refused with `503` and `Retry-After`, saying which budget was spent, so a flood from one
//! token, or at one pipeline, leaves room for every other; a request arriving while its budget
//! is already spent is refused before any of its body is read. A sender that holds a
//! connection open while sending little holds almost nothing: a body must also keep up with
//! [`BodyPolicy::min_rate`] after a grace period (the header timeout), or it is cut off and
//! answered `408`.
//!
//! Depends on nothing outside `api`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// How request bodies are received.
#[derive(Debug, Clone, Copy)]
pub struct BodyPolicy {
    /// The most body bytes held at once over all requests.
    pub max_inflight: usize,
    /// The slowest a body may arrive once its grace has passed, in bytes per second.
    pub min_rate: u64,
    /// How long a body may take before the rate is held against it.
    pub grace: Duration,
}

/// The default minimum body rate: 64 KiB/s.
pub const DEFAULT_MIN_BODY_RATE: u64 = 64 << 10;

impl Default for BodyPolicy {
    fn default() -> Self {
        BodyPolicy {
            max_inflight: super::DEFAULT_MAX_INFLIGHT,
            min_rate: DEFAULT_MIN_BODY_RATE,
            grace: Duration::from_secs(10),
        }
    }
}

/// Why a body was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The server's budget is spent.
    Server,
    /// The caller's token's share is spent.
    Token,
    /// The pipeline's share is spent.
    Pipeline,
    /// It arrived slower than the minimum rate.
    TooSlow,
}

impl Refusal {
    /// The label of `weir_request_bodies_refused_total`.
    pub(super) fn label(self) -> &'static str {
        match self {
            Refusal::Server => "server",
            Refusal::Token => "token",
            Refusal::Pipeline => "pipeline",
            Refusal::TooSlow => "too_slow",
        }
    }

    /// What the caller is told: `503` with `Retry-After` for a spent budget.
    pub(super) fn message(self) -> &'static str {
        match self {
            Refusal::Server => {
                "the server holds as many request body bytes as it allows (--max-inflight); nothing of this request was kept: retry shortly"
            }
            Refusal::Token => {
                "this token's requests hold as many body bytes as one token may (half of --max-inflight); nothing of this request was kept: retry shortly"
            }
            Refusal::Pipeline => {
                "this pipeline's requests hold as many body bytes as one pipeline may (a quarter of --max-inflight); nothing of this request was kept: retry shortly"
            }
            Refusal::TooSlow => {
                "the request body arrived slower than the server accepts (--min-body-rate, after --header-timeout); nothing of it was kept: send it again, faster"
            }
        }
    }
}

/// Budgets of KiB, one per name, each made on first use and forgotten once nothing holds it
/// (so names that come and go leave nothing behind).
struct Shares {
    capacity: u32,
    by_name: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Shares {
    fn new(capacity: u32) -> Self {
        Shares {
            capacity: capacity.max(1),
            by_name: Mutex::new(HashMap::new()),
        }
    }

    /// `kib` of `name`'s share (at most its whole share), or `None` when it has not that much
    /// left.
    fn take(&self, name: &str, kib: u32) -> Option<OwnedSemaphorePermit> {
        let mut by_name = self.by_name.lock().expect("shares lock");
        let share = by_name
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.capacity as usize)));
        share
            .clone()
            .try_acquire_many_owned(kib.min(self.capacity))
            .ok()
    }

    /// Whether `name`'s share has room for one more KiB.
    fn has_room(&self, name: &str) -> bool {
        (self.by_name.lock().expect("shares lock").get(name))
            .is_none_or(|share| share.available_permits() > 0)
    }

    /// Forgets `name`'s share if nothing holds any of it.
    fn forget_if_unused(&self, name: &str) {
        let mut by_name = self.by_name.lock().expect("shares lock");
        if by_name
            .get(name)
            .is_some_and(|share| share.available_permits() == self.capacity as usize)
        {
            by_name.remove(name);
        }
    }
}

/// The budgets of body bytes in flight.
pub(super) struct Bodies {
    policy: BodyPolicy,
    server: Arc<Semaphore>,
    tokens: Shares,
    pipelines: Shares,
}

impl Bodies {
    pub(super) fn new(policy: BodyPolicy) -> Arc<Self> {
        let server_kib =
            u32::try_from(policy.max_inflight.div_ceil(1024).max(1)).unwrap_or(u32::MAX >> 3);
        Arc::new(Bodies {
            policy,
            server: Arc::new(Semaphore::new(server_kib as usize)),
            tokens: Shares::new(server_kib / 2),
            pipelines: Shares::new(server_kib / 4),
        })
    }

    /// Admits a body from token `token` (`None`: an open server) to `pipeline` (for a
    /// pipeline's routes), charged nothing yet; refused at once when one of its budgets is
    /// already spent.
    pub(super) fn admit(
        self: &Arc<Self>,
        token: Option<&str>,
        pipeline: Option<&str>,
    ) -> Result<Admission, Refusal> {
        if self.server.available_permits() == 0 {
            return Err(Refusal::Server);
        }
        let token = token.unwrap_or_default().to_owned();
        if !self.tokens.has_room(&token) {
            return Err(Refusal::Token);
        }
        if pipeline.is_some_and(|p| !self.pipelines.has_room(p)) {
            return Err(Refusal::Pipeline);
        }
        Ok(Admission {
            bodies: self.clone(),
            token,
            pipeline: pipeline.map(str::to_owned),
            bytes: 0,
            kib: 0,
            permits: Vec::new(),
        })
    }

    /// `body`, charged to `admission` as it arrives and held to the minimum rate: the first
    /// refusal is recorded in `refused` (the body then fails, and whoever reads it gets an
    /// error).
    pub(super) fn paced(
        &self,
        body: Body,
        admission: Arc<Mutex<Admission>>,
        refused: Arc<Mutex<Option<Refusal>>>,
    ) -> Body {
        Body::new(PacedBody {
            inner: body,
            started: Instant::now(),
            received: 0,
            min_rate: self.policy.min_rate.max(1),
            grace: self.policy.grace,
            timer: Box::pin(tokio::time::sleep(self.policy.grace)),
            admission,
            refused,
        })
    }
}

/// A body's place in the budgets: what it has been charged, given back when dropped.
pub(super) struct Admission {
    bodies: Arc<Bodies>,
    token: String,
    pipeline: Option<String>,
    bytes: u64,
    kib: u32,
    permits: Vec<OwnedSemaphorePermit>,
}

impl Admission {
    /// Charges `bytes` more, or says which budget has no room for them. A body larger than
    /// the smallest budget it is charged to holds all of that budget, and no more: alone, it
    /// still passes (its size is bounded by `--max-upload`).
    pub(super) fn charge(&mut self, bytes: u64) -> Result<(), Refusal> {
        self.bytes += bytes;
        let bodies = &self.bodies;
        let cap = match &self.pipeline {
            Some(_) => bodies.pipelines.capacity,
            None => bodies.tokens.capacity,
        };
        let needed = u32::try_from(self.bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(cap);
        let more = needed.saturating_sub(self.kib);
        if more == 0 {
            return Ok(());
        }
        let server = bodies.server.clone().try_acquire_many_owned(more);
        let server = server.map_err(|_| Refusal::Server)?;
        let token = bodies
            .tokens
            .take(&self.token, more)
            .ok_or(Refusal::Token)?;
        let pipeline = match &self.pipeline {
            Some(name) => Some(bodies.pipelines.take(name, more).ok_or(Refusal::Pipeline)?),
            None => None,
        };
        self.permits.extend([server, token]);
        self.permits.extend(pipeline);
        self.kib += more;
        Ok(())
    }

    /// The bytes charged so far.
    #[cfg(test)]
    fn kib(&self) -> u32 {
        self.kib
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.permits.clear();
        self.bodies.tokens.forget_if_unused(&self.token);
        if let Some(pipeline) = &self.pipeline {
            self.bodies.pipelines.forget_if_unused(pipeline);
        }
    }
}

/// A request body charged to its admission as it arrives, which fails once it has arrived
/// slower than `min_rate` bytes per second after `grace` (by then at least
/// `min_rate × (elapsed − grace)` bytes must have come), or once a budget has no room for it.
struct PacedBody {
    inner: Body,
    started: Instant,
    received: u64,
    min_rate: u64,
    grace: Duration,
    timer: Pin<Box<Sleep>>,
    admission: Arc<Mutex<Admission>>,
    refused: Arc<Mutex<Option<Refusal>>>,
}

impl PacedBody {
    /// When what has arrived stops being enough.
    fn due(&self) -> Instant {
        let earned = Duration::from_secs_f64(self.received as f64 / self.min_rate as f64);
        self.started + self.grace + earned
    }

    fn refuse(
        &self,
        refusal: Refusal,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        *self.refused.lock().expect("refusal lock") = Some(refusal);
        Poll::Ready(Some(Err(axum::Error::new(refusal.message()))))
    }
}

impl http_body::Body for PacedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    let charged =
                        (this.admission.lock().expect("admission lock")).charge(data.len() as u64);
                    if let Err(refusal) = charged {
                        return this.refuse(refusal);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => loop {
                let due = this.due();
                if Instant::now() >= due {
                    return this.refuse(Refusal::TooSlow);
                }
                if this.timer.deadline() != due {
                    this.timer.as_mut().reset(due);
                }
                if this.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bodies(max_inflight: usize) -> Arc<Bodies> {
        Bodies::new(BodyPolicy {
            max_inflight,
            ..BodyPolicy::default()
        })
    }

    fn charged(
        bodies: &Arc<Bodies>,
        token: &str,
        pipeline: Option<&str>,
        bytes: u64,
    ) -> Result<Admission, Refusal> {
        let mut admission = bodies.admit(Some(token), pipeline)?;
        admission.charge(bytes)?;
        Ok(admission)
    }

    #[test]
    fn one_pipeline_holds_at_most_a_quarter_and_one_token_at_most_half() {
        let bodies = bodies(1 << 20); // 1,024 KiB
        let a = charged(&bodies, "ingest", Some("a"), 256 << 10).unwrap();
        assert_eq!(
            bodies.admit(Some("ingest"), Some("a")).err(),
            Some(Refusal::Pipeline)
        );
        let b = charged(&bodies, "ingest", Some("b"), 256 << 10).unwrap();
        assert_eq!(
            bodies.admit(Some("ingest"), Some("c")).err(),
            Some(Refusal::Token),
            "a token holds half at most"
        );
        let other = charged(&bodies, "admin", Some("c"), 256 << 10).unwrap();
        let create = charged(&bodies, "admin", None, 255 << 10).unwrap();
        assert_eq!(
            charged(&bodies, "third", None, 2 << 10).err(),
            Some(Refusal::Server)
        );
        drop((a, b, other, create));
        assert!(charged(&bodies, "ingest", Some("a"), 256 << 10).is_ok());
    }

    #[test]
    fn a_body_is_charged_what_has_arrived_as_it_arrives() {
        let bodies = bodies(1 << 20);
        let mut slow = bodies.admit(Some("t"), Some("p")).unwrap();
        slow.charge(1).unwrap();
        assert_eq!(
            slow.kib(),
            1,
            "one byte holds one KiB, not what it announced"
        );
        slow.charge(1023).unwrap();
        assert_eq!(slow.kib(), 1);
        slow.charge(1).unwrap();
        assert_eq!(slow.kib(), 2);
        // Its pipeline's quarter runs out as the bytes come, not before.
        let beside = bodies.admit(Some("t"), Some("p")).unwrap();
        slow.charge(300 << 10).unwrap();
        assert_eq!(slow.kib(), 256, "alone, it may hold the whole quarter");
        assert_eq!(
            bodies.admit(Some("t"), Some("p")).err(),
            Some(Refusal::Pipeline)
        );
        drop(beside);
    }

    #[test]
    fn shares_nobody_holds_are_forgotten() {
        let bodies = bodies(1 << 20);
        for n in 0..100 {
            drop(charged(&bodies, &format!("t{n}"), Some(&format!("p{n}")), 10).unwrap());
        }
        assert!(bodies.tokens.by_name.lock().unwrap().is_empty());
        assert!(bodies.pipelines.by_name.lock().unwrap().is_empty());
        let held = charged(&bodies, "t", Some("p"), 10).unwrap();
        assert_eq!(bodies.pipelines.by_name.lock().unwrap().len(), 1);
        drop(held);
        assert!(bodies.pipelines.by_name.lock().unwrap().is_empty());
    }

    #[test]
    fn a_body_bigger_than_its_share_passes_alone_holding_all_of_it() {
        let bodies = bodies(1 << 20);
        let big = charged(&bodies, "t", Some("p"), 900 << 10).unwrap();
        assert_eq!(big.kib(), 256);
        assert_eq!(
            bodies.admit(Some("t"), Some("p")).err(),
            Some(Refusal::Pipeline)
        );
        let upload = charged(&bodies, "u", None, 900 << 10).unwrap();
        assert_eq!(upload.kib(), 512);
        assert_eq!(bodies.admit(Some("u"), None).err(), Some(Refusal::Token));
    }
}
