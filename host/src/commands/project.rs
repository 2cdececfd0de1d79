//! `weir new`, `weir build` and `weir deploy`: an operator project from creation to the
//! registry. Uses the library's `project`.

use std::path::PathBuf;

/// The options of `weir new`.
#[derive(Debug, clap::Args)]
pub(crate) struct NewArgs {
    /// The operator's name (also its directory's).
    name: String,
    /// The language.
    #[arg(long, value_enum)]
    lang: weir::project::Language,
    /// Where to create the project's directory.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// The options of `weir build`.
#[derive(Debug, clap::Args)]
pub(crate) struct BuildArgs {
    /// The project's directory.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Where to write the component (default: build/<name>.wasm in the project).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The options of `weir deploy`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {
    /// The server's address, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// An admin token (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// The operator's name in the registry.
    name: String,
    /// The version to upload it as.
    version: String,
    /// The project's directory (its build/<name>.wasm is uploaded).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Upload this component file instead of the project's.
    #[arg(long)]
    module: Option<PathBuf>,
}

/// `weir new`: an operator project.
pub(crate) fn new_project(args: NewArgs) -> anyhow::Result<()> {
    let dir = weir::project::new(&args.dir, &args.name, args.lang)?;
    println!(
        "created {} ({} aggregate): cd into it, then `weir build` and `weir run --fresh pipeline.toml`",
        dir.display(),
        args.lang
    );
    Ok(())
}

/// `weir build`: a project into a component.
pub(crate) fn build_project(args: BuildArgs) -> anyhow::Result<()> {
    let toolchains = weir::project::Toolchains::from_env();
    let out = weir::project::build(&args.dir, args.out.as_deref(), &toolchains)?;
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!("built {} ({size} bytes)", out.display());
    let project = weir::project::Project::open(&args.dir)?;
    weir::operator::WasmRuntime::use_memory_images(false);
    for (example, results) in weir::project::check_examples(&project, &out)? {
        println!("example {example}: {results} results as expected");
    }
    match weir::project::embed_examples(&project, &out)? {
        Some(bytes) => println!(
            "examples embedded in the component ({bytes} bytes): `weir deploy` has the server run them before it accepts the version"
        ),
        None if !project.file.examples.is_empty() => println!(
            "examples too large to embed (over {} bytes): the server will not run them at upload",
            weir::project::examples::MAX_EMBEDDED_BYTES
        ),
        None => {}
    }
    Ok(())
}

/// `weir deploy`: a built component into a server's registry.
pub(crate) fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    let module = match args.module {
        Some(module) => module,
        None => weir::project::Project::open(&args.dir)?.default_output(),
    };
    let answer = weir::project::deploy(
        &args.server,
        &args.token,
        &args.name,
        &args.version,
        &module,
    )?;
    println!("{answer}");
    Ok(())
}
