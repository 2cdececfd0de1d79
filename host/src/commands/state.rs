//! `weir state`: the state in a data directory, offline and read-only. Uses the library's
//! `checkpoint`.

use std::path::PathBuf;

use super::data_dir;

/// The options of `weir state`.
#[derive(Debug, clap::Args)]
pub(crate) struct StateArgs {
    /// A pipeline spec (its data directory is used) or a data directory.
    target: PathBuf,
    /// Only this key.
    #[arg(long)]
    key: Option<String>,
}

/// `weir state`.
pub(crate) fn state(args: StateArgs) -> anyhow::Result<()> {
    let StateArgs { target, key } = args;
    let inspection = weir::checkpoint::inspect(&data_dir(&target)?, key.as_deref())?;
    match &inspection.manifest {
        Some(manifest) => println!("{}", serde_json::json!({"manifest": manifest})),
        None => println!("{}", serde_json::json!({"manifest": null})),
    }
    for row in &inspection.windows {
        println!("{}", serde_json::json!({"window": row}));
    }
    for row in &inspection.state {
        println!("{}", serde_json::json!({"state": row}));
    }
    Ok(())
}
