//! `weir replay`: a served pipeline's recorded input through two operator versions. Uses the
//! library's `client` and `names`.

/// The options of `weir replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The server's address, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// An admin token (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// The pipeline.
    pipeline: String,
    /// The version whose results go on the left.
    a: String,
    /// The version whose results go on the right.
    b: String,
    /// A key to show (repeat for more).
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Or: show this many keys, chosen deterministically.
    #[arg(long, conflicts_with = "keys")]
    sample: Option<usize>,
    /// Only windows starting at or after this time (ms).
    #[arg(long)]
    from: Option<i64>,
    /// Only windows ending at or before this time (ms).
    #[arg(long)]
    to: Option<i64>,
    /// Start from this savepoint (default: empty state, the whole log).
    #[arg(long)]
    savepoint: Option<String>,
    /// Print the server's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

/// `weir replay`: asks the server for a replay and prints it.
pub(crate) fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    weir::names::check("pipeline name", &args.pipeline)?;
    let request = serde_json::json!({
        "versions": [args.a, args.b],
        "keys": args.keys,
        "sample": args.sample,
        "from": args.from,
        "to": args.to,
        "savepoint": args.savepoint,
    });
    let path = format!("/v1/pipelines/{}/replay", args.pipeline);
    let (status, body) = weir::client::post(
        &args.server,
        &args.token,
        &path,
        "application/json",
        request.to_string().as_bytes(),
        std::time::Duration::from_secs(1_200),
    )?;
    if status != 200 {
        anyhow::bail!("the server answered {status}: {body}");
    }
    let answer: serde_json::Value = serde_json::from_str(&body)?;
    if args.json {
        println!("{answer}");
    } else {
        print!("{}", weir::client::render_replay(&answer));
    }
    Ok(())
}
