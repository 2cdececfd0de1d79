//! `weir build`: an operator project into a component, whatever its language. Python goes
//! through componentize-py, JavaScript through componentize-js (driven by the SDK's
//! `build.mjs`), Rust through `cargo build --target wasm32-wasip2`. The WIT contract and the
//! Python and JavaScript SDKs travel inside the `weir` binary and are written next to the build,
//! so a project needs nothing of this repository.
//!
//! Depends on nothing outside `project`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Language, Project, ProjectError, io, sdk, write_file};

/// The componentize-py version Weir is built and tested with.
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The componentize-js version Weir is built and tested with.
pub const COMPONENTIZE_JS: &str = "0.23.0";

/// Where the language toolchains are looked for: `$WEIR_TOOLCHAINS` (as `make toolchains`
/// installs them: `python/bin/componentize-py`, `js/node_modules/...`), then `PATH` and the
/// project's own `node_modules`.
#[derive(Debug, Clone, Default)]
pub struct Toolchains {
    /// The toolchain directory, if any.
    pub dir: Option<PathBuf>,
}

/// The environment variable naming the toolchain directory.
pub const TOOLCHAINS_ENV: &str = "WEIR_TOOLCHAINS";

impl Toolchains {
    /// The toolchains named by `WEIR_TOOLCHAINS`.
    pub fn from_env() -> Toolchains {
        Toolchains {
            dir: std::env::var_os(TOOLCHAINS_ENV)
                .filter(|dir| !dir.is_empty())
                .map(PathBuf::from),
        }
    }

    fn componentize_py(&self) -> Result<PathBuf, ProjectError> {
        let installed = self
            .dir
            .as_ref()
            .map(|dir| dir.join("python/bin/componentize-py"));
        installed
            .filter(|path| path.is_file())
            .or_else(|| on_path("componentize-py"))
            .ok_or_else(|| ProjectError::ToolchainMissing {
                language: Language::Python,
                tool: "componentize-py",
                install: format!(
                    "install it with `pip install componentize-py=={COMPONENTIZE_PY}` (or `make toolchains` in the Weir repository, then set {TOOLCHAINS_ENV}=<repository>/target/toolchains)"
                ),
            })
    }

    /// A directory whose `node_modules` holds componentize-js.
    fn componentize_js(&self, project: &Path) -> Result<PathBuf, ProjectError> {
        let has_it = |dir: &Path| {
            dir.join("node_modules/@bytecodealliance/componentize-js/package.json")
                .is_file()
        };
        let candidates = [
            self.dir.as_ref().map(|dir| dir.join("js")),
            Some(project.to_owned()),
        ];
        candidates
            .into_iter()
            .flatten()
            .find(|dir| has_it(dir))
            .ok_or_else(|| ProjectError::ToolchainMissing {
                language: Language::Js,
                tool: "@bytecodealliance/componentize-js",
                install: format!(
                    "install it in the project with `npm install --save-dev @bytecodealliance/componentize-js@{COMPONENTIZE_JS} esbuild@{}` (or `make toolchains` in the Weir repository, then set {TOOLCHAINS_ENV}=<repository>/target/toolchains)",
                    sdk::ESBUILD
                ),
            })
    }
}

/// Builds the project in `dir` into a component at `out` (default `build/<name>.wasm`) and
/// returns the component's path.
pub fn build(
    dir: &Path,
    out: Option<&Path>,
    toolchains: &Toolchains,
) -> Result<PathBuf, ProjectError> {
    let project = Project::open(dir)?;
    let out = out.map_or_else(|| project.default_output(), Path::to_owned);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let support = project.dir.join("build").join(".weir");
    match project.file.language {
        Language::Python => build_python(&project, &support, &out, toolchains)?,
        Language::Js => build_js(&project, &support, &out, toolchains)?,
        Language::Rust => build_rust(&project, &out)?,
    }
    Ok(out)
}

