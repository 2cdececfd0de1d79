//! Shared fixtures: the example components (built once per test run), a temporary pipeline
//! directory, and running `weir run` on it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::reference::{Emission, Ev, ModelOutput, ModelSpec, WindowKind};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// The example operators, each a component built for wasm32-wasip2:
/// `count_sum` (count and sum of `amount`), `sliding_average`, `session_summary`,
/// `distinct_count` and `enrich_customers`.
pub fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut command = Command::new(cargo);
            command.current_dir(workspace()).args(["build", "--release", "--target", "wasm32-wasip2"]);
            for example in EXAMPLES {
                command.args(["-p", &format!("weir-example-{example}")]);
            }
            let output = command.output().map_err(|e| format!("cannot run cargo: {e}"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "building the example components failed (is the wasm32-wasip2 target installed? \
                     `rustup target add wasm32-wasip2`):\n{}",
                    String::from_utf8_lossy(&output.stderr)
                ))
            }
        })
        .as_ref()
        .expect("example components build");
    let path = workspace()
        .join("target/wasm32-wasip2/release")
        .join(format!("weir_example_{}.wasm", name.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// The hostile test components of `tests/guests` (see each crate's doc line), built once.
pub fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut command = Command::new(cargo);
            command.current_dir(workspace()).args([
                "build",
                "--release",
                "--target",
                "wasm32-wasip2",
            ]);
            for guest in GUESTS {
                command.args(["-p", &format!("weir-guest-{guest}")]);
            }
            let output = command
                .output()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "building the test guests failed:\n{}",
                    String::from_utf8_lossy(&output.stderr)
                ))
            }
        })
        .as_ref()
        .expect("test guests build");
    let path = workspace()
        .join("target/wasm32-wasip2/release")
        .join(format!("weir_guest_{}.wasm", name.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

const GUESTS: [&str; 15] = [
    "trap-on-key",
    "migrate-refuses",
    "count-sum-hoarder",
    "count-sum-capped",
    "busy-per-event",
    "infinite-loop",
    "memory-bomb",
    "huge-output",
    "bad-import",
    "finish-writes",
    "enrich-bad-origin",
    "count-sum-0-1",
    "count-sum-0-2",
    "enrich-customers-0-1",
    "enrich-customers-0-2",
];

const EXAMPLES: [&str; 14] = [
    "count-sum-v2",
    "tumbling-count-sum",
    "sliding-average",
    "session-summary",
    "distinct-count",
    "enrich-customers",
    "nexmark-q0",
    "nexmark-q1",
    "nexmark-q2",
    "nexmark-q5",
    "nexmark-q7",
    "nexmark-q8",
    "top-keys",
    "nexmark-q11",
];

/// The outcome of one `weir run`.
#[derive(Debug)]
pub struct Run {
    pub success: bool,
    pub stderr: String,
    pub results: Vec<Value>,
    pub late: Vec<Value>,
    pub dead_letters: Vec<Value>,
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: bad JSON line {line:?}: {e}", path.display()))
        })
        .collect()
}

/// A pipeline directory with an input file and a spec whose sinks are files in it.
pub struct Pipeline {
    pub dir: tempfile::TempDir,
}

impl Pipeline {
    /// Writes `events.jsonl` and `pipeline.toml`, whose sections `body` gives (everything but
    /// the name, source, state and sinks).
    pub fn new(body: &str, events: &str) -> Pipeline {
        Self::with_state(body, events, "")
    }

