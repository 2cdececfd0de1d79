//! `weir new`: a ready operator project in one language. The operator and its test are the
//! tumbling count-sum example of that language (tested with the examples), the pipeline spec
//! runs it over the example's sample events, and the SDK is copied in so that the language's own
//! test runner works without setup.
//!
//! Depends on `names`.

use std::path::{Path, PathBuf};

use super::{Kind, Language, PROJECT_FILE, ProjectError, ProjectFile, sdk, write_file};

/// The sample events every new project starts with.
const SAMPLE_EVENTS: &str = include_str!("../../../examples/tumbling-count-sum/events.jsonl");

/// A new project's example, which `weir build` checks: two users' events over two minutes, and
/// the count and sum of each user's minute.
const EXAMPLE_INPUT: &str = "examples/two-users.jsonl";
const EXAMPLE_EXPECTED: &str = "examples/two-users.expected.jsonl";
const EXAMPLE_EVENTS: &str = "{\"user\": \"u1\", \"ts\": 1000, \"amount\": 2}\n\
    {\"user\": \"u2\", \"ts\": 2000, \"amount\": 5}\n\
    {\"user\": \"u1\", \"ts\": 3000, \"amount\": 3}\n\
    {\"user\": \"u1\", \"ts\": 61000, \"amount\": 7}\n";
const EXAMPLE_RESULTS: &str = "{\"key\": \"u1\", \"window_start\": 0, \"window_end\": 60000, \"value\": {\"count\": 2, \"sum\": 5}}\n\
    {\"key\": \"u2\", \"window_start\": 0, \"window_end\": 60000, \"value\": {\"count\": 1, \"sum\": 5}}\n\
    {\"key\": \"u1\", \"window_start\": 60000, \"window_end\": 120000, \"value\": {\"count\": 1, \"sum\": 7}}\n";

/// Creates the project `name` in a new directory under `parent` and returns its path.
pub fn new(parent: &Path, name: &str, language: Language) -> Result<PathBuf, ProjectError> {
    crate::names::check("operator name", name)?;
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ProjectError::Exists(dir));
    }
    let project = ProjectFile {
        name: name.to_owned(),
        language,
        kind: Kind::Aggregate,
        source: None,
        examples: vec![super::Example {
            input: EXAMPLE_INPUT.into(),
            expected: EXAMPLE_EXPECTED.into(),
            key: "user".into(),
            timestamp: "ts".into(),
            window: "1m".into(),
        }],
    };
    let project_toml = toml::to_string(&project).expect("a project file serialises");
    write_file(&dir.join(PROJECT_FILE), project_toml.as_bytes())?;
    write_file(&dir.join("pipeline.toml"), pipeline_spec(name).as_bytes())?;
    write_file(&dir.join("events.jsonl"), SAMPLE_EVENTS.as_bytes())?;
    write_file(&dir.join(EXAMPLE_INPUT), EXAMPLE_EVENTS.as_bytes())?;
    write_file(&dir.join(EXAMPLE_EXPECTED), EXAMPLE_RESULTS.as_bytes())?;
    write_file(&dir.join(".gitignore"), b"build/\n")?;
    write_file(&dir.join("README.md"), readme(name, language).as_bytes())?;
    for (path, contents) in sources(name, language)? {
        write_file(&dir.join(path), contents.as_bytes())?;
    }
    Ok(dir)
}

/// The language's operator, test and SDK files, by path in the project.
fn sources(name: &str, language: Language) -> Result<Vec<(String, String)>, ProjectError> {
    let mut files = Vec::new();
    match language {
        Language::Python => {
            files.push(("app.py".into(), python_source()));
            files.push(("test_app.py".into(), sdk::templates::PYTHON_TEST.into()));
            for (path, contents) in sdk::PYTHON_SDK {
                files.push((format!("weir_sdk/{path}"), (*contents).into()));
            }
        }
        Language::Js => {
            files.push(("app.js".into(), js_source()));
            // In the repository the example's test registers a resolver for `weir-sdk`; a
            // project has the package in node_modules instead.
            let test = sdk::templates::JS_TEST
                .replace("import '../../../guest-sdk/js/register.mjs';\n", "");
            files.push(("app.test.mjs".into(), test));
            files.push(("package.json".into(), js_package(name)));
            files.push((
                "node_modules/weir-sdk/package.json".into(),
                sdk::JS_PACKAGE_JSON.into(),
            ));
            for file in sdk::JS_PACKAGE_FILES {
                let contents = sdk::JS_SDK
                    .iter()
                    .find(|(n, _)| *n == file)
                    .map_or("", |f| f.1);
                files.push((format!("node_modules/weir-sdk/{file}"), contents.into()));
            }
        }
        Language::Rust => {
            files.push(("Cargo.toml".into(), cargo_toml(name)?));
            files.push(("src/lib.rs".into(), rust_source()));
        }
    }
    Ok(files)
}

