//! Operators in Python and JavaScript, built in this test run with `weir build` (componentize-py
//! and componentize-js from `make toolchains`): the same examples give the same results in all
//! three languages, a rollout moves keys from Rust to Python to JavaScript without losing or
//! repeating a result, hostile guests in both languages are contained, compiled components are
//! cached on disk, and `weir new` / `weir build` / `weir deploy` work for each language.
//!
//! The Rust components implement contract 0.3 (`wit/v0.3`) as the Python and JavaScript ones do
//! (aggregates with many windows per call, enrichers' batches field after field), each through
//! its own SDK, so these tests also hold the three SDKs' adapters to the same results, and the
//! rollout moves keys' state between them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::server::{
    ADMIN, BASE_TS, PATIENCE, PIPELINE, Server, assert_unique_ids, create_and_start, ev,
    far_future, live_model,
};
use crate::support::{component, workspace};

/// The languages besides Rust, as `weir new --lang` names them.
const LANGUAGES: [&str; 2] = ["python", "js"];
/// The examples written in every language.
const EXAMPLES: [&str; 3] = ["tumbling-count-sum", "session-summary", "enrich-customers"];

pub(crate) fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// The toolchain directory `make toolchains` fills.
pub(crate) fn toolchains() -> PathBuf {
    std::env::var_os("WEIR_TOOLCHAINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/toolchains"))
}

fn components_dir() -> PathBuf {
    workspace().join("target/weir-components")
}

