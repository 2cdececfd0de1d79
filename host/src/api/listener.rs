//! [`GuardedListener`]: the TCP listener of the API, with a cap on open connections and an idle
//! timeout on each, so that idle or half-sent requests cannot take every file descriptor and
//! starve the callers that matter (`/healthz` among them).
//!
//! A connection on which nothing is read or written for the idle timeout, and no request is
//! being handled, is closed. Under pressure (more than three quarters of the cap in use) the
//! timeout shrinks to the pressure timeout, for connections already idle too, so a flood of
//! idle connections is shed within seconds instead of blocking new ones. A request being
//! handled, its body in, keeps its connection however long it takes ([`InFlight`]): a body
//! still arriving is held to the timeouts (and to a minimum rate, in `bodies`), and an answer,
//! once begun, to the idle timeout again.
//! At the cap, new connections wait in the kernel's backlog until one closes.
//!
//! Depends on nothing else of the crate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Connection limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a connection may stay silent (no byte read or written).
    pub idle_timeout: Duration,
    /// The shorter silence allowed while the server is near its cap.
    pub pressure_timeout: Duration,
    /// How long a request's headers may take to arrive, however slowly they trickle in.
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 4_096,
            idle_timeout: Duration::from_secs(60),
            pressure_timeout: Duration::from_secs(2),
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// A TCP listener that enforces [`ConnectionLimits`].
#[derive(Debug)]
pub struct GuardedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    limits: ConnectionLimits,
}

impl GuardedListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener, limits: ConnectionLimits) -> Self {
        GuardedListener {
            inner,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            limits,
        }
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = GuardedIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the connection semaphore is never closed");
        loop {
            match self.inner.accept().await {
                Ok((stream, address)) => {
                    let _ = stream.set_nodelay(true);
                    let io = GuardedIo {
                        stream,
                        _permit: permit,
                        permits: self.permits.clone(),
                        limits: self.limits,
                        last_activity: Instant::now(),
                        timer: Box::pin(tokio::time::sleep(self.limits.pressure_timeout)),
                        in_flight: InFlight::default(),
                    };
                    return (io, address);
                }
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // wait a little rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// One accepted connection; holds its place under the cap until it is dropped.
#[derive(Debug)]
pub struct GuardedIo {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    permits: Arc<Semaphore>,
    limits: ConnectionLimits,
    last_activity: Instant,
    timer: Pin<Box<Sleep>>,
    in_flight: InFlight,
}

/// How many requests of one connection are being handled (their body in, their answer not
/// begun): while any is, the connection is not idle, however long the handler takes. A request
/// whose body is still arriving is not counted: the idle and pressure timeouts still hold
/// against a sender that sends nothing.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl InFlight {
    /// Counts one request until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        InFlightGuard(self.clone())
    }

    fn any(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) > 0
    }
}

/// One request being handled; see [`InFlight`].
#[derive(Debug)]
pub struct InFlightGuard(InFlight);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Where a request's [`InFlightGuard`] is kept from the end of its body to its answer.
type GuardSlot = Arc<std::sync::Mutex<Option<InFlightGuard>>>;

/// A hyper service that counts each request of a connection in [`InFlight`] from the end of
/// its body until its answer is ready.
#[derive(Debug, Clone)]
pub struct CountInFlight<S> {
    inner: S,
    in_flight: InFlight,
}

impl<S> CountInFlight<S> {
    /// Wraps the connection's service.
    pub fn new(inner: S, in_flight: InFlight) -> Self {
        CountInFlight { inner, in_flight }
    }
}

impl<S, B> hyper::service::Service<axum::http::Request<B>> for CountInFlight<S>
where
    S: hyper::service::Service<axum::http::Request<BodyEnd<B>>>,
    S::Future: Send + 'static,
    B: http_body::Body,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, request: axum::http::Request<B>) -> Self::Future {
        let slot: GuardSlot = Arc::default();
        let (parts, body) = request.into_parts();
        if body.is_end_stream() {
            *slot.lock().expect("guard slot") = Some(self.in_flight.enter());
        }
        let body = BodyEnd {
            inner: body,
            in_flight: self.in_flight.clone(),
            slot: slot.clone(),
        };
        let answer = self
            .inner
            .call(axum::http::Request::from_parts(parts, body));
        Box::pin(async move {
            let answer = answer.await;
            drop(slot.lock().expect("guard slot").take());
            answer
        })
    }
}

/// A request body that counts its request in flight once it has all arrived.
#[derive(Debug)]
pub struct BodyEnd<B> {
    inner: B,
    in_flight: InFlight,
    slot: GuardSlot,
}

impl<B> BodyEnd<B> {
    fn ended(&self) {
        let mut slot = self.slot.lock().expect("guard slot");
        if slot.is_none() {
            *slot = Some(self.in_flight.enter());
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for BodyEnd<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if frame.is_none() || self.inner.is_end_stream() {
            self.ended();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl GuardedIo {
    /// The count of this connection's requests being handled, for its service.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.clone()
    }

    /// The silence allowed now: shorter when the server is near its cap.
    fn allowance(&self) -> Duration {
        let free = self.permits.available_permits();
        if free * 4 < self.limits.max_connections {
            self.limits.pressure_timeout.min(self.limits.idle_timeout)
        } else {
            self.limits.idle_timeout
        }
    }

    fn touch(&mut self) {
        self.last_activity = Instant::now();
    }

    /// Fails with `TimedOut` once the connection has been silent longer than allowed now;
    /// otherwise arms the timer. An idle connection looks again at least every pressure
    /// timeout, so one that was idle before the pressure rose is shed too.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        loop {
            let now = Instant::now();
            if self.in_flight.any() {
                self.last_activity = now; // a request is being handled: not idle
            }
            let allowed = self.allowance();
            if now.duration_since(self.last_activity) >= allowed {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the connection was idle too long",
                ));
            }
            let next = (self.last_activity + allowed).min(now + self.limits.pressure_timeout);
            if self.timer.deadline() != next {
                self.timer.as_mut().reset(next);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => continue,
                Poll::Pending => return Ok(()),
            }
        }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                self.check_deadline(cx)?;
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write(cx, data) {
            Poll::Ready(result) => {
                self.touch();
                Poll::Ready(result)
            }
            Poll::Pending => {
                self.check_deadline(cx)?;
                Poll::Pending
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = ready!(Pin::new(&mut self.stream).poll_flush(cx));
        Poll::Ready(result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