    /// Like [`new`](Self::new), with extra lines for the spec's `[state]` section.
    pub fn with_state(body: &str, events: &str, state: &str) -> Pipeline {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("events.jsonl"), events).expect("writing events");
        let spec = format!(
            "name = \"test\"\n\
             [source]\ntype = \"file\"\npath = \"events.jsonl\"\n\
             [state]\ndir = \"data\"\n{state}\n\
             [sinks]\nresults = \"out/results.jsonl\"\nlate = \"out/late.jsonl\"\ndead_letters = \"out/dead.jsonl\"\n\
             {body}\n"
        );
        std::fs::write(dir.path().join("pipeline.toml"), spec).expect("writing the spec");
        Pipeline { dir }
    }

    /// Runs `weir run --fresh pipeline.toml` with extra arguments: from the beginning, whatever
    /// an earlier run left in the data directory.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all = vec!["--fresh"];
        all.extend_from_slice(args);
        self.resume(&all)
    }

    /// Runs `weir run pipeline.toml` with extra arguments, resuming from the data directory's
    /// last checkpoint if there is one.
    pub fn resume(&self, args: &[&str]) -> Run {
        self.exec(args, None)
    }

    /// [`run`](Self::run) with the host's log at `info` in the run's `stderr`.
    pub fn run_logged(&self, args: &[&str]) -> Run {
        let mut all = vec!["--fresh"];
        all.extend_from_slice(args);
        self.exec(&all, Some("info"))
    }

    /// Runs `weir run` with `args`, its log at `log` if given (else as the environment says).
    fn exec(&self, args: &[&str], log: Option<&str>) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        command
            .arg("run")
            .arg(self.dir.path().join("pipeline.toml"))
            .args(args);
        if let Some(log) = log {
            command.env("RUST_LOG", log);
        }
        let output = command.output().expect("running weir");
        let out = self.dir.path().join("out");
        Run {
            success: output.status.success(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            results: read_lines(&out.join("results.jsonl")),
            late: read_lines(&out.join("late.jsonl")),
            dead_letters: read_lines(&out.join("dead.jsonl")),
        }
    }
}

/// Spec sections for a count-sum aggregate over `key`/`ts` with these windows.
pub fn count_sum_body(spec: &ModelSpec) -> String {
    let window = match spec.window {
        WindowKind::Tumbling { size } => format!("type = \"tumbling\"\nsize = {size}"),
        WindowKind::Sliding { size, slide } => {
            format!("type = \"sliding\"\nsize = {size}\nslide = {slide}")
        }
        WindowKind::Session { gap } => format!("type = \"session\"\ngap = {gap}"),
    };
    format!(
        "[event]\nkey = \"key\"\ntimestamp = \"ts\"\n\
         [watermark]\nbound = {}\n\
         [window]\n{window}\nallowed_lateness = {}\n\
         [[operators]]\nname = \"count-sum\"\nversion = \"1.0.0\"\nkind = \"aggregate\"\nmodule = {:?}\n",
        spec.bound,
        spec.lateness,
        component("tumbling-count-sum").display().to_string(),
    )
}

/// Events as JSON Lines.
pub fn to_jsonl(events: &[Ev]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{{\"key\":{:?},\"ts\":{},\"amount\":{}}}\n",
                e.key, e.ts, e.amount
            )
        })
        .collect()
}

/// Result records as the model's emissions.
pub fn emissions(results: &[Value]) -> Vec<Emission> {
    results
        .iter()
        .map(|r| Emission {
            key: r["key"].as_str().expect("key").to_owned(),
            start: r["window_start"].as_i64().expect("window_start"),
            end: r["window_end"].as_i64().expect("window_end"),
            kind: r["kind"].as_str().expect("kind").to_owned(),
            version: r["version"].as_u64().expect("version"),
            count: r["value"]["count"].as_i64().expect("count"),
            sum: r["value"]["sum"].as_i64().expect("sum"),
        })
        .collect()
}

/// Asserts that a run's results and late events are exactly the model's, in order.
pub fn assert_matches_model(run: &Run, expected: &ModelOutput) {
    assert!(run.success, "weir failed:\n{}", run.stderr);
    assert_eq!(
        emissions(&run.results),
        expected.emissions,
        "results differ from the reference model"
    );
    let late_lines: Vec<usize> = run
        .late
        .iter()
        .map(|l| l["line"].as_u64().expect("line") as usize - 1)
        .collect();
    assert_eq!(
        late_lines, expected.late,
        "late events differ from the reference model"
    );
    assert!(
        run.dead_letters.is_empty(),
        "unexpected dead letters: {:?}",
        run.dead_letters
    );
}

/// The wall clock, in ms since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as i64
}

/// The processes a test started (workers, say), killed when the test ends however it ends: a
/// failed assertion unwinds past the test's own kills, and would leave them running.
#[derive(Default)]
pub struct Reaper(std::sync::Mutex<Vec<u32>>);

impl Reaper {
    /// Remembers `child`, and hands it back.
    pub fn track(&self, child: std::process::Child) -> std::process::Child {
        self.0.lock().unwrap().push(child.id());
        child
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.0.lock().unwrap().drain(..) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null()) // most have ended already
                .status();
        }
    }
}
