//! Served pipelines placed on the cluster's workers (issue 40): `weir serve --nats URL` shares a
//! pipeline whose spec says `"workers"` with the `weir worker` processes of that NATS server
//! instead of running it, and is its control plane: start (two at once), status (slices,
//! owners, routing, the workers' counters), a shadow rollout to half the keys, a replay of a
//! key, a rollout to all and its promotion, stop and start again, delete. Against a real
//! `nats-server -js` and three real workers; results are read from the results stream, each
//! window once. Savepoints copy every slice's checkpoint from the cluster and fork a pipeline on
//! workers that goes on from them, and a replay from one runs each slice from its own state and
//! position. Hostile: what workers cannot share is refused at create, a fork of another
//! placement, cut or slice count is refused, and a savepoint racing a delete gives up.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::spawn_worker;
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

/// `weir serve` in `dir/serve` with the cluster of the NATS server at `url`, the count-sum
/// uploaded as 1.0.0 and its capped version as 1.1.0.
fn serving(dir: &std::path::Path, url: &str) -> Server {
    let server = Server::start_with(&dir.join("serve"), &["--nats", url]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok(
        "count-sum",
        "1.1.0",
        &crate::support::guest("count-sum-capped"),
    );
    server
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
        let server = serving(dir.path(), &nats.url);
        Setup {
            nats,
            client,
            dir,
            server,
            started: Default::default(),
        }
    }

    fn worker(&self, id: &str) -> Child {
        self.worker_of(NAME, id)
    }

    /// A worker of pipeline `pipeline`, logging to `<id>.log`.
    fn worker_of(&self, pipeline: &str, id: &str) -> Child {
        let log = std::fs::File::create(self.dir.path().join(format!("{id}.log"))).unwrap();
        let dir = self.dir.path().join(id);
        let worker = spawn_worker(&self.nats.url, pipeline, id, &dir, log.into(), &[]);
        self.started.track(worker)
    }

    /// Waits until every worker's log says `line`.
    fn wait_for_log(&self, line: &str) {
        self.server.wait_for(line, PATIENCE, || {
            let logs = self.logs();
            match logs.matches(line).count() {
                3 => Ok(()),
                _ => Err(logs),
            }
        });
    }

    fn logs(&self) -> String {
        ["w1", "w2", "w3"]
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
            let all = ids.is_empty() || owners.len() == 6;
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
fn weir_serve_runs_a_pipeline_on_workers_through_shadow_replay_promote_stop_and_delete() {
    let setup = Setup::start();
    let server = &setup.server;
    let path = |action: &str| format!("/v1/pipelines/{NAME}/{action}");
    let spec = workers_spec(6);
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec),
        201,
    );
    // Two starts at once: one share, both answered.
    std::thread::scope(|scope| {
        let starts =
            [(); 2].map(|()| scope.spawn(|| server.post(&path("start"), Some(ADMIN), b"")));
        for started in starts {
            let (status, body) = started.join().unwrap();
            assert_eq!(status, 200, "{body}");
        }
    });
    let status = server.status(NAME);
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["workers"]["slices"], 6, "{status}");
    let _workers = ["w1", "w2", "w3"].map(|id| setup.worker(id));
    setup.wait_for_owners(&["w1", "w2", "w3"]);

    // The live version's results, each window once, as the model says.
    let first = clicks(0, 1_500);
    setup.client.publish("clicks.web", &first);
    let results = setup.wait_for_windows(&first);
    let model = windows(&first);
    for (window, r) in &results {
        let (count, sum) = model[window];
        let got = (&r["value"]["count"], &r["value"]["sum"]);
        assert_eq!(got, (&json!(count), &json!(sum)), "{r}");
    }

    // 1.1.0 (it caps sums at 100) in shadow on half the keys: compared by the workers and
    // counted in the status as a run here counts it; then a replay of one key through both.
    let shadow = json!({"version": "1.1.0", "percent": 50, "shadow": true});
    server.expect(
        "a shadow rollout",
        server.post_json(&path("rollout"), Some(ADMIN), &shadow),
        200,
    );
    setup.wait_for_log("routes 50% of keys to Some(\"1.1.0\") (shadow)");
    std::thread::sleep(Duration::from_secs(1)); // applied at each slice's next barrier
    let second = clicks(1_500, 1_500);
    setup.client.publish("clicks.web", &second);
    let first_two: Vec<Value> = first.iter().chain(&second).cloned().collect();
    setup.wait_for_windows(&first_two);
    let compared = server.wait_for("the workers' shadow comparisons", PATIENCE, || {
        let status = server.status(NAME);
        let candidate = crate::server::version_entry(&status, "1.1.0");
        match candidate["shadow_differed"].as_u64() {
            Some(n) if n > 0 => Ok(status),
            _ => Err(status.to_string()),
        }
    });
    assert_eq!(compared["rollout"]["applied_percent"], 50, "{compared}");
    let replay = json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u3"]});
    let answer = server.expect(
        "a replay",
        server.post_json(&path("replay"), Some(ADMIN), &replay),
        200,
    );
    let model = windows(&first_two);
    let rows = answer["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{answer}");
    for row in rows {
        let (count, sum) = model[&("u3".to_owned(), row["window_start"].as_i64().unwrap())];
        assert_eq!(
            (&row["a"]["count"], &row["a"]["sum"]),
            (&json!(count), &json!(sum)),
            "{row}"
        );
        assert_eq!(row["b"]["sum"], json!(sum.min(100)), "{row}");
    }

    // A repro bundle of a result whose sum 1.1.0 caps: the key's events in its window, read
    // from the stream, through both versions.
    let (window, row) = (results.iter())
        .find(|(_, r)| r["value"]["sum"].as_i64().unwrap() > 100)
        .expect("a sum over 100");
    let bundle = server.expect(
        "a repro of a result",
        server.post_json(
            &path("repro"),
            Some(ADMIN),
            &json!({"row": row, "versions": ["1.0.0", "1.1.0"]}),
        ),
        200,
    );
    let (count, sum) = windows(&first)[window];
    assert_eq!(
        bundle["events"].as_array().unwrap().len() as i64,
        count,
        "{bundle}"
    );
    assert_eq!(bundle["expected"]["output"]["sum"], json!(sum), "{bundle}");
    assert_eq!(bundle["candidate"]["output"]["sum"], json!(100), "{bundle}");

    // Then to every key, and promoted: the workers follow.
    let everyone = json!({"version": "1.1.0", "percent": 100});
    server.expect(
        "a rollout to all",
        server.post_json(&path("rollout"), Some(ADMIN), &everyone),
        200,
    );
    setup.wait_for_log("routes 100% of keys to Some(\"1.1.0\")");
    std::thread::sleep(Duration::from_secs(1));
    server.expect(
        "promoting",
        server.post(&path("promote"), Some(ADMIN), b""),
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
    setup.wait_for_log("takes up the pipeline's changed spec");

    // Stopped: the workers give every slice up; started again: they take them back from
    // their checkpoints, and nothing is lost or repeated.
    server.expect(
        "stopping",
        server.post(&path("stop"), Some(ADMIN), b""),
        200,
    );
    assert_eq!(server.status(NAME)["state"], "stopped");
    setup.wait_for_owners(&[]);
    assert_eq!(setup.workers_status()["stopped"], true);
    let third = clicks(3_000, 1_500);
    setup.client.publish("clicks.web", &third);
    server.expect(
        "starting again",
        server.post(&path("start"), Some(ADMIN), b""),
        200,
    );
    setup.wait_for_owners(&["w1", "w2", "w3"]);
    let all: Vec<Value> = first_two.iter().chain(&third).cloned().collect();
    let results = setup.wait_for_windows(&all);
    let model = windows(&all);
    let third_start = third[0]["ts"].as_i64().unwrap() / 1000 * 1000 + 1000;
    for ((user, start), r) in &results {
        let (count, sum) = model[&(user.clone(), *start)];
        assert_eq!(r["value"]["count"], json!(count), "{r}");
        if *start >= third_start {
            assert_eq!(r["value"]["sum"], json!(sum.min(100)), "by 1.1.0: {r}");
        }
    }

    // A replay from a savepoint that is not there.
    let body = json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u3"], "savepoint": "mid"});
    let answer = server.post_json(&path("replay"), Some(ADMIN), &body);
    let refused = server.expect_error("a replay from an unknown savepoint", answer, 404);
    assert!(refused.contains("no savepoint"), "{refused}");

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
        "only a pipeline that reads a NATS stream or a Kafka topic",
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

/// The whole control plane over TLS with a certificate authority of its own and a user and
/// password: the server's and the workers' connections present the process's credentials and
/// trust its authority, for the cluster's buckets as for the stream.
#[test]
fn a_pipeline_on_workers_runs_over_tls_with_credentials() {
    let keys = tempfile::tempdir().unwrap();
    let (ca, cert, key) = crate::served_nats::certificates(keys.path());
    let tls = NatsServer::start_with(&[
        "--tls",
        "--tlscert",
        &cert,
        "--tlskey",
        &key,
        "--user",
        "weir",
        "--pass",
        "secret-pass",
    ]);
    let url = tls.url.replace("nats://", "tls://");
    let options =
        async_nats::ConnectOptions::with_user_and_password("weir".into(), "secret-pass".into())
            .add_root_certificates(ca.clone().into());
    let client = Client::connect_with(&url, options);
    client.stream("CLICKS", &["clicks.>"]);
    client.stream("RESULTS", &["results.>"]);
    let auth = [
        "--nats-ca",
        ca.as_str(),
        "--nats-user",
        "weir",
        "--nats-password",
        "secret-pass",
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--nats", url.as_str()];
    args.extend_from_slice(&auth);
    let server = Server::start_with(&dir.path().join("serve"), &args);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    crate::server::create_and_start_spec(&server, &workers_spec(2));
    let reaper = crate::support::Reaper::default();
    let worker = spawn_worker(
        &url,
        NAME,
        "w1",
        &dir.path().join("w1"),
        Stdio::null(),
        &auth,
    );
    let _workers = [reaper.track(worker)];
    let events = clicks(0, 600);
    client.publish("clicks.web", &events);
    let latest = events
        .iter()
        .map(|e| e["ts"].as_i64().unwrap())
        .max()
        .unwrap();
    let want: BTreeSet<(String, i64)> = (windows(&events).into_keys())
        .filter(|(_, start)| start + 1000 <= latest)
        .collect();
    server.wait_for("the results over TLS", PATIENCE, || {
        let got: BTreeSet<(String, i64)> = (client.read_all("RESULTS").into_iter())
            .map(|(_, r)| {
                (
                    r["key"].as_str().unwrap().to_owned(),
                    r["window_start"].as_i64().unwrap(),
                )
            })
            .collect();
        if got == want {
            Ok(())
        } else {
            Err(format!("{} of {}", got.len(), want.len()))
        }
    });
    assert_eq!(
        server.status(NAME)["workers"]["owners"]
            .as_object()
            .map(|o| o.len()),
        Some(2)
    );
}

/// A gated rollout of a pipeline on workers: the gates are judged on the counters the workers
/// report (summed over their slices), the shadow gate on the live version run beside the
/// candidate in each worker's slices; a candidate whose results differ is stopped and rolled
/// back everywhere.
#[test]
fn a_gated_rollout_on_workers_is_stopped_by_its_shadow_gate() {
    let setup = Setup::start();
    let server = &setup.server;
    let path = |action: &str| format!("/v1/pipelines/{NAME}/{action}");
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &workers_spec(6)),
        201,
    );
    server.expect(
        "starting",
        server.post(&path("start"), Some(ADMIN), b""),
        200,
    );
    let _workers = ["w1", "w2", "w3"].map(|id| setup.worker(id));
    setup.wait_for_owners(&["w1", "w2", "w3"]);
    let gated = json!({"version": "1.1.0", "steps": [50, 100], "hold": "2s", "promote": true,
        "gates": {"max_shadow_diff_rate": 0.01, "min_comparisons": 20}});
    server.expect(
        "a gated rollout",
        server.post_json(&path("rollout"), Some(ADMIN), &gated),
        200,
    );
    setup.wait_for_log("routes 50% of keys to Some(\"1.1.0\")");
    std::thread::sleep(Duration::from_secs(1));
    // Clicks whose windows often sum past 100, where the capped 1.1.0 differs.
    let mut from = 0;
    let status = server.wait_for("the gate to stop the rollout", PATIENCE, || {
        setup.client.publish("clicks.web", &clicks(from, 300));
        from += 300;
        let status = server.status(NAME);
        match status["rollout"]["rolled_back"].as_str() {
            Some(_) => Ok(status),
            None => Err(status["rollout"].to_string()),
        }
    });
    let reason = status["rollout"]["rolled_back"].as_str().unwrap();
    assert!(reason.contains("gate shadow_diff_rate"), "{reason}");
    assert_eq!(status["operator"]["version"], "1.0.0", "not promoted");
    server.wait_for("the workers to route every key back", PATIENCE, || {
        let routing = &setup.workers_status()["routing"];
        if routing["candidate"].is_null() {
            Ok(())
        } else {
            Err(routing.to_string())
        }
    });
}