/// Runs `weir build <project> --out <out>`.
fn weir_build(project: &Path, out: &Path) -> Result<(), String> {
    let output = weir()
        .arg("build")
        .arg(project)
        .arg("--out")
        .arg(out)
        .env("WEIR_TOOLCHAINS", toolchains())
        .output()
        .map_err(|e| format!("cannot run weir: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "weir build {} failed (are the toolchains installed? `make toolchains`):\n{}",
            project.display(),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A Python or JavaScript component of this repository, built once per test run: an example
/// (`tumbling-count-sum-python`) or a hostile guest (`py-hostile`, `js-hostile`).
fn polyglot(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let mut projects: Vec<(PathBuf, String)> = ["py-hostile", "js-hostile"]
                .iter()
                .map(|guest| {
                    (
                        workspace().join("tests/guests").join(guest),
                        guest.to_string(),
                    )
                })
                .collect();
            for example in EXAMPLES {
                for language in LANGUAGES {
                    let dir = workspace().join("examples").join(example).join(language);
                    projects.push((dir, format!("{example}-{language}")));
                }
            }
            // Two builders at a time: the machine's two cores.
            let (python, js): (Vec<_>, Vec<_>) = projects
                .into_iter()
                .partition(|(dir, _)| dir.join("app.py").exists());
            let build_all = |projects: Vec<(PathBuf, String)>| {
                std::thread::spawn(move || -> Result<(), String> {
                    for (dir, name) in projects {
                        weir_build(&dir, &components_dir().join(format!("{name}.wasm")))?;
                    }
                    Ok(())
                })
            };
            let (python, js) = (build_all(python), build_all(js));
            python.join().expect("python builds")?;
            js.join().expect("js builds")
        })
        .as_ref()
        .expect("the Python and JavaScript components build");
    components_dir().join(format!("{name}.wasm"))
}

// ---------------------------------------------------------------------------------------------
// The same examples in three languages.
// ---------------------------------------------------------------------------------------------

/// What a run wrote, with what names the operator (its name, version, and the `id` that
/// contains them) taken out.
#[derive(Debug, PartialEq)]
struct Outputs {
    results: Vec<Value>,
    late: Vec<Value>,
    dead_letters: Vec<Value>,
}

fn without_operator(mut record: Value) -> Value {
    if let Some(object) = record.as_object_mut() {
        for field in ["operator", "operator_version", "id"] {
            object.remove(field);
        }
    }
    record
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .map(without_operator)
        .collect()
}

/// Runs a ready pipeline spec of the repository from the beginning and reads its outputs
/// (results from the sink file, or standard output when the spec writes there).
fn run_spec(spec: &str) -> Outputs {
    let output = weir()
        .current_dir(workspace())
        .args(["run", "--fresh", "--shards", "2", spec])
        .output()
        .expect("running weir");
    assert!(
        output.status.success(),
        "{spec} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(workspace().join(spec)).expect("the spec");
    let spec_dir = workspace()
        .join(spec)
        .parent()
        .expect("a directory")
        .to_owned();
    let sinks: toml::Table = toml::from_str::<toml::Table>(&text).expect("TOML")["sinks"]
        .as_table()
        .expect("[sinks]")
        .clone();
    let read = |sink: &str| match sinks.get(sink).and_then(|s| s.as_str()) {
        Some("stdout") => jsonl(&String::from_utf8_lossy(&output.stdout)),
        Some(path) => jsonl(&std::fs::read_to_string(spec_dir.join(path)).unwrap_or_default()),
        None => Vec::new(),
    };
    let mut outputs = Outputs {
        results: read("results"),
        late: read("late"),
        dead_letters: read("dead_letters"),
    };
    // Two shards write in their own order; compare as sets of records.
    for records in [
        &mut outputs.results,
        &mut outputs.late,
        &mut outputs.dead_letters,
    ] {
        records.sort_by_key(|record| record.to_string());
    }
    outputs
}

#[test]
fn every_example_gives_the_same_results_in_rust_python_and_javascript() {
    for example in EXAMPLES {
        component(example);
        for language in LANGUAGES {
            polyglot(&format!("{example}-{language}"));
        }
        let rust = run_spec(&format!("examples/{example}/pipeline.toml"));
        assert!(!rust.results.is_empty(), "{example} has results");
        for language in LANGUAGES {
            let other = run_spec(&format!("examples/{example}/{language}/pipeline.toml"));
            if other != rust {
                let first = |a: &[Value], b: &[Value]| {
                    a.iter()
                        .zip(b)
                        .find(|(x, y)| x != y)
                        .map(|(x, y)| format!("{x} vs {y}"))
                };
                panic!(
                    "{example} in {language} differs from Rust: results {} vs {} ({:?}), late {} vs {}, dead letters {} vs {} ({:?})",
                    other.results.len(),
                    rust.results.len(),
                    first(&other.results, &rust.results),
                    other.late.len(),
                    rust.late.len(),
                    other.dead_letters.len(),
                    rust.dead_letters.len(),
                    first(&other.dead_letters, &rust.dead_letters),
                );
            }
        }
    }
}

/// A pipeline spec for `component` over `events` in `dir`: the example's event fields and
/// window, memory state, sinks in `dir`.
fn edge_spec(dir: &Path, example: &str, component: &Path) -> PathBuf {
    let (key, window) = match example {
        "tumbling-count-sum" => ("user", "type = \"tumbling\"\nsize = \"1m\""),
        _ => ("visitor", "type = \"session\"\ngap = \"30s\""),
    };
    let spec = format!(
        r#"name = "edges"
[source]
type = "file"
path = "events.jsonl"
[event]
key = "{key}"
timestamp = "ts"
[watermark]
bound = "5s"
[window]
{window}
allowed_lateness = "10s"
[[operators]]
name = "edges"
version = "1"
kind = "aggregate"
module = "{module}"
[sandbox]
memory = "128MiB"
[state]
backend = "memory"
[sinks]
results = "results.jsonl"
late = "late.jsonl"
dead_letters = "dead-letters.jsonl"
"#,
        module = component.display()
    );
    let path = dir.join(format!(
        "{}.toml",
        component.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, spec).expect("writing the spec");
    path
}

/// Values at the edges of the contract: times before 1970 (negative timestamps and window
/// bounds), negative and extreme amounts, a sum that overflows an int. componentize-js lifts a
/// flat `s64` parameter as unsigned, which only a window before the epoch shows.
#[test]
fn values_at_the_edges_cross_every_language_unchanged() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut events = Vec::new();
    for (i, ts) in [
        -90_000i64, -60_001, -60_000, -1, 0, 1, 59_999, 120_000, -30_000,
    ]
    .into_iter()
    .enumerate()
    {
        let amount = match i % 4 {
            0 => json!(-7),
            1 => json!(i64::MAX - 3),
            2 => json!(-2.5),
            _ => json!(i64::MIN + 1),
        };
        let who = format!("u{}", i % 3);
        events.push(json!({"user": who, "visitor": who, "ts": ts, "amount": amount, "page": "/"}));
    }
    events.push(json!({"user": "u0", "visitor": "u0", "ts": 3_600_000, "amount": 1, "page": "/"}));
    let lines: Vec<String> = events.iter().map(Value::to_string).collect();
    std::fs::write(dir.path().join("events.jsonl"), lines.join("\n") + "\n").expect("events");
    for example in ["tumbling-count-sum", "session-summary"] {
        let rust = run_spec(&edge_spec(dir.path(), example, &component(example)).to_string_lossy());
        assert!(
            rust.results
                .iter()
                .any(|r| r["window_start"].as_i64() < Some(0)),
            "{example}: a window before the epoch: {:?}",
            rust.results
        );
        for language in LANGUAGES {
            let module = polyglot(&format!("{example}-{language}"));
            let other = run_spec(&edge_spec(dir.path(), example, &module).to_string_lossy());
            assert_eq!(other, rust, "{example} in {language} differs from Rust");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A rollout across languages.
// ---------------------------------------------------------------------------------------------

fn roll_out(server: &Server, version: &str, percent: u32) {
    let body = json!({"version": version, "percent": percent});
    server.expect(
        &format!("rolling out {version} to {percent} percent"),
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &body,
        ),
        200,
    );
    server.wait_for(&format!("{version} at {percent} percent"), PATIENCE, || {
        let status = server.status(PIPELINE);
        if status["rollout"]["applied_percent"] == percent {
            Ok(())
        } else {
            Err(status["rollout"].to_string())
        }
    });
}

fn promote(server: &Server) {
    server.expect(
        "promoting",
        server.post(
            &format!("/v1/pipelines/{PIPELINE}/promote"),
            Some(ADMIN),
            b"",
        ),
        200,
    );
}

#[test]
fn a_rollout_from_rust_to_python_to_javascript_keeps_every_keys_state() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(dir.path());
    server.upload_ok("count-sum", "1.0.0", &component("tumbling-count-sum"));
    server.upload_ok("count-sum", "2.0.0", &polyglot("tumbling-count-sum-python"));
    server.upload_ok("count-sum", "3.0.0", &polyglot("tumbling-count-sum-js"));
    create_and_start(&server);

    // 20 users, one event each every 10 ms of event time: every 1 s window of a user holds
    // events sent before and after each step, so a window is begun in one language and finished
    // in another.
    let events: Vec<_> = (0..2_400)
        .map(|i| ev(&format!("user-{}", i % 20), BASE_TS + i * 10, i % 97 + 1))
        .collect();
    let chunks: Vec<_> = events.chunks(200).collect();
    let steps: [&dyn Fn(); 5] = [
        &|| roll_out(&server, "2.0.0", 50),
        &|| roll_out(&server, "2.0.0", 100),
        &|| promote(&server),
        &|| roll_out(&server, "3.0.0", 50),
        &|| roll_out(&server, "3.0.0", 100),
    ];
    for (i, chunk) in chunks.iter().enumerate() {
        server.ingest(PIPELINE, chunk);
        if let Some(step) = steps.get(i) {
            server.wait_for_events_in(PIPELINE, (i + 1) * 200);
            step();
        }
    }
    let mut all = events.clone();
    all.push(far_future(&events));
    server.ingest(PIPELINE, &all[events.len()..]);
    let status = server.wait_for_events_in(PIPELINE, all.len());

    let expected: BTreeMap<(String, i64, i64), (i64, i64)> = live_model(&all)
        .into_iter()
        .map(|e| ((e.key, e.start, e.end), (e.count, e.sum)))
        .collect();
    let results = server.wait_for("every window's result", PATIENCE, || {
        let results = server.results(PIPELINE);
        if results.len() >= expected.len() {
            Ok(results)
        } else {
            Err(format!("{} of {}", results.len(), expected.len()))
        }
    });
    assert_unique_ids(&results);
    let mut got = BTreeMap::new();
    let mut versions = BTreeMap::<String, usize>::new();
    for record in &results {
        let window = (
            record["key"].as_str().expect("key").to_owned(),
            record["window_start"].as_i64().expect("start"),
            record["window_end"].as_i64().expect("end"),
        );
        let value = (
            record["value"]["count"].as_i64().expect("an int count"),
            record["value"]["sum"].as_i64().expect("an int sum"),
        );
        assert!(
            got.insert(window.clone(), value).is_none(),
            "window {window:?} has two results: no update was expected{}",
            server.diag()
        );
        *versions
            .entry(record["operator_version"].to_string())
            .or_default() += 1;
    }
    assert_eq!(
        got,
        expected,
        "every window's count and sum match the model{}",
        server.diag()
    );
    assert_eq!(
        versions.len(),
        3,
        "each language finished windows: {versions:?}"
    );
    assert_eq!(status["dead_letters"], 0, "{status}");
}

// ---------------------------------------------------------------------------------------------
// Hostile guests in Python and JavaScript.
// ---------------------------------------------------------------------------------------------

/// A pipeline of the hostile guest over four keys, each doing one `action`.
fn run_hostile(guest: &str) -> (Output, Vec<Value>, Vec<Value>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let events: String = ["calm", "raise", "spin", "hog", "calm"]
        .iter()
        .enumerate()
        .map(|(i, action)| {
            format!(
                "{}\n",
                json!({"key": format!("k-{action}"), "action": action, "ts": BASE_TS + i as i64})
            )
        })
        .collect();
    std::fs::write(dir.path().join("events.jsonl"), events).expect("events");
    let spec = format!(
        r#"name = "hostile"
[source]
type = "file"
path = "events.jsonl"
[event]
key = "key"
timestamp = "ts"
[window]
type = "tumbling"
size = "1m"
[[operators]]
name = "hostile"
version = "1"
kind = "aggregate"
module = "{}"
[sandbox]
call_timeout = "2s"
memory = "128MiB"
[state]
backend = "memory"
[sinks]
results = "results.jsonl"
dead_letters = "dead.jsonl"
"#,
        polyglot(guest).display()
    );
    std::fs::write(dir.path().join("pipeline.toml"), spec).expect("spec");
    let output = weir()
        .arg("run")
        .arg(dir.path().join("pipeline.toml"))
        .output()
        .expect("running weir");
    let read = |file: &str| {
        std::fs::read_to_string(dir.path().join(file))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect::<Vec<Value>>()
    };
    (output, read("results.jsonl"), read("dead.jsonl"))
}

#[test]
fn python_and_javascript_exceptions_loops_and_memory_hogs_become_dead_letters() {
    for (guest, exception) in [
        ("py-hostile", "ValueError: boom from python"),
        ("js-hostile", "Error: boom from js"),
    ] {
        let (output, results, dead) = run_hostile(guest);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{guest}: the host survives:\n{stderr}"
        );
        let calm: Vec<_> = results.iter().filter(|r| r["key"] == "k-calm").collect();
        assert_eq!(
            calm.len(),
            1,
            "{guest}: the calm key's window fires: {results:?}"
        );
        assert_eq!(calm[0]["value"]["count"], 2, "{guest}: {results:?}");
        let reason = |key: &str| {
            dead.iter()
                .find(|d| d["raw"].as_str().is_some_and(|raw| raw.contains(key)))
                .map(|d| d.to_string())
                .unwrap_or_else(|| panic!("{guest}: no dead letter for {key}: {dead:?}\n{stderr}"))
        };
        let raised = reason("k-raise");
        assert!(
            raised.contains(exception),
            "{guest}: the exception's message: {raised}"
        );
        assert!(
            raised.contains("(at "),
            "{guest}: where it was raised: {raised}"
        );
        let spun = reason("k-spin");
        assert!(
            spun.contains("exceeded its time limit of 2000 ms"),
            "{guest}: {spun}"
        );
        let hogged = reason("k-hog");
        assert!(
            hogged.contains("exceeded its memory limit"),
            "{guest}: {hogged}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The compiled-component cache.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_compiled_component_is_cached_on_disk_and_a_damaged_entry_is_recompiled() {
    let cache = tempfile::tempdir().expect("a temporary directory");
    let spec = "examples/tumbling-count-sum/python/pipeline.toml";
    polyglot("tumbling-count-sum-python");
    let run = || {
        let output = weir()
            .current_dir(workspace())
            .args(["run", "--fresh", spec])
            .env("WEIR_COMPILE_CACHE", cache.path())
            .env("RUST_LOG", "weir=info")
            .output()
            .expect("running weir");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        stderr
    };
    let entries = || -> Vec<PathBuf> {
        std::fs::read_dir(cache.path())
            .expect("the cache directory")
            .map(|entry| entry.expect("an entry").path())
            .collect()
    };
    let first = run();
    assert!(
        first.contains("from_disk=false"),
        "compiled the first time:\n{first}"
    );
    let stored = entries();
    assert_eq!(stored.len(), 1, "one entry: {stored:?}");
    assert!(stored[0].extension().is_some_and(|e| e == "cwasm"));
    let second = run();
    assert!(
        second.contains("from_disk=true"),
        "loaded the second time:\n{second}"
    );

    // A damaged entry (a flipped byte in the compiled code) is noticed, compiled again and
    // replaced; the run is unaffected.
    let mut bytes = std::fs::read(&stored[0]).expect("the entry");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&stored[0], &bytes).expect("damaging the entry");
    let third = run();
    assert!(
        third.contains("damaged"),
        "the damage is reported:\n{third}"
    );
    assert!(
        third.contains("from_disk=false"),
        "and compiled again:\n{third}"
    );
    assert!(run().contains("from_disk=true"), "the entry was rewritten");
}

// ---------------------------------------------------------------------------------------------
// The operator workflow: weir new, weir build, weir run, weir deploy.
// ---------------------------------------------------------------------------------------------

pub(crate) fn succeed(what: &str, command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{what} failed:\n{printed}");
    printed
}

/// The project's own unit tests, as its README tells the user to run them.
pub(crate) fn project_test(language: &str, dir: &Path) -> Command {
    let mut command = match language {
        "python" => {
            let mut c = Command::new("python3");
            c.args(["-m", "unittest"]);
            c
        }
        "js" => {
            let mut c = Command::new("node");
            c.arg("--test");
            c
        }
        _ => {
            let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            // The crate's tests run natively; sharing the workspace's target directory reuses
            // its build of wit-bindgen.
            c.arg("test")
                .env("CARGO_TARGET_DIR", workspace().join("target"));
            c
        }
    };
    command.current_dir(dir);
    command
}

#[test]
fn weir_new_build_run_and_deploy_work_in_every_language() {
    let projects = tempfile::tempdir().expect("a temporary directory");
    let server_dir = tempfile::tempdir().expect("a temporary directory");
    let server = Server::start(server_dir.path());
    for language in ["python", "js", "rust"] {
        let name = format!("my-{language}-op");
        succeed(
            &format!("weir new --lang {language}"),
            weir()
                .args(["new", &name, "--lang", language, "--dir"])
                .arg(projects.path()),
        );
        let dir = projects.path().join(&name);
        succeed(
            &format!("{language} project tests"),
            &mut project_test(language, &dir),
        );
        let mut build = weir();
        build
            .arg("build")
            .current_dir(&dir)
            .env("WEIR_TOOLCHAINS", toolchains());
        if language == "rust" {
            build.env("CARGO_TARGET_DIR", workspace().join("target"));
        }
        succeed(&format!("weir build ({language})"), &mut build);
        succeed(
            &format!("weir run ({language})"),
            weir()
                .args(["run", "--fresh", "pipeline.toml"])
                .current_dir(&dir),
        );
        let results = std::fs::read_to_string(dir.join("build/out/results.jsonl"))
            .expect("the project's results");
        assert!(
            results.lines().count() > 100,
            "{language}: results:\n{results}"
        );
        let deployed = succeed(
            &format!("weir deploy ({language})"),
            weir()
                .args(["deploy", "--server", &server.url(""), &name, "0.1.0"])
                .env("WEIR_ADMIN_TOKEN", ADMIN)
                .current_dir(&dir),
        );
        assert!(deployed.contains("sha256:"), "{language}: {deployed}");
        // `weir build` embedded the project's examples, and the server ran them at upload.
        assert!(
            deployed
                .contains("\"verified\":{\"examples\":[{\"example\":\"examples/two-users.jsonl\""),
            "{language}: {deployed}"
        );
    }
    let (status, listed) = server.get("/v1/operators", Some(ADMIN));
    assert_eq!(status, 200);
    for language in ["python", "js", "rust"] {
        assert!(listed.contains(&format!("my-{language}-op")), "{listed}");
    }
}

#[test]
fn weir_new_build_and_deploy_refuse_bad_input_with_clear_errors() {
    let projects = tempfile::tempdir().expect("a temporary directory");
    let fails = |command: &mut Command| -> String {
        let output = command.output().expect("running weir");
        assert!(!output.status.success(), "{command:?} should fail");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // Names that would leave the directory, or break the name rule.
    for bad in ["../escape", "a/b", ".hidden", ""] {
        let error = fails(
            weir()
                .args(["new", bad, "--lang", "python", "--dir"])
                .arg(projects.path()),
        );
        assert!(error.contains("name"), "{bad:?}: {error}");
    }
    assert_eq!(
        std::fs::read_dir(projects.path()).expect("dir").count(),
        0,
        "nothing written"
    );

    // An existing project is not overwritten.
    succeed(
        "weir new",
        weir()
            .args(["new", "op", "--lang", "python", "--dir"])
            .arg(projects.path()),
    );
    let error = fails(
        weir()
            .args(["new", "op", "--lang", "js", "--dir"])
            .arg(projects.path()),
    );
    assert!(error.contains("already exists"), "{error}");

    // A missing toolchain is named, with how to install it.
    let dir = projects.path().join("op");
    let empty = tempfile::tempdir().expect("a temporary directory");
    let error = fails(
        weir()
            .arg("build")
            .current_dir(&dir)
            .env("WEIR_TOOLCHAINS", empty.path())
            .env("PATH", empty.path()),
    );
    assert!(
        error.contains("componentize-py not found")
            && error.contains("pip install componentize-py=="),
        "{error}"
    );

    // An example that does not hold fails the build and says which result differs; one whose
    // expected file is missing says so.
    let expected = dir.join("examples/two-users.expected.jsonl");
    let right = std::fs::read_to_string(&expected).expect("the example's results");
    std::fs::write(&expected, right.replace("\"sum\": 7", "\"sum\": 8")).expect("a wrong result");
    let build = || {
        let mut build = weir();
        build
            .arg("build")
            .current_dir(&dir)
            .env("WEIR_TOOLCHAINS", toolchains());
        build
    };
    let error = fails(&mut build());
    assert!(
        error.contains("example examples/two-users.jsonl does not hold")
            && error.contains("\"sum\":8")
            && error.contains("\"sum\":7"),
        "{error}"
    );
    std::fs::remove_file(&expected).expect("removed");
    let error = fails(&mut build());
    assert!(error.contains("is not there"), "{error}");
    std::fs::write(&expected, right).expect("the right results");
    let built = succeed("weir build with its example", &mut build());
    assert!(
        built.contains("example examples/two-users.jsonl: 3 results as expected"),
        "{built}"
    );

    // Not a project; a bad project file.
    let error = fails(weir().arg("build").current_dir(empty.path()));
    assert!(error.contains("weir new"), "{error}");
    std::fs::write(
        dir.join("weir.toml"),
        "name = \"../x\"\nlanguage = \"python\"\nkind = \"aggregate\"\n",
    )
    .expect("project file");
    let error = fails(weir().arg("build").current_dir(&dir));
    assert!(error.contains("bad project file"), "{error}");

    // Deploy: a bad version name, a server that is not http, an unbuilt project.
    let error = fails(weir().args([
        "deploy",
        "--server",
        "http://127.0.0.1:9",
        "--token",
        "x",
        "op",
        "../1",
        "--module",
        "/dev/null",
    ]));
    assert!(error.contains("version"), "{error}");
    let error = fails(weir().args([
        "deploy",
        "--server",
        "ftp://x",
        "--token",
        "x",
        "op",
        "1",
        "--module",
        "/nonexistent",
    ]));
    assert!(error.contains("http://"), "{error}");

    // A JavaScript aggregate's own `windows` export would be shadowed by the SDK's: refused.
    succeed(
        "weir new",
        weir()
            .args(["new", "shadow", "--lang", "js", "--dir"])
            .arg(projects.path()),
    );
    let shadow = projects.path().join("shadow");
    let app = shadow.join("app.js");
    let source = std::fs::read_to_string(&app).expect("the new project's app.js");
    std::fs::write(&app, source + "\nexport const windows = {};\n").expect("app.js");
    let error = fails(
        weir()
            .arg("build")
            .current_dir(&shadow)
            .env("WEIR_TOOLCHAINS", toolchains()),
    );
    assert!(error.contains("the module exports `windows`"), "{error}");
}