fn pipeline_spec(name: &str) -> String {
    format!(
        r#"# Run with `weir run --fresh pipeline.toml` after `weir build`: counts and sums `amount` per
# user and minute over events.jsonl, writing to build/out/.
name = "{name}"

[source]
type = "file"
path = "events.jsonl"

[event]
key = "user"
timestamp = "ts"

[watermark]
bound = "5s"

[window]
type = "tumbling"
size = "1m"
allowed_lateness = "10s"

[[operators]]
name = "{name}"
version = "0.1.0"
kind = "aggregate"
module = "build/{name}.wasm"

[state]
backend = "redb"
dir = "build/data"

[sinks]
results = "build/out/results.jsonl"
late = "build/out/late.jsonl"
dead_letters = "build/out/dead-letters.jsonl"
"#
    )
}

fn readme(name: &str, language: Language) -> String {
    let test = match language {
        Language::Python => "python3 -m unittest",
        Language::Js => "node --test",
        Language::Rust => "cargo test",
    };
    format!(
        "# {name}\n\nA Weir aggregate in {}: a count and a sum of `amount` per key and window.\n\n\
         ```sh\n{test:<31} # the operator's unit tests, no Wasm needed\n\
         weir build                      # -> build/{name}.wasm\n\
         weir run --fresh pipeline.toml  # -> build/out/results.jsonl\n\
         weir deploy --server http://127.0.0.1:8080 {name} 0.1.0   # the token from $WEIR_ADMIN_TOKEN\n```\n",
        language.display_name()
    )
}

fn js_package(name: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "scripts": { "test": "node --test" },
    }))
    .expect("JSON serialises")
        + "\n"
}

/// The Rust SDK is a crate of the Weir source tree this binary was built from.
fn cargo_toml(name: &str) -> Result<String, ProjectError> {
    let sdk = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk"));
    let sdk = sdk.canonicalize().map_err(|_| ProjectError::ToolchainMissing {
        language: Language::Rust,
        tool: "the weir-sdk crate",
        install: format!(
            "Rust operators build against the Weir source tree this weir was built from, expected at {}",
            sdk.display()
        ),
    })?;
    let sdk = sdk.display().to_string().replace('\\', "/");
    Ok(format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
weir-sdk = {{ path = "{sdk}" }}

# The SDK and the operator optimised together at link time: the SDK's per-event code is
# inlined into the operator's loop, which runs faster in the sandbox (and the component is
# smaller).
[profile.release]
lto = true
codegen-units = 1

# A project of its own, even when created inside another Cargo workspace.
[workspace]
"#
    ))
}

/// The Rust example with a header for the project instead of the example's.
fn rust_source() -> String {
    let body: String = sdk::templates::RUST_APP
        .lines()
        .skip_while(|line| line.starts_with("//!"))
        .map(|line| format!("{line}\n"))
        .collect();
    format!(
        "//! Counts events and sums their `amount` per key and window. `weir build` turns this crate\n\
         //! into build/<name>.wasm; `cargo test` runs the tests below natively.\n{body}"
    )
}

/// What the project's operator says of itself, in place of the example's opening (which says
/// where the example lives in the Weir repository and how the workspace builds it).
const ABOUT: [&str; 5] = [
    "Counts events and sums their `amount` per key and window. `weir build` turns this project",
    "into build/<name>.wasm, and the test beside it runs without Wasm.",
    "",
    "Each window's output has `count` and `sum` (an int while every `amount` was an int, a",
    "float once any was); an event without a numeric `amount` becomes a dead letter.",
];

/// The Python example, its opening docstring replaced by [`ABOUT`].
fn python_source() -> String {
    let example = sdk::templates::PYTHON_APP;
    let body = (example.strip_prefix("\"\"\""))
        .and_then(|rest| rest.split_once("\"\"\"\n"))
        .map_or(example, |(_, body)| body);
    format!("\"\"\"{}\n\"\"\"\n{body}", ABOUT.join("\n"))
}

/// The JavaScript example, its opening comment replaced by [`ABOUT`].
fn js_source() -> String {
    let body: String = (sdk::templates::JS_APP.lines())
        .skip_while(|line| line.starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    let about: String = ABOUT
        .iter()
        .map(|line| format!("// {line}\n").replace("// \n", "//\n"))
        .collect();
    format!("{about}{body}")
}

#[cfg(test)]
mod tests {
    /// A project's operator speaks of the project, not of the Weir repository it came from.
    #[test]
    fn a_project_s_operator_says_nothing_of_the_repository() {
        for source in [
            super::python_source(),
            super::js_source(),
            super::rust_source(),
        ] {
            assert!(!source.contains("examples/"), "{source}");
            assert!(!source.contains("workspace"), "{source}");
            assert!(source.contains("weir build"), "{source}");
        }
        assert!(super::python_source().starts_with("\"\"\"Counts events"));
        assert!(super::python_source().contains("class CountSum"));
        assert!(super::js_source().starts_with("// Counts events"));
    }

    /// A Rust project is its own workspace, and its release build links the SDK and the
    /// operator as one unit (what makes the SDK's per-event code inline into the operator).
    #[test]
    fn a_rust_project_links_its_operator_and_the_sdk_as_one_unit() {
        let manifest: toml::Table = super::cargo_toml("my-op").unwrap().parse().unwrap();
        let release = &manifest["profile"]["release"];
        assert_eq!(release["lto"].as_bool(), Some(true));
        assert_eq!(release["codegen-units"].as_integer(), Some(1));
        assert!(manifest.contains_key("workspace"));
        assert_eq!(manifest["package"]["name"].as_str(), Some("my-op"));
    }
}
