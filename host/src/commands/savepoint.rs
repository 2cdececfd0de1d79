//! `weir savepoint`: named copies of a pipeline's last checkpoint, in a data directory or on
//! a server. Uses the library's `checkpoint`, `client`, `names` and `spec`.

use std::path::PathBuf;

use clap::Subcommand;

/// The options of `weir savepoint`.
#[derive(Debug, clap::Args)]
pub(crate) struct SavepointArgs {
    #[command(subcommand)]
    action: SavepointAction,
    /// A running `weir serve` (e.g. http://127.0.0.1:8080): the target is then the name of one
    /// of its pipelines, which may be running, and the server takes the savepoint.
    #[arg(long, global = true)]
    server: Option<String>,
    /// An admin token for --server (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, global = true, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SavepointAction {
    /// Save the last checkpoint of a stopped pipeline under a name.
    Create {
        /// A pipeline spec or its data directory.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
    },
    /// List the savepoints.
    List {
        /// A pipeline spec or its data directory.
        target: PathBuf,
    },
    /// Make a savepoint the current state; the next `weir run` resumes from it.
    Restore {
        /// A pipeline spec or its data directory.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
    },
    /// Delete a savepoint.
    Delete {
        /// A pipeline spec or its data directory.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
    },
    /// With --server: create a new pipeline from a savepoint (stopped; its state is the
    /// savepoint's, its input the original's from the savepoint on).
    Fork {
        /// The pipeline the savepoint is of.
        target: PathBuf,
        /// The savepoint's name.
        name: String,
        /// The new pipeline's spec (JSON, with its own name).
        spec: PathBuf,
    },
}

/// The data directory named by a spec file or given directly.
pub(crate) fn data_dir(target: &std::path::Path) -> anyhow::Result<PathBuf> {
    if target.is_dir() {
        return Ok(target.to_owned());
    }
    let spec = weir::PipelineSpec::load(target)?;
    match spec.state {
        weir::spec::StateSpec::Redb(dir) => Ok(dir),
        weir::spec::StateSpec::Memory => anyhow::bail!(
            "pipeline {:?} keeps its state in memory: there is no data directory",
            spec.name
        ),
    }
}

pub(crate) fn describe(manifest: &weir::checkpoint::Manifest) -> String {
    format!(
        "checkpoint {} of pipeline {:?}: line {}, {} events, watermark {}, {}",
        manifest.id,
        manifest.pipeline,
        manifest.source.line,
        manifest.events,
        manifest.watermark,
        if manifest.finished {
            "input finished"
        } else {
            "input in progress"
        }
    )
}

/// `weir savepoint`.
pub(crate) fn savepoint(args: SavepointArgs) -> anyhow::Result<()> {
    let SavepointArgs {
        action,
        server,
        token,
    } = args;
    if let Some(server) = server {
        let token =
            token.ok_or_else(|| anyhow::anyhow!("--server needs --token or $WEIR_ADMIN_TOKEN"))?;
        return savepoint_on_server(&server, &token, action);
    }
    use weir::checkpoint::{
        create_savepoint, delete_savepoint, list_savepoints, restore_savepoint,
    };
    match action {
        SavepointAction::Create { target, name } => {
            let saved = create_savepoint(&data_dir(&target)?, &name)?;
            println!("saved {:?}: {}", saved.name, describe(&saved.manifest));
        }
        SavepointAction::List { target } => {
            let listing = list_savepoints(&data_dir(&target)?)?;
            for saved in &listing.saved {
                println!("{}\t{}", saved.name, describe(&saved.manifest));
            }
            for (name, reason) in &listing.damaged {
                println!("{name}\tdamaged: {reason}");
            }
        }
        SavepointAction::Restore { target, name } => {
            let restored = restore_savepoint(&data_dir(&target)?, &name)?;
            println!(
                "restored {:?}: {}; `weir run` resumes from it",
                restored.name,
                describe(&restored.manifest)
            );
        }
        SavepointAction::Delete { target, name } => {
            delete_savepoint(&data_dir(&target)?, &name)?;
            println!("deleted {name:?}");
        }
        SavepointAction::Fork { .. } => {
            anyhow::bail!("fork creates a pipeline on a server: give --server (and a token)")
        }
    }
    Ok(())
}

/// `weir savepoint --server`: the same actions through the server's API, on a served pipeline
/// (named by the target).
pub(crate) fn savepoint_on_server(
    server: &str,
    token: &str,
    action: SavepointAction,
) -> anyhow::Result<()> {
    use std::time::Duration;
    let pipeline_of = |target: &std::path::Path| -> anyhow::Result<String> {
        let name = target.to_string_lossy().into_owned();
        weir::names::check("pipeline name", &name)?;
        Ok(name)
    };
    let (method, path, body, expected) = match &action {
        SavepointAction::Create { target, name } => (
            "POST",
            format!("/v1/pipelines/{}/savepoints", pipeline_of(target)?),
            Some(serde_json::json!({ "name": name }).to_string().into_bytes()),
            201,
        ),
        SavepointAction::List { target } => (
            "GET",
            format!("/v1/pipelines/{}/savepoints", pipeline_of(target)?),
            None,
            200,
        ),
        SavepointAction::Delete { target, name } => {
            weir::names::check("savepoint name", name)?;
            let pipeline = pipeline_of(target)?;
            (
                "DELETE",
                format!("/v1/pipelines/{pipeline}/savepoints/{name}"),
                None,
                204,
            )
        }
        SavepointAction::Fork { target, name, spec } => {
            weir::names::check("savepoint name", name)?;
            let pipeline = pipeline_of(target)?;
            let spec = std::fs::read(spec)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", spec.display()))?;
            (
                "POST",
                format!("/v1/pipelines/{pipeline}/savepoints/{name}/fork"),
                Some(spec),
                201,
            )
        }
        SavepointAction::Restore { .. } => anyhow::bail!(
            "a served pipeline is not restored in place: fork the savepoint into a new pipeline \
             (weir savepoint fork --server ...)"
        ),
    };
    let body = body.as_deref().map(|b| ("application/json", b));
    let (status, answer) =
        weir::client::call(server, token, method, &path, body, Duration::from_secs(120))?;
    if status != expected {
        anyhow::bail!("the server answered {status}: {answer}");
    }
    if !answer.is_empty() {
        println!("{answer}");
    } else {
        println!("done");
    }
    Ok(())
}
