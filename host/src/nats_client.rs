//! How every Weir NATS client connects ([`connect_options`]): reconnecting at once and then at
//! most a second apart, on a small runtime of its own ([`client_runtime`]), watched
//! ([`ClientWatch`]) for its connections and for why its last attempt failed, and given
//! [`FIRST_CONNECT`] to reach its server when it starts ([`first_connection`]). Used by the
//! NATS source (and through it the cluster's shared feed), the NATS sink (`emit::nats`) and
//! the cluster's connection: whatever in Weir talks to NATS may use it. Every client presents
//! the process's credentials and trusts its certificate authority ([`NatsAuth`], set once at
//! start from the command line). Depends on `async-nats`, `tokio`, `nkeys` and `thiserror` only.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How this process's NATS clients prove who they are, and which certificate authority they
/// trust for `tls://` servers: given once at start (`--nats-creds`, `--nats-user` and
/// `--nats-password`, `--nats-token`, `--nats-nkey`, `--nats-ca`), used by every connection.
#[derive(Clone, Default)]
pub struct NatsAuth {
    /// The contents of a `.creds` file (a user JWT and its nkey seed).
    pub creds: Option<String>,
    /// A user and password.
    pub user: Option<(String, String)>,
    /// A token.
    pub token: Option<String>,
    /// An nkey seed (`SU...`).
    pub nkey_seed: Option<String>,
    /// A PEM file of the certificate authorities to trust, beside the system's.
    pub ca: Option<PathBuf>,
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        f.debug_struct("NatsAuth")
            .field("creds", &self.creds.is_some())
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("token", &self.token.is_some())
            .field("nkey", &self.nkey_seed.is_some())
            .field("ca", &self.ca)
            .finish()
    }
}

static AUTH: OnceLock<NatsAuth> = OnceLock::new();

/// Why credentials were refused, or a client did not connect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsClientError {
    /// More than one way to authenticate was given.
    #[error(
        "give one way for NATS clients to authenticate: --nats-creds, --nats-user and \
         --nats-password, --nats-token or --nats-nkey"
    )]
    SeveralCredentials,
    /// The creds file's contents are not a NATS credentials file.
    #[error("--nats-creds: not a NATS credentials file: {0}")]
    Creds(#[source] std::io::Error),
    /// The nkey file's contents are not an nkey seed.
    #[error("--nats-nkey: not an nkey seed: {0}")]
    NkeySeed(#[source] nkeys::error::Error),
    /// The certificate authorities' file is not there.
    #[error("--nats-ca {}: no such file", .0.display())]
    NoCaFile(PathBuf),
    /// A server answered, and refused the client, until the first connection's time ran out.
    #[error(
        "the server refused the connection for {seconds} s ({reason}): check the \
         credentials this process presents (--nats-creds, --nats-user and \
         --nats-password, --nats-token or --nats-nkey) and, for tls://, --nats-ca"
    )]
    Refused {
        /// The wait, in seconds.
        seconds: u64,
        /// The client's reason.
        reason: String,
    },
    /// No server answered within the first connection's time.
    #[error(
        "no server answered within {seconds} s{}: is nats-server running at that address?",
        .last.as_deref().map(|reason| format!(" (the last attempt: {reason})")).unwrap_or_default()
    )]
    NoAnswer {
        /// The wait, in seconds.
        seconds: u64,
        /// Why the last attempt failed, if one ended.
        last: Option<String>,
    },
    /// The client's runtime could not start.
    #[error("cannot start the NATS client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl NatsAuth {
    /// Checks the credentials (a creds file or seed that cannot be read is refused now, not at
    /// the first connection) and makes them the process's; the first call wins.
    pub fn install(self) -> Result<(), NatsClientError> {
        let given = [
            self.creds.is_some(),
            self.user.is_some(),
            self.token.is_some(),
            self.nkey_seed.is_some(),
        ];
        if given.iter().filter(|given| **given).count() > 1 {
            return Err(NatsClientError::SeveralCredentials);
        }
        let options = self.apply(async_nats::ConnectOptions::new())?;
        drop(options);
        if let Some(ca) = &self.ca
            && !ca.is_file()
        {
            return Err(NatsClientError::NoCaFile(ca.clone()));
        }
        let _ = AUTH.set(self);
        Ok(())
    }

    /// `options` presenting these credentials.
    fn apply(
        &self,
        mut options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, NatsClientError> {
        if let Some(creds) = &self.creds {
            options = options.credentials(creds).map_err(NatsClientError::Creds)?;
        }
        if let Some((user, password)) = &self.user {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        if let Some(seed) = &self.nkey_seed {
            nkeys::KeyPair::from_seed(seed.trim()).map_err(NatsClientError::NkeySeed)?;
            options = options.nkey(seed.trim().to_owned());
        }
        if let Some(ca) = &self.ca {
            options = options.add_root_certificates(ca.clone());
        }
        Ok(options)
    }
}

/// The longest wait between two attempts to reach a server that went away.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// How long a source or a cluster command waits for its server's first answer. Past that the
/// address is taken for a mistake: a request sent then would time out with an error that
/// names the request (a stream to create, a bucket), not the server nobody answers at.
pub(crate) const FIRST_CONNECT: Duration = Duration::from_secs(10);

/// What a client's connection reports, shared with its event callback: whether it connected
/// since last asked, and why its last attempt to connect failed.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientWatch {
    /// Set by each connection (the first and every one after the server was away).
    connected: Arc<AtomicBool>,
    /// The reason the client gave for its last failed attempt to connect.
    last_failure: Arc<Mutex<Option<String>>>,
}