/// The results `subject` has in RESULTS, by window, each window once.
fn results_of(client: &Client, subject: &str) -> BTreeMap<(String, i64), Value> {
    results_in(client, "RESULTS", subject)
}

/// The results `subject` has in `stream`, by window, each window once.
fn results_in(client: &Client, stream: &str, subject: &str) -> BTreeMap<(String, i64), Value> {
    let mut by_window = BTreeMap::new();
    for (s, r) in client.read_all_subjects(stream) {
        if s != subject {
            continue;
        }
        let window = (
            r["key"].as_str().unwrap().to_owned(),
            r["window_start"].as_i64().unwrap(),
        );
        assert!(
            by_window.insert(window.clone(), r).is_none(),
            "{window:?} twice"
        );
    }
    by_window
}

/// A savepoint of a running pipeline on workers holds every slice's checkpoint; a pipeline
/// forked from it runs on workers from those checkpoints: it emits no window the savepoint had
/// closed, and the windows open across the savepoint count the events from both sides of it.
/// A migration dry run reads every slice's state. Hostile: a bad name, a name taken (two takes
/// at once: one wins), a fork of another placement or slice count; racing: a savepoint waiting
/// for slices nobody runs gives up when the pipeline is deleted, which leaves nothing behind.
#[test]
fn a_savepoint_of_a_pipeline_on_workers_forks_a_pipeline_on_workers_that_goes_on_from_it() {
    let setup = Setup::start();
    let server = &setup.server;
    let path = |pipeline: &str, action: &str| format!("/v1/pipelines/{pipeline}/{action}");
    crate::server::create_and_start_spec(server, &workers_spec(6));
    let _workers = ["w1", "w2"].map(|id| setup.worker(id));
    setup.wait_for_owners(&["w1", "w2"]);
    let first = clicks(0, 1_500);
    setup.client.publish("clicks.web", &first);
    setup.wait_for_windows(&first);

    // Two takes of one name at once: one savepoint, the other told the name is taken or that
    // a savepoint is being taken.
    let take = |name: &str| {
        server.post_json(
            &path(NAME, "savepoints"),
            Some(ADMIN),
            &json!({"name": name}),
        )
    };
    let answers = std::thread::scope(|scope| {
        let takes = [(); 2].map(|()| scope.spawn(|| take("mid")));
        takes.map(|t| t.join().unwrap())
    });
    let mut statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    statuses.sort();
    assert!(
        statuses == [201, 409] || statuses == [201, 429],
        "{answers:?}"
    );
    let saved: Value = answers
        .iter()
        .find(|(status, _)| *status == 201)
        .map(|(_, body)| serde_json::from_str(body).unwrap())
        .unwrap();
    let slices = saved["slices"].as_array().expect("a savepoint per slice");
    assert_eq!(slices.len(), 6, "{saved}");
    // Every slice read past the first batch's last event before it was saved.
    let saved_watermark = saved["watermark"].as_i64().expect("a watermark");
    assert!(
        saved_watermark >= first[1_400]["ts"].as_i64().unwrap(),
        "{saved}"
    );
    server.expect_error("a bad name", take("../x"), 400);
    let listed = server.expect(
        "the listing",
        server.get(&path(NAME, "savepoints"), Some(ADMIN)),
        200,
    );
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["name"], "mid");
    assert_eq!(listed[0]["slices"].as_array().unwrap().len(), 6, "{listed}");

    // A migration dry run of version 2 reads the open windows' state of every slice.
    let v2 = std::fs::read(crate::server::count_sum_v2()).unwrap();
    let verified = server.expect(
        "a verified upload",
        server.post_as(
            &format!("/v1/operators/count-sum/2.0.0?verify={NAME}:mid"),
            Some(ADMIN),
            Some("application/wasm"),
            &v2,
            true,
        ),
        201,
    );
    assert_eq!(
        verified["verified"]["migrated"], 20,
        "the 20 users' open windows: {verified}"
    );

    // Forks that do not fit the savepoint are refused.
    let fork_spec = |slices: Option<usize>| {
        let mut spec = workers_spec(slices.unwrap_or(6));
        spec["name"] = json!("forked");
        spec["sinks"]["results"]["subject"] = json!("results.forked");
        if slices.is_none() {
            spec.as_object_mut().unwrap().remove("workers");
        }
        spec
    };
    let fork =
        |spec: &Value| server.post_json(&path(NAME, "savepoints/mid/fork"), Some(ADMIN), spec);
    let refused = server.expect_error("a fork into 3 slices", fork(&fork_spec(Some(3))), 400);
    assert!(refused.contains("cut into 6 slices"), "{refused}");
    let refused = server.expect_error("a fork run here", fork(&fork_spec(None)), 400);
    assert!(refused.contains("runs on workers too"), "{refused}");
    let mut by_partition = fork_spec(Some(6));
    by_partition["source"]["partitions"] = json!({"count": 6, "subject": "part.{partition}.*"});
    let refused = server.expect_error("a fork cut by partition", fork(&by_partition), 400);
    assert!(
        refused.contains("same subjects and partitions"),
        "{refused}"
    );
    server.expect_error(
        "an unknown savepoint",
        server.post_json(
            &path(NAME, "savepoints/gone/fork"),
            Some(ADMIN),
            &fork_spec(Some(6)),
        ),
        404,
    );

    // The fork goes on from the savepoint: started, run by workers of its own, fed more.
    server.expect("forking", fork(&fork_spec(Some(6))), 201);
    server.expect(
        "starting the fork",
        server.post(&path("forked", "start"), Some(ADMIN), b""),
        200,
    );
    let _forked_worker = ["f1"].map(|id| setup.worker_of("forked", id));
    let second = clicks(1_500, 1_500);
    setup.client.publish("clicks.web", &second);
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    let model = windows(&all);
    let latest = all.iter().map(|e| e["ts"].as_i64().unwrap()).max().unwrap();
    let forked_log =
        || std::fs::read_to_string(setup.dir.path().join("f1.log")).unwrap_or_default();
    let want: BTreeSet<(String, i64)> = (model.keys())
        .filter(|(_, start)| start + 1000 <= latest && start + 1000 > saved_watermark)
        .cloned()
        .collect();
    let forked = server.wait_for("the fork's results", PATIENCE, || {
        let got = results_of(&setup.client, "results.forked");
        let windows: BTreeSet<_> = got.keys().cloned().collect();
        match want.is_subset(&windows) {
            true => Ok(got),
            false => Err(format!(
                "{} of {} windows\n{}",
                windows.len(),
                want.len(),
                forked_log()
            )),
        }
    });
    assert_goes_on_from(&forked, &model, saved_watermark);
    let spanning = first[1_499]["ts"].as_i64().unwrap() / 1000 * 1000;
    assert!(
        forked.keys().any(|(_, start)| *start == spanning),
        "the window open across the savepoint: {forked:?}"
    );

    // A replay of one key from the savepoint runs its slice from the slice's state and
    // position: the window open across the savepoint counts both sides, none closed before it
    // shows.
    let replay = json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u3"], "savepoint": "mid"});
    let answer = server.expect(
        "a replay from the savepoint",
        server.post_json(&path(NAME, "replay"), Some(ADMIN), &replay),
        200,
    );
    let rows = answer["rows"].as_array().unwrap();
    assert_replayed_from(rows, "u3", &model, saved_watermark);
    assert!(
        rows.iter().any(|row| row["window_start"] == spanning),
        "the window open across the savepoint: {answer}"
    );

    // Deleted, the savepoint is gone from the listing; deleting it again is 404.
    server.expect(
        "deleting the savepoint",
        server.delete(&path(NAME, "savepoints/mid"), Some(ADMIN)),
        204,
    );
    server.expect_error(
        "deleting it again",
        server.delete(&path(NAME, "savepoints/mid"), Some(ADMIN)),
        404,
    );
    let listed = server.expect(
        "the listing",
        server.get(&path(NAME, "savepoints"), Some(ADMIN)),
        200,
    );
    assert_eq!(listed, json!([]));

    // Of a stopped pipeline: every slice's last checkpoint, at once.
    server.expect(
        "stopping",
        server.post(&path(NAME, "stop"), Some(ADMIN), b""),
        200,
    );
    // At once: it waits for every worker to give its slice up after its final upload.
    let stopped = server.expect("a savepoint of the stopped pipeline", take("stopped"), 201);
    setup.wait_for_owners(&[]);
    for (slice, before) in stopped["slices"].as_array().unwrap().iter().zip(slices) {
        assert!(
            slice["checkpoint"].as_u64() >= before["checkpoint"].as_u64(),
            "{slice} {before}"
        );
    }

    // A savepoint of a pipeline whose slices nobody runs waits; a delete makes it give up at
    // once and leaves nothing of the pipeline behind.
    let mut idle = workers_spec(2);
    idle["name"] = json!("idle");
    idle["sinks"]["results"]["subject"] = json!("results.idle");
    crate::server::create_and_start_spec(server, &idle);
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            server.post_json(
                &path("idle", "savepoints"),
                Some(ADMIN),
                &json!({"name": "never"}),
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        let started = std::time::Instant::now();
        server.expect(
            "deleting idle",
            server.delete("/v1/pipelines/idle", Some(ADMIN)),
            204,
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        let (status, body) = waiting.join().unwrap();
        assert!(status == 409 || status == 404, "{status} {body}");
    });
    let pipelines = setup.dir.path().join("serve/pipelines");
    let left: Vec<_> = std::fs::read_dir(&pipelines)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("idle"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The same on a stream cut into partitions: a savepoint holds each partition's slice at its
/// own sequence; a fork from it goes on where each left off; a replay from it runs one key's
/// partition alone.
#[test]
fn a_savepoint_of_a_partitioned_pipeline_on_workers_forks_and_replays_by_partition() {
    const PARTITIONS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let nats = crate::partitioned::mapped_server(dir.path(), PARTITIONS);
    let client = Client::connect(&nats.url);
    client.stream("CLICKS", &["part.>"]);
    client.stream("RESULTS", &["results.>"]);
    let server = serving(dir.path(), &nats.url);
    let spec = |name: &str| {
        let mut spec = workers_spec(PARTITIONS);
        spec["name"] = json!(name);
        spec["source"]["partitions"] =
            json!({"count": PARTITIONS, "subject": "part.{partition}.*"});
        spec["sinks"]["results"]["subject"] = json!(format!("results.{name}"));
        spec
    };
    let path = |pipeline: &str, action: &str| format!("/v1/pipelines/{pipeline}/{action}");
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(ADMIN), &spec("parted")),
        201,
    );
    server.expect(
        "starting",
        server.post(&path("parted", "start"), Some(ADMIN), b""),
        200,
    );
    let started = crate::support::Reaper::default();
    let worker = |pipeline: &str, id: &str| {
        let log = std::fs::File::create(dir.path().join(format!("{id}.log"))).unwrap();
        started.track(spawn_worker(
            &nats.url,
            pipeline,
            id,
            &dir.path().join(id),
            log.into(),
            &[],
        ))
    };
    let _workers = ["p1", "p2"].map(|id| worker("parted", id));
    let publish = |events: &[Value]| {
        client.runtime.block_on(async {
            let mut acks = Vec::new();
            for e in events {
                let subject = format!("clicks.{}", e["user"].as_str().unwrap());
                acks.push(
                    client
                        .jetstream
                        .publish(subject, e.to_string().into())
                        .await
                        .unwrap(),
                );
            }
            for ack in acks {
                ack.await.unwrap();
            }
        })
    };
    let first = clicks(0, 1_000);
    publish(&first);
    let first_closed = (windows(&first).into_keys())
        .filter(|(_, start)| start + 1000 <= first[999]["ts"].as_i64().unwrap())
        .count();
    server.wait_for("the first batch's results", PATIENCE, || {
        let got = results_of(&client, "results.parted").len();
        // Each partition's watermark is the lowest of all: the last window of each is open.
        if got + 20 >= first_closed {
            Ok(())
        } else {
            Err(format!("{got} of {first_closed}"))
        }
    });
    let saved = server.expect(
        "a savepoint",
        server.post_json(
            &path("parted", "savepoints"),
            Some(ADMIN),
            &json!({"name": "cut"}),
        ),
        201,
    );
    let slices = saved["slices"].as_array().unwrap();
    assert_eq!(slices.len(), PARTITIONS, "{saved}");
    let saved_watermark = saved["watermark"].as_i64().unwrap();

    server.expect(
        "forking",
        server.post_json(
            &path("parted", "savepoints/cut/fork"),
            Some(ADMIN),
            &spec("parted-fork"),
        ),
        201,
    );
    server.expect(
        "starting the fork",
        server.post(&path("parted-fork", "start"), Some(ADMIN), b""),
        200,
    );
    let _fork_worker = ["f1"].map(|id| worker("parted-fork", id));
    let second = clicks(1_000, 1_000);
    publish(&second);
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    let model = windows(&all);
    let latest = second[999]["ts"].as_i64().unwrap();
    let spanning = first[999]["ts"].as_i64().unwrap() / 1000 * 1000;
    let forked = server.wait_for("the fork's results", PATIENCE, || {
        let got = results_of(&client, "results.parted-fork");
        let done = (model.keys())
            .filter(|(_, start)| *start == spanning)
            .all(|window| got.contains_key(window));
        if done && !got.is_empty() {
            Ok(got)
        } else {
            Err(format!("{} results", got.len()))
        }
    });
    assert_goes_on_from(&forked, &model, saved_watermark);
    assert!(forked.keys().all(|(_, start)| start + 1000 <= latest));

    let replay = json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u7"], "savepoint": "cut"});
    let answer = server.expect(
        "a replay from the savepoint",
        server.post_json(&path("parted", "replay"), Some(ADMIN), &replay),
        200,
    );
    let rows = answer["rows"].as_array().unwrap();
    assert!(
        rows.iter().any(|row| row["window_start"] == spanning),
        "{answer}"
    );
    assert_replayed_from(rows, "u7", &model, saved_watermark);
}

