//! `weir token`: the tokens of a running `weir serve`, made, listed, rotated and revoked
//! through its API with an admin token. Uses the library's `client` and `names`.

use std::time::Duration;

use clap::Subcommand;

/// The options of `weir token`.
#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    action: TokenAction,
    /// The server (e.g. https://weir.example:8080).
    #[arg(long, global = true)]
    server: Option<String>,
    /// An admin token for --server (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, global = true, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Make a token; its secret is printed this once (the server keeps only a digest).
    Create {
        /// Its name (what it owns and does is recorded under it).
        name: String,
        /// A scope: admin, deploy, ingest, read or metrics (repeat for more).
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Narrow it to this pipeline (repeat for more); it then sees no other.
        #[arg(long = "pipeline")]
        pipelines: Vec<String>,
        /// How long it lives: seconds, or with a unit (90s, 30m, 12h, 7d).
        #[arg(long)]
        expires_in: Option<String>,
        /// Bind it to this tenant (its name then starts with "<tenant>.").
        #[arg(long)]
        tenant: Option<String>,
    },
    /// List the tokens (never their secrets).
    List,
    /// Give a token a new secret, printed this once; the old one is refused at once.
    Rotate {
        /// Its name.
        name: String,
    },
    /// Revoke a token: refused at once.
    Revoke {
        /// Its name.
        name: String,
    },
}

/// `weir token`.
pub(crate) fn token(args: TokenArgs) -> anyhow::Result<()> {
    let server = args
        .server
        .ok_or_else(|| anyhow::anyhow!("weir token needs --server (the weir serve to manage)"))?;
    let admin = args
        .token
        .ok_or_else(|| anyhow::anyhow!("--server needs --token or $WEIR_ADMIN_TOKEN"))?;
    let (method, path, body, expected) = match &args.action {
        TokenAction::Create {
            name,
            scopes,
            pipelines,
            expires_in,
            tenant,
        } => {
            let mut request = serde_json::json!({ "name": name, "scopes": scopes });
            if let Some(tenant) = tenant {
                request["tenant"] = serde_json::json!(tenant);
            }
            if !pipelines.is_empty() {
                request["pipelines"] = serde_json::json!(pipelines);
            }
            if let Some(life) = expires_in {
                request["expires_in_s"] = serde_json::json!(seconds(life)?);
            }
            ("POST", "/v1/tokens".to_owned(), Some(request), 201)
        }
        TokenAction::List => ("GET", "/v1/tokens".to_owned(), None, 200),
        TokenAction::Rotate { name } => {
            weir::names::check("token name", name)?;
            ("POST", format!("/v1/tokens/{name}/rotate"), None, 200)
        }
        TokenAction::Revoke { name } => {
            weir::names::check("token name", name)?;
            ("DELETE", format!("/v1/tokens/{name}"), None, 204)
        }
    };
    let body = body.map(|b| b.to_string().into_bytes());
    let body = body.as_deref().map(|b| ("application/json", b));
    let timeout = Duration::from_secs(30);
    let (status, answer) = weir::client::call(&server, &admin, method, &path, body, timeout)?;
    if status != expected {
        anyhow::bail!("the server answered {status}: {answer}");
    }
    let answer: serde_json::Value = match answer.as_str() {
        "" => serde_json::Value::Null,
        text => serde_json::from_str(text)?,
    };
    match &args.action {
        TokenAction::Create { .. } | TokenAction::Rotate { .. } => {
            eprintln!(
                "token {}: keep its secret now, it is not shown again",
                answer["name"]
            );
            println!("{}", answer["token"].as_str().unwrap_or_default());
        }
        TokenAction::List => println!("{}", serde_json::to_string_pretty(&answer)?),
        TokenAction::Revoke { name } => println!("revoked {name:?}"),
    }
    Ok(())
}

/// `life` in seconds: a number, or one with a unit s, m, h or d.
fn seconds(life: &str) -> anyhow::Result<u64> {
    let (number, unit) = match life.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => life.split_at(at),
        None => (life, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => anyhow::bail!("--expires-in {life:?}: a number of seconds, or with s, m, h or d"),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| anyhow::anyhow!("--expires-in {life:?}: a whole number, then s, m, h or d"))?;
    number
        .checked_mul(scale)
        .ok_or_else(|| anyhow::anyhow!("--expires-in {life:?} is too long"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn lives_are_read_with_their_units() {
        assert_eq!(super::seconds("90").unwrap(), 90);
        assert_eq!(super::seconds("30m").unwrap(), 1_800);
        assert_eq!(super::seconds("7d").unwrap(), 604_800);
        for bad in ["", "d", "5w", "-1", "1.5h", "99999999999999999999d"] {
            assert!(super::seconds(bad).is_err(), "{bad}");
        }
    }
}
