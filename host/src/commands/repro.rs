//! `weir repro`: a repro bundle for a row of a served pipeline (a result, a shadow result, a
//! replay row, a dead letter), written into an operator project as a test in its language.
//! Uses the library's `client`, `names`, `project` and `repro`.

use std::io::Read;
use std::path::PathBuf;

use weir::project::{Language, Project};
use weir::repro::render::{Operator, exported_operator, render};

/// The options of `weir repro`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReproArgs {
    /// The server's address, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// An admin token (default: $WEIR_ADMIN_TOKEN).
    #[arg(long, env = "WEIR_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// The pipeline.
    pipeline: String,
    /// The row, as a line of results.jsonl, shadow.jsonl or dead-letters.jsonl, or a row of
    /// `weir replay --json`; `-` reads it from standard input.
    #[arg(long)]
    row: String,
    /// The live version and the candidate, `LIVE,CANDIDATE` (default: the live one and the
    /// row's own version, or the rollout's candidate).
    #[arg(long, value_delimiter = ',', num_args = 2)]
    versions: Option<Vec<String>>,
    /// The operator project to write the test into.
    #[arg(long, default_value = ".")]
    project: PathBuf,
    /// Print the bundle's JSON instead of writing a test.
    #[arg(long)]
    json: bool,
}

/// `weir repro`: asks the server for the bundle and writes the test.
pub(crate) fn repro(args: ReproArgs) -> anyhow::Result<()> {
    weir::names::check("pipeline name", &args.pipeline)?;
    let row = match args.row.as_str() {
        "-" => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            text
        }
        text => text.to_owned(),
    };
    let row: serde_json::Value = serde_json::from_str(row.trim())
        .map_err(|e| anyhow::anyhow!("--row is not one JSON row: {e}"))?;
    let request = serde_json::json!({"row": row, "versions": args.versions});
    let path = format!("/v1/pipelines/{}/repro", args.pipeline);
    let (status, body) = weir::client::post(
        &args.server,
        &args.token,
        &path,
        "application/json",
        request.to_string().as_bytes(),
        std::time::Duration::from_secs(600),
    )?;
    if status != 200 {
        anyhow::bail!("the server answered {status}: {body}");
    }
    if args.json {
        println!("{body}");
        return Ok(());
    }
    let bundle: weir::repro::Bundle = serde_json::from_str(&body)?;
    let project = Project::open(&args.project)?;
    let language = project.file.language;
    let source = project.source();
    let text = std::fs::read_to_string(&source).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the operator's source {}: {e}",
            source.display()
        )
    })?;
    let name = exported_operator(language, &text).ok_or_else(|| {
        anyhow::anyhow!(
            "{} exports no aggregate (`export_aggregate` / `exportAggregate`): a repro tests an aggregate",
            source.display()
        )
    })?;
    let module = match language {
        Language::Python => source
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        Language::Js => format!(
            "./{}",
            source
                .file_name()
                .map(|s| s.to_string_lossy())
                .unwrap_or_default()
        ),
        Language::Rust => String::new(),
    };
    if language == Language::Js && !exports_js(&text, &name) {
        anyhow::bail!(
            "{} passes `{name}` to exportAggregate but does not export it: add `export` before its \
             declaration so that the test can import it",
            source.display()
        );
    }
    let rendered = render(&bundle, language, &Operator { name, module });
    let written = project.dir.join(&rendered.path);
    std::fs::write(&written, &rendered.text)?;
    if language == Language::Rust {
        include_in_crate(&source, &rendered.path)?;
    }
    println!("wrote {}", written.display());
    let run = match language {
        Language::Python => "python3 -m unittest",
        Language::Js => "node --test",
        Language::Rust => "cargo test",
    };
    println!(
        "  key {:?}, window [{}, {}), {} events: {}@{} is expected, {}@{} {}",
        bundle.key,
        bundle.window_start,
        bundle.window_end,
        bundle.events.len(),
        bundle.operator,
        bundle.expected.version,
        bundle.operator,
        bundle.candidate.version,
        match (&bundle.candidate.output, &bundle.candidate.error) {
            (Some(output), _) => format!("gives {output}"),
            (None, Some(error)) => format!("fails: {error}"),
            (None, None) => "gives nothing".into(),
        }
    );
    if let Some(note) = &bundle.note {
        println!("  note: {note}");
    }
    println!("  run it in {} with `{run}`", project.dir.display());
    Ok(())
}

/// Whether a JavaScript module exports `name`.
fn exports_js(text: &str, name: &str) -> bool {
    ["const", "let", "var", "function", "class"]
        .iter()
        .any(|word| text.contains(&format!("export {word} {name}")))
        || text.lines().any(|line| {
            line.trim_start().starts_with("export {")
                && line.split(['{', '}', ',', ' ']).any(|part| part == name)
        })
}

/// Adds `mod repro_...;` (tests only) to the crate root, once.
fn include_in_crate(lib: &std::path::Path, test: &str) -> anyhow::Result<()> {
    let module = std::path::Path::new(test)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = std::fs::read_to_string(lib)?;
    let line = format!("mod {module};");
    if text.contains(&line) {
        return Ok(());
    }
    let separator = if text.ends_with('\n') { "" } else { "\n" };
    std::fs::write(lib, format!("{text}{separator}\n#[cfg(test)]\n{line}\n"))?;
    Ok(())
}