impl ClientWatch {
    /// Whether the client connected since the last call (a first connection included).
    pub(crate) fn connected_since(&self) -> bool {
        self.connected.swap(false, Ordering::AcqRel)
    }

    /// Why the last attempt to connect failed, as the client put it ("IO error" for a
    /// connection refused, "authorization violation", "TLS error", ...).
    pub(crate) fn last_failure(&self) -> Option<String> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes note of one of the client's events: a connection clears the last failure.
    fn saw(&self, event: async_nats::Event) {
        match event {
            async_nats::Event::Connected => {
                *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.connected.store(true, Ordering::Release);
            }
            async_nats::Event::ClientError(async_nats::ClientError::Other(reason)) => {
                *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            }
            _ => {}
        }
    }
}

/// How every Weir NATS client connects (`weir bench nats`'s own client aside): trying to
/// reach a server that is not up yet (the source and the cluster give it [`FIRST_CONNECT`],
/// see [`first_connection`]; the sink waits), and, when it goes away, trying again at once
/// and then every quarter second more, up to [`MAX_RECONNECT_DELAY`]. The client's own
/// backoff doubles up to 4 s, so every process lost the server for up to 4 s longer than it
/// was away: longer than a cluster's lease. `watch` hears of its connections and failed
/// attempts through the options' event callback, so a caller must not set another.
pub(crate) fn connect_options(watch: &ClientWatch) -> async_nats::ConnectOptions {
    let watch = watch.clone();
    let options = async_nats::ConnectOptions::new();
    let options = match AUTH.get() {
        // Checked when installed: applying them again cannot fail.
        Some(auth) => auth
            .apply(options)
            .unwrap_or_else(|_| async_nats::ConnectOptions::new()),
        None => options,
    };
    options
        .retry_on_initial_connect()
        .reconnect_delay_callback(reconnect_delay)
        .event_callback(move |event| {
            let watch = watch.clone();
            async move { watch.saw(event) }
        })
}

/// Whether `client` is connected now (it reconnects by itself when it is not).
pub(crate) fn is_connected(client: &async_nats::Client) -> bool {
    client.connection_state() == async_nats::connection::State::Connected
}

/// Waits up to [`FIRST_CONNECT`] for `client` (connected with `watch`) to connect. The
/// error says whether a server refused the client or none answered, and what to check.
pub(crate) async fn first_connection(
    client: &async_nats::Client,
    watch: &ClientWatch,
) -> Result<(), NatsClientError> {
    let deadline = tokio::time::Instant::now() + FIRST_CONNECT;
    while !is_connected(client) {
        if tokio::time::Instant::now() >= deadline {
            return Err(no_connection(watch.last_failure()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Why a client did not connect within [`FIRST_CONNECT`], its last attempt having failed
/// for `reason` (none if no attempt ended).
fn no_connection(reason: Option<String>) -> NatsClientError {
    let seconds = FIRST_CONNECT.as_secs();
    let refused = ["authorization", "TLS", "signing"];
    match reason {
        Some(reason) if refused.iter().any(|word| reason.contains(word)) => {
            NatsClientError::Refused { seconds, reason }
        }
        last => NatsClientError::NoAnswer { seconds, last },
    }
}

/// The wait before reconnect attempt `attempts` (counted from 1).
fn reconnect_delay(attempts: usize) -> Duration {
    let quarters = u32::try_from(attempts.saturating_sub(1)).unwrap_or(u32::MAX);
    (Duration::from_millis(250).saturating_mul(quarters)).min(MAX_RECONNECT_DELAY)
}

/// A small runtime for a NATS client: one worker keeps the connection alive between calls.
pub(crate) fn client_runtime() -> Result<tokio::runtime::Runtime, NatsClientError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("weir-nats")
        .enable_all()
        .build()
        .map_err(NatsClientError::Runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first attempt is at once; the waits grow by a quarter second and stop at the cap.
    #[test]
    fn reconnecting_waits_at_most_a_second() {
        let waits: Vec<u128> = (1..=7).map(|n| reconnect_delay(n).as_millis()).collect();
        assert_eq!(waits, [0, 250, 500, 750, 1000, 1000, 1000]);
        assert_eq!(reconnect_delay(usize::MAX), MAX_RECONNECT_DELAY);
        assert_eq!(reconnect_delay(0), Duration::ZERO);
    }

    /// The watch keeps the last failed attempt's reason until a connection, which it reports
    /// once.
    #[test]
    fn a_connection_clears_the_last_failure_and_is_reported_once() {
        let watch = ClientWatch::default();
        let failed = |reason: &str| {
            async_nats::Event::ClientError(async_nats::ClientError::Other(reason.into()))
        };
        watch.saw(failed("IO error"));
        watch.saw(failed("authorization violation"));
        assert_eq!(
            watch.last_failure().as_deref(),
            Some("authorization violation")
        );
        assert!(!watch.connected_since());
        watch.saw(async_nats::Event::Connected);
        assert_eq!(watch.last_failure(), None);
        assert!(watch.connected_since());
        assert!(!watch.connected_since(), "reported once");
    }

    /// A refusal is told apart from no answer, and the client's reason is given either way.
    #[test]
    fn a_refusal_is_told_apart_from_no_answer() {
        let refused = no_connection(Some("authorization violation".into())).to_string();
        assert!(refused.contains("refused") && refused.contains("authorization violation"));
        let silent = no_connection(Some("IO error".into())).to_string();
        assert!(silent.contains("no server answered") && silent.contains("IO error"));
        let none = no_connection(None).to_string();
        assert!(
            none.contains("no server answered within 10 s: is"),
            "{none}"
        );
    }
}
