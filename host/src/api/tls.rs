//! [`Tls`]: `weir serve` over HTTPS (`--tls-cert`, `--tls-key`): the certificate chain and
//! key read from PEM files, kept behind a lock so that a reload (SIGHUP) swaps them for new
//! connections while open ones go on with theirs. A reload that cannot read the files keeps
//! the certificate in use and says why. The handshake itself runs in each connection's own
//! task (see `serve_connections`), within the header timeout, so a slow client holds up only
//! its own connection.
//!
//! Depends on nothing outside `api`; rustls with the ring provider (already in the build
//! through the NATS client).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read or holds no PEM item of its kind.
    #[error("{what} {path}: {reason} (give a PEM file)")]
    File {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// rustls refused the pair (a key that does not match the certificate, an unsupported key).
    #[error("the certificate {cert} and key {key} cannot serve TLS: {source}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// The server's TLS certificate, reloadable.
#[derive(Debug)]
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    config: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    /// Reads the chain in `cert` and the private key in `key` (PEM).
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let config = server_config(cert, key)?;
        Ok(Tls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            config: RwLock::new(Arc::new(config)),
        })
    }

    /// Reads the files again; new connections get the new certificate. On an error the one in
    /// use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.cert, &self.key)?;
        *self.config.write().expect("tls lock") = Arc::new(config);
        Ok(())
    }

    /// An acceptor with the certificate in use now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.read().expect("tls lock").clone())
    }
}

fn server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let file = |what, path: &Path, reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file("certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file("certificate", cert, "no certificate in it".into()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| file("key", key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pair = |source| TlsError::Pair {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(pair)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(pair)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
