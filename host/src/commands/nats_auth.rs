//! `--nats-creds`, `--nats-user` and the other flags that say how the NATS clients of a
//! command authenticate, for the commands that connect to NATS (`run`, `serve`, `worker`,
//! `cluster`, `bench nats`). Uses the library's `nats_client`.

use std::path::PathBuf;

use anyhow::Context;

/// How every NATS client of this process authenticates (`weir run`, `serve`, `worker`,
/// `cluster`): one of a creds file, a user and password, a token or an nkey seed; and the
/// certificate authority of `tls://` servers.
#[derive(Debug, clap::Args)]
pub(crate) struct NatsAuthArgs {
    /// A NATS credentials file (user JWT and nkey seed), as `nsc` writes it.
    #[arg(long, global = true, value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// A NATS user (with --nats-password or $WEIR_NATS_PASSWORD).
    #[arg(long, global = true)]
    nats_user: Option<String>,
    /// The NATS user's password.
    #[arg(
        long,
        global = true,
        env = "WEIR_NATS_PASSWORD",
        hide_env_values = true
    )]
    nats_password: Option<String>,
    /// A NATS token.
    #[arg(long, global = true, env = "WEIR_NATS_TOKEN", hide_env_values = true)]
    nats_token: Option<String>,
    /// A file holding an nkey seed (`SU...`).
    #[arg(long, global = true, value_name = "FILE")]
    nats_nkey: Option<PathBuf>,
    /// A PEM file of certificate authorities to trust for tls:// NATS servers.
    #[arg(long, global = true, value_name = "FILE")]
    nats_ca: Option<PathBuf>,
}

impl NatsAuthArgs {
    /// Makes these the credentials of every NATS client of the process.
    pub(crate) fn install(self) -> anyhow::Result<()> {
        let read = |flag: &str, path: &std::path::Path| {
            std::fs::read_to_string(path).with_context(|| format!("{flag} {}", path.display()))
        };
        // A password alone (from the environment) names no user: unused.
        let user = match (self.nats_user, self.nats_password) {
            (Some(user), Some(password)) => Some((user, password)),
            (Some(_), None) => {
                anyhow::bail!("--nats-user needs --nats-password (or $WEIR_NATS_PASSWORD)")
            }
            (None, _) => None,
        };
        let auth = weir::nats_client::NatsAuth {
            creds: self
                .nats_creds
                .map(|p| read("--nats-creds", &p))
                .transpose()?,
            user,
            token: self.nats_token,
            nkey_seed: self
                .nats_nkey
                .map(|p| read("--nats-nkey", &p))
                .transpose()?,
            ca: self.nats_ca,
        };
        Ok(auth.install()?)
    }
}