/// A tenant's pipeline (`team-a.clicks`, its operator `team-a.count-sum`) runs on workers like
/// the server's own: its name's dot keeps it apart in the cluster's keys, and its checkpoint
/// stores get a name of their own. A worker killed under it is found gone and its slices taken.
#[test]
fn a_tenant_s_pipeline_runs_on_workers() {
    let setup = Setup::start();
    let server = &setup.server;
    setup.client.stream("TEAM_A", &["team-a.clicks.>"]);
    setup.client.stream("TEAM_A_RESULTS", &["team-a.results"]);
    let made = server.expect(
        "a tenant's token",
        server.post_json(
            "/v1/tokens",
            Some(ADMIN),
            &json!({"name": "team-a.admin", "scopes": ["admin"], "tenant": "team-a"}),
        ),
        201,
    );
    let token = made["token"].as_str().unwrap();
    let bytes = std::fs::read(count_sum_v1()).unwrap();
    server.expect(
        "the tenant's operator",
        server.upload("team-a.count-sum", "1.0.0", &bytes, Some(token)),
        201,
    );
    let mut spec = workers_spec(4);
    spec["name"] = json!("team-a.clicks");
    spec["operators"][0]["name"] = json!("team-a.count-sum");
    spec["source"] = json!({"type": "nats", "stream": "TEAM_A", "subjects": ["team-a.clicks.>"]});
    spec["sinks"]["results"]["subject"] = json!("team-a.results");
    server.expect(
        "creating",
        server.post_json("/v1/pipelines", Some(token), &spec),
        201,
    );
    server.expect(
        "starting",
        server.post("/v1/pipelines/team-a.clicks/start", Some(token), b""),
        200,
    );
    let [t1, _t2] = ["t1", "t2"].map(|id| setup.worker_of("team-a.clicks", id));
    server.wait_for("both workers holding slices", PATIENCE, || {
        let status = server.status("team-a.clicks")["workers"].clone();
        let owners: BTreeSet<String> = (status["owners"].as_object().into_iter().flatten())
            .filter_map(|(_, o)| o.as_str().map(str::to_owned))
            .collect();
        let held = status["owners"].as_object().map_or(0, |o| o.len());
        match (held, owners.len()) {
            (4, 2) => Ok(()),
            _ => Err(status.to_string()),
        }
    });
    let first = clicks(0, 800);
    setup.client.publish("team-a.clicks.web", &first);
    crate::cluster::kill(t1);
    let second = clicks(800, 700);
    setup.client.publish("team-a.clicks.web", &second);
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    let latest = all.iter().map(|e| e["ts"].as_i64().unwrap()).max().unwrap();
    let want: BTreeSet<(String, i64)> = (windows(&all).into_keys())
        .filter(|(_, start)| start + 1000 <= latest)
        .collect();
    let got = server.wait_for("the tenant's results", PATIENCE, || {
        let got = results_in(&setup.client, "TEAM_A_RESULTS", "team-a.results");
        let have: BTreeSet<_> = got.keys().cloned().collect();
        let log = || std::fs::read_to_string(setup.dir.path().join("t2.log")).unwrap_or_default();
        match have == want {
            true => Ok(got),
            false => Err(format!("{} of {}\n{}", have.len(), want.len(), log())),
        }
    });
    let model = windows(&all);
    for (window, r) in &got {
        let (count, sum) = model[window];
        assert_eq!(
            (&r["value"]["count"], &r["value"]["sum"]),
            (&json!(count), &json!(sum)),
            "{r}"
        );
    }
    let log = std::fs::read_to_string(setup.dir.path().join("t2.log")).unwrap();
    assert!(log.contains("worker t1 is gone"), "{log}");
}