fn build_python(
    project: &Project,
    support: &Path,
    out: &Path,
    toolchains: &Toolchains,
) -> Result<(), ProjectError> {
    let componentize = toolchains.componentize_py()?;
    let wit = sdk::write_wit(support)?;
    let sdk_path = sdk::write_python(support)?;
    let source = project.source();
    let module = source
        .file_stem()
        .and_then(|stem| stem.to_str())
        .ok_or_else(|| bad_source(project))?;
    let source_dir = source.parent().unwrap_or(&project.dir);
    // The project's directory comes first, so a `weir_sdk` vendored there wins.
    let mut command = Command::new(componentize);
    command
        .arg("-d")
        .arg(&wit)
        .args(["-w", project.file.kind.world(), "componentize", "-p"])
        .arg(source_dir)
        .arg("-p")
        .arg(&sdk_path)
        .arg(module)
        .arg("-o")
        .arg(out);
    run("componentize-py", &mut command)
}

fn build_js(
    project: &Project,
    support: &Path,
    out: &Path,
    toolchains: &Toolchains,
) -> Result<(), ProjectError> {
    let node = on_path("node").ok_or_else(|| ProjectError::ToolchainMissing {
        language: Language::Js,
        tool: "node",
        install: "install Node.js 20 or later (Debian: apt-get install nodejs npm)".into(),
    })?;
    let toolchain = toolchains.componentize_js(&project.dir)?;
    let wit = sdk::write_wit(support)?;
    let build_script = sdk::write_js(support)?;
    let mut command = Command::new(node);
    command
        .arg(&build_script)
        .arg("--toolchain")
        .arg(&toolchain)
        .arg("--wit")
        .arg(&wit)
        .args(["--world", project.file.kind.world(), "--source"])
        .arg(project.source())
        .arg("--out")
        .arg(out);
    run("componentize-js", &mut command)
}

fn build_rust(project: &Project, out: &Path) -> Result<(), ProjectError> {
    let cargo = on_path("cargo").ok_or_else(|| ProjectError::ToolchainMissing {
        language: Language::Rust,
        tool: "cargo",
        install: "install Rust with rustup, then `rustup target add wasm32-wasip2`".into(),
    })?;
    let manifest = project.dir.join("Cargo.toml");
    let mut command = Command::new(cargo);
    command
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .args([
            "--message-format",
            "json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&manifest);
    let output = command.output().map_err(io(&manifest))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(failed("cargo", &output.status, &output.stderr));
    }
    let built = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .flat_map(|message| {
            let files = message["filenames"].as_array().cloned().unwrap_or_default();
            files
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
        })
        .rfind(|file| file.extension().is_some_and(|ext| ext == "wasm"))
        .ok_or_else(|| ProjectError::BuildFailed {
            tool: "cargo",
            status: "no component built".into(),
            output: "the crate built no .wasm file: its [lib] needs crate-type = [\"cdylib\"]"
                .into(),
        })?;
    std::fs::copy(&built, out).map_err(io(out))?;
    Ok(())
}

fn bad_source(project: &Project) -> ProjectError {
    ProjectError::BadProject {
        path: project.dir.join(super::PROJECT_FILE),
        message: "`source` must name a file".into(),
    }
}

/// Runs a toolchain command, keeping its output for the error if it fails.
fn run(tool: &'static str, command: &mut Command) -> Result<(), ProjectError> {
    let output = command.output().map_err(|source| ProjectError::Io {
        path: PathBuf::from(command.get_program()),
        source,
    })?;
    if output.status.success() {
        return Ok(());
    }
    let mut printed = output.stdout;
    printed.extend_from_slice(&output.stderr);
    Err(failed(tool, &output.status, &printed))
}

fn failed(tool: &'static str, status: &std::process::ExitStatus, printed: &[u8]) -> ProjectError {
    let text = String::from_utf8_lossy(printed);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(30)..].join("\n");
    ProjectError::BuildFailed {
        tool,
        status: status.to_string(),
        output: tail,
    }
}

/// The first executable called `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Writes a file only if its contents differ (so toolchains that watch mtimes stay quiet).
pub(super) fn write_if_changed(path: &Path, contents: &[u8]) -> Result<(), ProjectError> {
    if std::fs::read(path).is_ok_and(|old| old == contents) {
        return Ok(());
    }
    write_file(path, contents)
}
