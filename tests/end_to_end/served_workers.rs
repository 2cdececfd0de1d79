//! Served pipelines placed on the cluster's workers (issue 40): `weir serve --nats URL` shares a
//! pipeline whose spec says `"workers"` with the `weir worker` processes of that NATS server
//! instead of running it, and is its control plane: start, status (slices, owners, routing), a
//! rollout and its promotion, stop and start again, delete. Against a real `nats-server -js`
//! and two real workers; results are read from the results stream, each window once.
//! Hostile: what workers cannot share is refused at create, and what needs the local run
//! (replay, savepoints) is refused with the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::nats::{BASE, Client, NatsServer, windows};
use crate::server::{ADMIN, PATIENCE, Server, count_sum_v1};

const NAME: &str = "on-workers";

/// A spec of `slices` slices on workers, reading CLICKS of the default server.
fn workers_spec(slices: usize) -> Value {
    json!({
        "name": NAME,
        "source": {"type": "nats", "stream": "CLICKS"},
        "event": {"key": "user", "timestamp": "ts"},
        "watermark": {"bound": 0},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "checkpoint_interval": "100ms",
        "sinks": {
            "results": {"nats": "default", "subject": "results.on-workers"},
            "late": "discard",
            "dead_letters": "discard"
        },
        "workers": {"slices": slices}
    })
}

/// In-order clicks of 20 users from index `from`, 7 ms apart, amounts up to 90.
fn clicks(from: usize, n: usize) -> Vec<Value> {
    (from..from + n)
        .map(|i| json!({"user": format!("u{}", i % 20), "ts": BASE + i as i64 * 7, "amount": (i * 7 % 10) * 10}))
        .collect()
}

struct Setup {
    nats: NatsServer,
    client: Client,
    dir: tempfile::TempDir,
    server: Server,
    started: crate::support::Reaper,
}

impl Setup {
    fn start() -> Setup {
        let nats = NatsServer::start();
        let client = Client::connect(&nats.url);
        client.stream("CLICKS", &["clicks.>"]);
        client.stream("RESULTS", &["results.>"]);
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start_with(&dir.path().join("serve"), &["--nats", &nats.url]);
        server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
        server.upload_ok(
            "count-sum",
            "1.1.0",
            &crate::support::guest("count-sum-capped"),
        );
        Setup {
            nats,
            client,
            dir,
            server,
            started: Default::default(),
        }
    }