/// A served pipeline with a stage on workers: the top users by count per second, from the stage
/// slice, as the model says. Its savepoint holds the stage slice too, with the records it had
/// not taken yet; a fork goes on from it: the second open across the savepoint ranks the
/// events of both sides, no second closed before it comes again. A replay (of any pipeline
/// with stages) is refused (409), as is a fork without the stage (400).
#[test]
fn a_served_pipeline_with_a_stage_runs_on_workers_with_its_stage_slice_and_forks_from_a_savepoint()
{
    let setup = Setup::start();
    let server = &setup.server;
    let path = |pipeline: &str, action: &str| format!("/v1/pipelines/{pipeline}/{action}");
    server.upload_ok("top-keys", "1.0.0", &crate::support::component("top-keys"));
    let mut spec = workers_spec(4);
    spec["stages"] = json!([{
        "window": {"type": "tumbling", "size": 1000},
        "operator": {"name": "top-keys", "version": "1.0.0", "kind": "aggregate"}
    }]);
    crate::server::create_and_start_spec(server, &spec);
    let _workers = ["w1", "w2"].map(|id| setup.worker(id));
    server.wait_for(
        "five slices held, the stage slice among them",
        PATIENCE,
        || {
            let status = setup.workers_status();
            match (status["stage_slice"].as_u64(), status["owners"].as_object()) {
                (Some(4), Some(owners)) if owners.len() == 5 => Ok(()),
                _ => Err(format!("{status}\n{}", setup.logs())),
            }
        },
    );
    let first = clicks(0, 1_500);
    setup.client.publish("clicks.web", &first);
    // One stage result per closed second, under the one key of a stage without a key field.
    let seconds = |events: &[Value]| -> Vec<Value> {
        (events.iter())
            .map(|event| json!({"user": "*", "ts": event["ts"], "amount": 0}))
            .collect()
    };
    let got = setup.wait_for_windows(&seconds(&first));
    let model = windows(&first);
    for ((_, start), r) in &got {
        assert_eq!(r["value"], top_three(&model, *start), "{r}");
    }

    // Taken while the next events go through: the stage slice has results on its stream it has
    // not checkpointed yet, which the savepoint keeps.
    let middle = clicks(1_500, 750);
    setup.client.publish("clicks.web", &middle);
    let saved = server.expect(
        "a savepoint",
        server.post_json(
            &path(NAME, "savepoints"),
            Some(ADMIN),
            &json!({"name": "s"}),
        ),
        201,
    );
    assert_eq!(saved["slices"].as_array().unwrap().len(), 5, "{saved}");
    let saved_watermark = saved["watermark"].as_i64().expect("a watermark");
    let replay = json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u3"], "savepoint": "s"});
    let refused = server.expect_error(
        "a replay from it",
        server.post_json(&path(NAME, "replay"), Some(ADMIN), &replay),
        409,
    );
    assert!(refused.contains("stages"), "{refused}");
    let mut fork_spec = spec.clone();
    fork_spec["name"] = json!("forked");
    fork_spec["sinks"]["results"]["subject"] = json!("results.forked");
    let fork = |spec: &Value| server.post_json(&path(NAME, "savepoints/s/fork"), Some(ADMIN), spec);
    let mut unstaged = fork_spec.clone();
    unstaged.as_object_mut().unwrap().remove("stages");
    let refused = server.expect_error("a fork without the stage", fork(&unstaged), 400);
    assert!(refused.contains("operator chain"), "{refused}");
    server.expect("forking", fork(&fork_spec), 201);
    server.expect(
        "starting the fork",
        server.post(&path("forked", "start"), Some(ADMIN), b""),
        200,
    );
    let _forked_worker = ["f1"].map(|id| setup.worker_of("forked", id));
    let last = clicks(2_250, 750);
    setup.client.publish("clicks.web", &last);
    let all: Vec<Value> = [&first[..], &middle, &last].concat();
    let model = windows(&all);
    let latest = all.iter().map(|e| e["ts"].as_i64().unwrap()).max().unwrap();
    let want: BTreeSet<i64> = (model.keys())
        .map(|(_, start)| *start)
        .filter(|start| start + 1000 <= latest && start + 1000 > saved_watermark)
        .collect();
    let forked_log =
        || std::fs::read_to_string(setup.dir.path().join("f1.log")).unwrap_or_default();
    let forked = server.wait_for("the fork's results", PATIENCE, || {
        let got = results_of(&setup.client, "results.forked");
        let starts: BTreeSet<i64> = got.keys().map(|(_, start)| *start).collect();
        match want.is_subset(&starts) {
            true => Ok(got),
            false => Err(format!("{starts:?} of {want:?}\n{}", forked_log())),
        }
    });
    for ((_, start), r) in &forked {
        assert!(
            start + 1000 > saved_watermark,
            "second {start} was closed when the savepoint was taken: {r}"
        );
        assert_eq!(r["value"], top_three(&model, *start), "{r}");
    }
    let spanning = saved_watermark.div_euclid(1000) * 1000;
    assert!(
        forked.keys().any(|(_, start)| *start == spanning),
        "the second open across the savepoint: {forked:?}"
    );
}

