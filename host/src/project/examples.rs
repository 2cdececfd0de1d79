//! A project's own examples (`[[examples]]` in `weir.toml`): input events and the results the
//! operator must give for them. `weir build` runs each through the component it built, in a
//! pipeline of its own (the file source, a tumbling window for an aggregate, state in memory,
//! every window closed at the end of the input), and fails on the first example whose results
//! are not the expected ones, or that made a dead letter.
//!
//! `weir build` also embeds the examples in the component it built (a custom section,
//! [`EXAMPLES_SECTION`]), so that the server can run them again before it accepts an upload
//! (`?verify=examples`, which `weir deploy` asks for): [`embed`], [`embedded`],
//! [`check_embedded`].
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

/// The custom section of a component that carries its project's examples.
pub const EXAMPLES_SECTION: &str = "weir-examples";

/// The most bytes of examples a component carries (larger ones are not embedded).
pub const MAX_EMBEDDED_BYTES: usize = 1 << 20;

/// A project's examples as a component carries them: each input and expectation inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Embedded {
    /// The operator's name.
    pub name: String,
    /// Aggregate or enricher.
    pub kind: Kind,
    /// The examples.
    pub examples: Vec<EmbeddedExample>,
}

/// One embedded example: an [`Example`] with its files' contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedExample {
    /// Where it came from in the project (its input file).
    pub from: String,
    /// The input events, JSON Lines.
    pub input: String,
    /// The expected results, JSON Lines.
    pub expected: String,
    /// See [`Example::key`].
    pub key: String,
    /// See [`Example::timestamp`].
    pub timestamp: String,
    /// See [`Example::window`].
    pub window: String,
}

/// Appends the project's examples to the component at `module` as a custom section. Returns
/// the bytes embedded: none without examples, or past [`MAX_EMBEDDED_BYTES`].
pub fn embed(project: &Project, module: &Path) -> Result<Option<usize>, ProjectError> {
    if project.file.examples.is_empty() {
        return Ok(None);
    }
    let read = |file: &str| {
        let path = project.dir.join(file);
        std::fs::read_to_string(&path).map_err(|source| ProjectError::Io { path, source })
    };
    let mut examples = Vec::new();
    for example in &project.file.examples {
        examples.push(EmbeddedExample {
            from: example.input.clone(),
            input: read(&example.input)?,
            expected: read(&example.expected)?,
            key: example.key.clone(),
            timestamp: example.timestamp.clone(),
            window: example.window.clone(),
        });
    }
    let embedded = Embedded {
        name: project.file.name.clone(),
        kind: project.file.kind,
        examples,
    };
    let data = serde_json::to_vec(&embedded).expect("examples serialise");
    if data.len() > MAX_EMBEDDED_BYTES {
        return Ok(None);
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(module)
        .map_err(|source| ProjectError::Io {
            path: module.to_owned(),
            source,
        })?;
    use std::io::Write;
    file.write_all(&custom_section(EXAMPLES_SECTION, &data))
        .map_err(|source| ProjectError::Io {
            path: module.to_owned(),
            source,
        })?;
    Ok(Some(data.len()))
}

/// A custom section: id 0, its size, its name and its bytes.
fn custom_section(name: &str, data: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                return;
            }
        }
    }
    let mut content = Vec::with_capacity(name.len() + data.len() + 5);
    leb128(name.len(), &mut content);
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(data);
    let mut section = vec![0u8];
    leb128(content.len(), &mut section);
    section.extend_from_slice(&content);
    section
}

/// The examples a component carries, if any (the last such section).
pub fn embedded(component: &[u8]) -> Result<Option<Embedded>, String> {
    let mut found = None;
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        let payload = payload.map_err(|e| format!("not a WebAssembly binary: {e}"))?;
        if let wasmparser::Payload::CustomSection(section) = payload
            && section.name() == EXAMPLES_SECTION
        {
            found = Some(section.data().to_vec());
        }
    }
    let Some(data) = found else {
        return Ok(None);
    };
    if data.len() > MAX_EMBEDDED_BYTES {
        return Err(format!(
            "its examples take {} bytes, more than {MAX_EMBEDDED_BYTES}",
            data.len()
        ));
    }
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|e| format!("its {EXAMPLES_SECTION} section is not Weir's: {e}"))
}

/// Runs `embedded`'s examples through the component at `module`, in `work` (a directory of
/// its own): as [`check_examples`] does for a project.
pub fn check_embedded(
    embedded: &Embedded,
    module: &Path,
    work: &Path,
) -> Result<Vec<(String, usize)>, ProjectError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ProjectError::Io { path, source }
    };
    std::fs::create_dir_all(work).map_err(io(work))?;
    let mut examples = Vec::new();
    for (i, example) in embedded.examples.iter().enumerate() {
        let (input, expected) = (format!("input-{i}.jsonl"), format!("expected-{i}.jsonl"));
        std::fs::write(work.join(&input), &example.input).map_err(io(&work.join(&input)))?;
        std::fs::write(work.join(&expected), &example.expected)
            .map_err(io(&work.join(&expected)))?;
        examples.push(Example {
            input,
            expected,
            key: example.key.clone(),
            timestamp: example.timestamp.clone(),
            window: example.window.clone(),
        });
    }
    let project = Project {
        dir: work.to_owned(),
        file: super::ProjectFile {
            name: embedded.name.clone(),
            language: super::Language::Rust,
            kind: embedded.kind,
            source: None,
            examples,
        },
    };
    let from = |input: &str| {
        (embedded.examples.iter().enumerate())
            .find(|(i, _)| format!("input-{i}.jsonl") == input)
            .map_or(input.to_owned(), |(_, example)| example.from.clone())
    };
    let checked = check_examples(&project, module).map_err(|e| match e {
        ProjectError::Example { example, problem } => ProjectError::Example {
            example: from(&example),
            problem,
        },
        other => other,
    })?;
    // Named as the project names them.
    Ok((checked.into_iter().zip(&embedded.examples))
        .map(|((_, results), example)| (example.from.clone(), results))
        .collect())
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
