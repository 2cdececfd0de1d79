//! A project's own examples (`[[examples]]` in `weir.toml`): input events and the results the
//! operator must give for them. `weir build` runs each through the component it built, in a
//! pipeline of its own (the file source, a tumbling window for an aggregate, state in memory,
//! every window closed at the end of the input), and fails on the first example whose results
//! are not the expected ones, or that made a dead letter.
//!
//! Depends on `pipeline` and `spec` (the example's run).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Kind, Project, ProjectError};

/// One example: input events and the results the operator must give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// JSON Lines of input events, relative to the project.
    pub input: String,
    /// JSON Lines of the results, relative to the project: `{"key", "window_start",
    /// "window_end", "value"}` for an aggregate, `{"key", "value"}` for an enricher, in any
    /// order.
    pub expected: String,
    /// The events' key field.
    #[serde(default = "default_key")]
    pub key: String,
    /// The events' timestamp field.
    #[serde(default = "default_timestamp")]
    pub timestamp: String,
    /// An aggregate's tumbling window.
    #[serde(default = "default_window")]
    pub window: String,
}

fn default_key() -> String {
    "user".into()
}

fn default_timestamp() -> String {
    "ts".into()
}

fn default_window() -> String {
    "1m".into()
}

/// Runs every example of `project` through `module`; for each, its input file and how many
/// results it gave as expected.
pub fn check_examples(
    project: &Project,
    module: &Path,
) -> Result<Vec<(String, usize)>, ProjectError> {
    let work = project.dir.join("build").join(".weir").join("examples");
    let mut checked = Vec::new();
    for example in &project.file.examples {
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).map_err(|source| ProjectError::Io {
            path: work.clone(),
            source,
        })?;
        let results = check(project, example, module, &work)?;
        checked.push((example.input.clone(), results));
    }
    Ok(checked)
}

/// One example: how many results it gave, all as expected.
fn check(
    project: &Project,
    example: &Example,
    module: &Path,
    work: &Path,
) -> Result<usize, ProjectError> {
    let failed = |problem: String| ProjectError::Example {
        example: example.input.clone(),
        problem,
    };
    let aggregate = project.file.kind == Kind::Aggregate;
    let spec_text = spec(project, example, module, work);
    let spec = crate::spec::PipelineSpec::parse(&spec_text, false, &project.dir)
        .map_err(|e| failed(e.to_string()))?;
    crate::pipeline::run(&spec).map_err(|e| failed(e.to_string()))?;
    if let Some(dead) = read_lines(&work.join("dead.jsonl")).first() {
        return Err(failed(format!("an input became a dead letter: {dead}")));
    }
    let shape = |record: serde_json::Value| match aggregate {
        true => serde_json::json!({"key": record["key"], "window_start": record["window_start"],
            "window_end": record["window_end"], "value": record["value"]}),
        false => serde_json::json!({"key": record["key"], "value": record["value"]}),
    };
    let mut got: Vec<String> = read_lines(&work.join("results.jsonl"))
        .into_iter()
        .map(shape)
        .map(|v| v.to_string())
        .collect();
    let expected_path = project.dir.join(&example.expected);
    if !expected_path.is_file() {
        return Err(failed(format!("{} is not there", example.expected)));
    }
    let mut want: Vec<String> = read_lines(&expected_path)
        .into_iter()
        .map(shape)
        .map(|v| v.to_string())
        .collect();
    got.sort();
    want.sort();
    if got == want {
        return Ok(got.len());
    }
    let missing = want.iter().find(|w| !got.contains(w));
    let extra = got.iter().find(|g| !want.contains(g));
    Err(failed(match (missing, extra) {
        (Some(w), Some(g)) => format!("expected {w}, got {g} instead"),
        (Some(w), None) => format!("expected {w}, which it did not give"),
        (None, Some(g)) => format!("it gave {g}, which is not expected"),
        (None, None) => format!(
            "{} results, {} expected (some repeated)",
            got.len(),
            want.len()
        ),
    }))
}

/// The example's pipeline spec.
fn spec(project: &Project, example: &Example, module: &Path, work: &Path) -> String {
    let quoted = |path: &Path| toml::Value::String(path.display().to_string()).to_string();
    let text = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let (kind, window) = match project.file.kind {
        Kind::Aggregate => (
            "aggregate",
            format!(
                "[window]\ntype = \"tumbling\"\nsize = {}\n",
                text(&example.window)
            ),
        ),
        Kind::Enrich => ("enrich", String::new()),
    };
    format!(
        "name = \"example\"\n[source]\ntype = \"file\"\npath = {}\n[event]\nkey = {}\ntimestamp = {}\n\
         {window}[[operators]]\nname = {}\nversion = \"example\"\nkind = \"{kind}\"\nmodule = {}\n\
         [state]\nbackend = \"memory\"\n[sinks]\nresults = {}\nlate = {}\ndead_letters = {}\n",
        quoted(&project.dir.join(&example.input)),
        text(&example.key),
        text(&example.timestamp),
        text(&project.file.name),
        quoted(module),
        quoted(&work.join("results.jsonl")),
        quoted(&work.join("late.jsonl")),
        quoted(&work.join("dead.jsonl")),
    )
}

fn read_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or(serde_json::Value::String(line.to_owned()))
        })
        .collect()
}