/// The top three users of the second from `start` in `model`, by count, as the top-keys stage
/// gives them: most first, a tie to the lower key.
fn top_three(model: &BTreeMap<(String, i64), (i64, i64)>, start: i64) -> Value {
    let mut users: Vec<(i64, &str)> = (model.iter())
        .filter(|((_, s), _)| *s == start)
        .map(|((user, _), (count, _))| (-count, user.as_str()))
        .collect();
    users.sort();
    let mut top = serde_json::Map::new();
    for (rank, (count, user)) in users.iter().take(3).enumerate() {
        top.insert(format!("key_{}", rank + 1), json!(user));
        top.insert(format!("count_{}", rank + 1), json!(-count));
    }
    Value::Object(top)
}

/// A fork's results: none of a window the savepoint had closed, each as the model says over the
/// events from both sides of the savepoint.
fn assert_goes_on_from(
    forked: &BTreeMap<(String, i64), Value>,
    model: &BTreeMap<(String, i64), (i64, i64)>,
    saved_watermark: i64,
) {
    for ((user, start), r) in forked {
        assert!(
            start + 1000 > saved_watermark,
            "window {user} {start} was closed when the savepoint was taken: {r}"
        );
        let (count, sum) = model[&(user.clone(), *start)];
        assert_eq!(
            (&r["value"]["count"], &r["value"]["sum"]),
            (&json!(count), &json!(sum)),
            "{r}"
        );
    }
}

/// A replay's rows of `key` from a savepoint: none of a window the savepoint had closed,
/// version A's as the model says.
fn assert_replayed_from(
    rows: &[Value],
    key: &str,
    model: &BTreeMap<(String, i64), (i64, i64)>,
    saved_watermark: i64,
) {
    for row in rows {
        let start = row["window_start"].as_i64().unwrap();
        assert!(
            start + 1000 > saved_watermark,
            "closed before the savepoint: {row}"
        );
        let (count, sum) = model[&(key.to_owned(), start)];
        assert_eq!(
            (&row["a"]["count"], &row["a"]["sum"]),
            (&json!(count), &json!(sum)),
            "{row}"
        );
    }
}