    fn worker(&self, id: &str) -> Child {
        let dir = self.dir.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(self.dir.path().join(format!("{id}.log"))).unwrap();
        let worker = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["worker", "--nats", &self.nats.url, "--pipeline", NAME])
            .args(["--id", id, "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.started.track(worker)
    }

    fn logs(&self) -> String {
        ["w1", "w2"]
            .iter()
            .map(|id| {
                let path = self.dir.path().join(format!("{id}.log"));
                format!(
                    "--- {id}\n{}",
                    std::fs::read_to_string(path).unwrap_or_default()
                )
            })
            .collect()
    }

    /// The cluster's part of the pipeline's status.
    fn workers_status(&self) -> Value {
        self.server.status(NAME)["workers"].clone()
    }

    /// Waits until the slices are held by exactly `ids` (none: by nobody).
    fn wait_for_owners(&self, ids: &[&str]) {
        let want: BTreeSet<&str> = ids.iter().copied().collect();
        self.server.wait_for("the slices' owners", PATIENCE, || {
            let status = self.workers_status();
            let owners: BTreeMap<String, String> =
                serde_json::from_value(status["owners"].clone()).unwrap_or_default();
            let held: BTreeSet<&str> = owners.values().map(String::as_str).collect();
            let all = ids.is_empty() || owners.len() == 4;
            if held == want && all {
                Ok(())
            } else {
                Err(format!("{status}\n{}", self.logs()))
            }
        });
    }

    /// Waits for the results of every window of `events` the latest event closes, each once,
    /// and returns them by window.
    fn wait_for_windows(&self, events: &[Value]) -> BTreeMap<(String, i64), Value> {
        let latest = events
            .iter()
            .map(|e| e["ts"].as_i64().unwrap())
            .max()
            .unwrap();
        let want: BTreeSet<(String, i64)> = (windows(events).into_keys())
            .filter(|(_, start)| start + 1000 <= latest)
            .collect();
        self.server
            .wait_for("every closed window's result", PATIENCE, || {
                let results = self.client.read_all("RESULTS");
                let mut by_window = BTreeMap::new();
                for (_, r) in &results {
                    let window = (
                        r["key"].as_str().unwrap().to_owned(),
                        r["window_start"].as_i64().unwrap(),
                    );
                    assert!(
                        by_window.insert(window.clone(), r.clone()).is_none(),
                        "window {window:?} twice\n{}",
                        self.logs()
                    );
                }
                let got: BTreeSet<_> = by_window.keys().cloned().collect();
                if got == want {
                    Ok(by_window)
                } else {
                    Err(format!("{} of {} windows", got.len(), want.len()))
                }
            })
    }
}

#[test]
fn weir_serve_runs_a_pipeline_on_workers_through_start_rollout_promote_stop_and_delete() {
    let setup = Setup::start();
    let server = &setup.server;
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &workers_spec(4)),
        201,
    );
    // Two starts at once: one share, both answered.
    let start = format!("/v1/pipelines/{NAME}/start");
    std::thread::scope(|scope| {
        let starts = [(); 2].map(|()| scope.spawn(|| server.post(&start, Some(ADMIN), b"")));
        for started in starts {
            let (status, body) = started.join().unwrap();
            assert_eq!(status, 200, "{body}");
        }
    });
    let status = server.status(NAME);
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["workers"]["slices"], 4, "{status}");
    let _workers = [setup.worker("w1"), setup.worker("w2")];
    setup.wait_for_owners(&["w1", "w2"]);

    // The live version's results, each window once, as the model says.
    let first = clicks(0, 1_500);
    setup.client.publish("clicks.web", &first);
    let results = setup.wait_for_windows(&first);
    let model = windows(&first);
    for (window, r) in &results {
        let (count, sum) = model[window];
        assert_eq!(
            (&r["value"]["count"], &r["value"]["sum"]),
            (&json!(count), &json!(sum)),
            "{r}"
        );
    }

    // 1.1.0 (it caps sums at 100) to every key, then promoted: the workers follow.
    server.expect(
        "a rollout",
        server.post_json(
            &format!("/v1/pipelines/{NAME}/rollout"),
            Some(ADMIN),
            &json!({"version": "1.1.0", "percent": 100}),
        ),
        200,
    );
    server.wait_for("the workers to take the rollout up", PATIENCE, || {
        let logs = setup.logs();
        match logs
            .matches("routes 100% of keys to Some(\"1.1.0\")")
            .count()
        {
            2 => Ok(()),
            _ => Err(logs),
        }
    });
    // Each slice applies it at its next barrier (every 100 ms).
    std::thread::sleep(Duration::from_secs(1));
    server.expect(
        "promoting",
        server.post(&format!("/v1/pipelines/{NAME}/promote"), Some(ADMIN), b""),
        200,
    );
    server.wait_for(
        "the cluster's routing to say 1.1.0 is live",
        PATIENCE,
        || {
            let status = setup.workers_status();
            if status["routing"]["live"] == "1.1.0" && status["routing"]["candidate"].is_null() {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    );
    server.wait_for("the workers to take the promoted spec up", PATIENCE, || {
        let logs = setup.logs();
        match logs.matches("takes up the pipeline's changed spec").count() {
            2 => Ok(()),
            _ => Err(logs),
        }
    });

    // Stopped: the workers give every slice up; started again: they take them back from
    // their checkpoints, and nothing is lost or repeated.
    server.expect(
        "stopping",
        server.post(&format!("/v1/pipelines/{NAME}/stop"), Some(ADMIN), b""),
        200,
    );
    assert_eq!(server.status(NAME)["state"], "stopped");
    setup.wait_for_owners(&[]);
    assert_eq!(setup.workers_status()["stopped"], true);
    let second = clicks(1_500, 1_500);
    setup.client.publish("clicks.web", &second);
    server.expect(
        "starting again",
        server.post(&format!("/v1/pipelines/{NAME}/start"), Some(ADMIN), b""),
        200,
    );
    setup.wait_for_owners(&["w1", "w2"]);
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    let results = setup.wait_for_windows(&all);
    let model = windows(&all);
    let second_start = second[0]["ts"].as_i64().unwrap() / 1000 * 1000 + 1000;
    for ((user, start), r) in &results {
        let (count, sum) = model[&(user.clone(), *start)];
        assert_eq!(r["value"]["count"], json!(count), "{r}");
        if *start >= second_start {
            assert_eq!(r["value"]["sum"], json!(sum.min(100)), "by 1.1.0: {r}");
        }
    }

    // What needs this server's own run is refused with the reason.
    for (what, path, body) in [
        (
            "a replay",
            "replay",
            json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u3"]}),
        ),
        ("a savepoint", "savepoints", json!({"name": "mid"})),
    ] {
        let refused = server.expect_error(
            what,
            server.post_json(&format!("/v1/pipelines/{NAME}/{path}"), Some(ADMIN), &body),
            409,
        );
        assert!(
            refused.contains("runs on the cluster's workers"),
            "{refused}"
        );
    }

    // Deleted: the workers drop it and the cluster forgets it.
    server.expect(
        "deleting",
        server.delete(&format!("/v1/pipelines/{NAME}"), Some(ADMIN)),
        204,
    );
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["cluster", "status", "--nats", &setup.nats.url, NAME])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && said.contains("no pipeline"),
        "{said}"
    );
}

#[test]
fn what_workers_cannot_run_is_refused_when_the_pipeline_is_created() {
    let setup = Setup::start();
    let server = &setup.server;
    let refused = |what: &str, spec: &Value, fragment: &str| {
        let error = server.expect_error(
            what,
            server.post_json("/v1/pipelines", Some(ADMIN), spec),
            400,
        );
        assert!(error.contains(fragment), "{what}: {error}");
    };
    let mut spec = workers_spec(4);
    spec["sinks"]["dead_letters"] = json!("dead.jsonl");
    refused("a file sink", &spec, "cannot take along");
    refused("65 slices", &workers_spec(65), "from 1 to 64");
    refused("no slices", &workers_spec(0), "from 1 to 64");
    let mut spec = workers_spec(4);
    spec["source"] = json!({"type": "http"});
    refused(
        "an HTTP source",
        &spec,
        "only a pipeline that reads a NATS stream",
    );
    let mut spec = workers_spec(4);
    spec["workers"] = json!({"slices": 4, "where": "anywhere"});
    refused("an unknown field", &spec, "where");
    let mut spec = workers_spec(4);
    spec.as_object_mut().unwrap().remove("checkpoint_interval");
    spec["checkpoint_interval"] = json!("off");
    refused("no checkpoints", &spec, "checkpoint");
    // Nothing was made.
    let listed = server.expect("the listing", server.get("/v1/pipelines", Some(ADMIN)), 200);
    assert_eq!(listed, json!([]));
}
