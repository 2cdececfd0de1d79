//! Served pipelines fed from NATS (issue 40): `weir serve --nats URL` runs a pipeline that reads
//! a JetStream stream and publishes its results to a subject, with the whole control plane
//! (a shadow rollout, a replay of keys, a savepoint and a fork that continues from it, promote),
//! against a real `nats-server -js`. A spec names the server, never an address; the server's
//! credentials (user and password, token, nkey) and a `tls://` server with its own authority
//! are the process's, never the spec's.

use serde_json::{Value, json};

use crate::nats::{BASE, Client, NatsServer, windows};
use crate::server::{ADMIN, INGEST, PATIENCE, Server, count_sum_v1, create_and_start_spec};

/// In-order clicks of 20 users, `n` of them from index `from`, 7 ms apart, with amounts up to 90
/// (so that a window's sum passes 100 now and then).
fn clicks(from: usize, n: usize) -> Vec<Value> {
    (from..from + n)
        .map(|i| json!({"user": format!("u{}", i % 20), "ts": BASE + i as i64 * 7, "amount": (i * 7 % 10) * 10}))
        .collect()
}

/// A served spec reading stream `CLICKS` of the default NATS server.
fn nats_spec(name: &str) -> Value {
    json!({
        "name": name,
        "source": {"type": "nats", "stream": "CLICKS"},
        "event": {"key": "user", "timestamp": "ts"},
        "watermark": {"bound": 0},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "checkpoint_interval": "100ms"
    })
}

/// The `(user, window start) -> (count, sum)` of result records.
fn by_window(results: &[Value]) -> std::collections::BTreeMap<(String, i64), (i64, i64)> {
    (results.iter())
        .map(|r| {
            let key = (
                r["key"].as_str().unwrap().to_owned(),
                r["window_start"].as_i64().unwrap(),
            );
            let value = &r["value"];
            (
                key,
                (
                    value["count"].as_i64().unwrap(),
                    value["sum"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

/// The windows of `events` that a watermark at the latest event's time has closed.
fn closed(events: &[Value]) -> std::collections::BTreeMap<(String, i64), (i64, i64)> {
    let latest = events
        .iter()
        .map(|e| e["ts"].as_i64().unwrap())
        .max()
        .unwrap();
    (windows(events).into_iter())
        .filter(|((_, start), _)| start + 1000 <= latest)
        .collect()
}

/// A `weir serve --nats` beside a real `nats-server` holding a CLICKS and a RESULTS stream.
struct Served {
    nats: NatsServer,
    client: Client,
    dir: tempfile::TempDir,
    server: Server,
}

impl Served {
    fn start() -> Self {
        let nats = NatsServer::start();
        let client = Client::connect(&nats.url);
        client.stream("CLICKS", &["clicks.>"]);
        client.stream("RESULTS", &["results.>"]);
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start_with(dir.path(), &["--nats", &nats.url]);
        Served {
            nats,
            client,
            dir,
            server,
        }
    }
}

#[test]
fn a_served_pipeline_reads_a_nats_stream_with_rollout_replay_savepoint_fork_and_promote() {
    let Served {
        nats: _nats,
        client,
        dir: _dir,
        server,
    } = Served::start();
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok(
        "count-sum",
        "1.1.0",
        &crate::support::guest("count-sum-capped"),
    );
    let mut spec = nats_spec("from-nats");
    spec["sinks"] = json!({"results": {"nats": "default", "subject": "results.from-nats"}});
    create_and_start_spec(&server, &spec);
    let status = server.status("from-nats");
    assert_eq!(status["source"]["type"], "nats", "{status}");
    assert_eq!(status["source"]["stream"], "CLICKS");

    // Events come from the stream, not over HTTP.
    let first = clicks(0, 1_500);
    client.publish("clicks.web", &first);
    server.wait_for_events_in("from-nats", first.len());
    let refused = server.expect_error(
        "sending events over HTTP",
        server.post(
            "/v1/pipelines/from-nats/events",
            Some(INGEST),
            b"{\"user\": \"u1\", \"ts\": 1}",
        ),
        409,
    );
    assert!(refused.contains("NATS stream"), "{refused}");
    let results = server.wait_for("the first results on NATS", PATIENCE, || {
        let results: Vec<Value> = (client.read_all("RESULTS").into_iter())
            .map(|(_, record)| record)
            .collect();
        if by_window(&results) == closed(&first) {
            Ok(results)
        } else {
            Err(format!("{} results", results.len()))
        }
    });
    assert!(!results.is_empty());

    // A savepoint, then a fork from it that reads the stream from there: the same windows.
    let saved = server.expect(
        "a savepoint",
        server.post_json(
            "/v1/pipelines/from-nats/savepoints",
            Some(ADMIN),
            &json!({"name": "mid"}),
        ),
        201,
    );
    let at = saved["input_offset"].as_u64().unwrap();
    assert_eq!(
        at,
        first.len() as u64,
        "the savepoint's stream sequence: {saved}"
    );
    let mut fork = nats_spec("forked");
    fork["sinks"] = json!({"results": "results.jsonl"});
    server.expect(
        "forking",
        server.post_json(
            "/v1/pipelines/from-nats/savepoints/mid/fork",
            Some(ADMIN),
            &fork,
        ),
        201,
    );
    // A shadow rollout of 1.1.0 (it caps sums at 100): compared live, serving nothing.
    server.expect(
        "a shadow rollout",
        server.post_json(
            "/v1/pipelines/from-nats/rollout",
            Some(ADMIN),
            &json!({"version": "1.1.0", "percent": 0, "shadow": true}),
        ),
        200,
    );
    server.wait_for_routing("from-nats", "the shadow to apply", |r| {
        r["candidate"] == "1.1.0"
    });
    let second = clicks(1_500, 1_500);
    client.publish("clicks.web", &second);
    server.wait_for_events_in("from-nats", 3_000);
    let compared = server.wait_for("the shadow's comparisons", PATIENCE, || {
        let status = server.status("from-nats");
        let candidate = crate::server::version_entry(&status, "1.1.0");
        match candidate["shadow_compared"].as_u64() {
            Some(n) if n > 0 => Ok(candidate),
            _ => Err(status.to_string()),
        }
    });
    assert!(
        compared["shadow_differed"].as_u64().unwrap() > 0,
        "{compared}"
    );

    // The fork, started now, reads what came after the savepoint: the original's windows.
    server.expect(
        "starting the fork",
        server.post("/v1/pipelines/forked/start", Some(ADMIN), b""),
        200,
    );
    server.wait_for_events_in("forked", 3_000);
    let all: Vec<Value> = first.iter().chain(&second).cloned().collect();
    let expected = closed(&all);
    server.wait_for("the fork's results", PATIENCE, || {
        let mut got = by_window(&server.results("forked"));
        // The fork's output starts at the savepoint: the windows closed before it are the
        // original's.
        for (window, value) in by_window(&results) {
            got.entry(window).or_insert(value);
        }
        if got == expected {
            Ok(())
        } else {
            Err(format!("{} of {} windows", got.len(), expected.len()))
        }
    });

    // A replay of one user from the savepoint, through both versions.
    let answer = server.expect(
        "a replay",
        server.post_json(
            "/v1/pipelines/from-nats/replay",
            Some(ADMIN),
            &json!({"versions": ["1.0.0", "1.1.0"], "keys": ["u3"], "savepoint": "mid"}),
        ),
        200,
    );
    assert_eq!(answer["input"]["from_offset"], at, "{answer}");
    assert_eq!(answer["input"]["to_offset"], 3_000, "{answer}");
    let rows = answer["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{answer}");
    for row in rows {
        let start = row["window_start"].as_i64().unwrap();
        let (count, sum) = expected[&("u3".to_owned(), start)];
        assert!(start >= BASE, "{row}");
        assert_eq!(
            (&row["a"]["count"], &row["a"]["sum"]),
            (&json!(count), &json!(sum)),
            "{row}"
        );
        assert_eq!(row["b"]["sum"], json!(sum.min(100)), "{row}");
    }

    // Promote: 1.1.0 becomes the live version.
    server.expect(
        "a rollout to everyone",
        server.post_json(
            "/v1/pipelines/from-nats/rollout",
            Some(ADMIN),
            &json!({"version": "1.1.0", "percent": 100}),
        ),
        200,
    );
    server.expect(
        "promoting",
        server.post("/v1/pipelines/from-nats/promote", Some(ADMIN), b""),
        200,
    );
    server.wait_for_routing("from-nats", "the promotion", |r| r["live"] == "1.1.0");
    let spec = server.expect(
        "the spec",
        server.get("/v1/pipelines/from-nats/spec", Some(ADMIN)),
        200,
    );
    assert_eq!(spec["operators"][0]["version"], "1.1.0");
    assert!(
        spec["source"].get("url").is_none(),
        "stored by name: {spec}"
    );
}

#[test]
fn a_served_spec_names_a_nats_server_and_never_an_address() {
    let nats = NatsServer::start();
    let client = Client::connect(&nats.url);
    client.stream("CLICKS", &["clicks.>"]);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--nats", &format!("local={}", nats.url)]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let hostile = [
        (
            "source",
            json!({"type": "nats", "url": nats.url, "stream": "CLICKS"}),
        ),
        (
            "source",
            json!({"type": "nats", "server": nats.url, "stream": "CLICKS"}),
        ),
        (
            "source",
            json!({"type": "nats", "server": "elsewhere", "stream": "CLICKS"}),
        ),
        (
            "source",
            json!({"type": "nats", "server": "local", "stream": "a.b"}),
        ),
        (
            "sinks",
            json!({"results": {"nats": "nats://10.0.0.1:4222", "subject": "x"}}),
        ),
        (
            "sinks",
            json!({"results": {"nats": "elsewhere", "subject": "x"}}),
        ),
        (
            "sinks",
            json!({"results": {"nats": "local", "subject": "x.*"}}),
        ),
        // The server's own: JetStream's API, and the cluster's buckets.
        (
            "sinks",
            json!({"results": {"nats": "local", "subject": "$JS.API.STREAM.DELETE.CLICKS"}}),
        ),
        (
            "sinks",
            json!({"results": {"nats": "local", "subject": "$KV.weir-watermarks.p.0"}}),
        ),
        (
            "source",
            json!({"type": "nats", "server": "local", "stream": "KV_weir-leases"}),
        ),
        (
            "source",
            json!({"type": "nats", "server": "local", "stream": "CLICKS", "subjects": ["$JS.>"]}),
        ),
    ];
    for (field, value) in hostile {
        let mut spec = nats_spec("hostile");
        spec[field] = value.clone();
        server.expect_error(
            &format!("a spec with {value}"),
            server.post_json("/v1/pipelines", Some(ADMIN), &spec),
            400,
        );
    }
    // Named, it is taken.
    let mut spec = nats_spec("named");
    spec["source"]["server"] = json!("local");
    create_and_start_spec(&server, &spec);
    client.publish("clicks.a", &clicks(0, 100));
    server.wait_for_events_in("named", 100);
    // A fork must read the same input: not the HTTP log, from a stream's savepoint.
    server.expect(
        "a savepoint",
        server.post_json(
            "/v1/pipelines/named/savepoints",
            Some(ADMIN),
            &json!({"name": "s"}),
        ),
        201,
    );
    let mut http = crate::server::spec();
    http["name"] = json!("over-http");
    let refused = server.expect_error(
        "forking a NATS pipeline's savepoint into an HTTP one",
        server.post_json("/v1/pipelines/named/savepoints/s/fork", Some(ADMIN), &http),
        400,
    );
    assert!(refused.contains("same NATS stream"), "{refused}");
}

/// Makes a certificate authority and a certificate for 127.0.0.1 signed by it, with openssl:
/// the paths of the authority's certificate, the server's certificate and its key.
pub(crate) fn certificates(dir: &std::path::Path) -> (String, String, String) {
    let path = |name: &str| dir.join(name).display().to_string();
    let openssl = |args: &[&str]| {
        let status = std::process::Command::new("openssl")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl is installed");
        assert!(status.success(), "openssl {args:?}");
    };
    let (ca, ca_key) = (path("ca.pem"), path("ca.key"));
    let (cert, key, csr) = (path("server.pem"), path("server.key"), path("server.csr"));
    let ext = path("san.ext");
    std::fs::write(&ext, "subjectAltName = IP:127.0.0.1\n").unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &ca_key,
        "-out",
        &ca,
        "-days",
        "2",
        "-subj",
        "/CN=weir test authority",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &csr,
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &cert,
        "-days",
        "2",
        "-extfile",
        &ext,
    ]);
    (ca, cert, key)
}

/// A served NATS pipeline on `url`, the server started with `auth` arguments, reads 50 events
/// published by `client`.
fn reads_with(url: &str, auth: &[&str], client: &Client) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--nats", url];
    args.extend_from_slice(auth);
    let server = Server::start_with(dir.path(), &args);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start_spec(&server, &nats_spec("authenticated"));
    client.publish("clicks.a", &clicks(0, 50));
    server.wait_for_events_in("authenticated", 50);
}

#[test]
fn nats_connections_present_the_process_credentials_and_trust_its_authority() {
    // A user and password.
    let locked = NatsServer::start_with(&["--user", "weir", "--pass", "secret-pass"]);
    let client = Client::connect_with(
        &locked.url,
        async_nats::ConnectOptions::with_user_and_password("weir".into(), "secret-pass".into()),
    );
    client.stream("CLICKS", &["clicks.>"]);
    reads_with(
        &locked.url,
        &["--nats-user", "weir", "--nats-password", "secret-pass"],
        &client,
    );
    // Without them, the pipeline fails and says why.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--nats", &locked.url]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    create_and_start_spec(&server, &nats_spec("anonymous"));
    let status = server.wait_for("the anonymous pipeline to fail", PATIENCE, || {
        let status = server.status("anonymous");
        if status["state"] == "failed" {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    });
    let error = status["error"].as_str().unwrap();
    assert!(error.contains("--nats-user"), "{error}");

    // A token.
    let tokened = NatsServer::start_with(&["--auth", "a-long-token-1234"]);
    let client = Client::connect_with(
        &tokened.url,
        async_nats::ConnectOptions::with_token("a-long-token-1234".into()),
    );
    client.stream("CLICKS", &["clicks.>"]);
    reads_with(
        &tokened.url,
        &["--nats-token", "a-long-token-1234"],
        &client,
    );

    // An nkey, from a seed file.
    let keys = tempfile::tempdir().unwrap();
    let user = nkeys::KeyPair::new_user();
    let seed = keys.path().join("user.nk");
    std::fs::write(&seed, user.seed().unwrap()).unwrap();
    let config = keys.path().join("nkey.conf");
    let public = user.public_key();
    std::fs::write(
        &config,
        format!("authorization {{ users = [ {{ nkey: {public} }} ] }}\n"),
    )
    .unwrap();
    let nkeyed = NatsServer::start_with(&["-c", &config.display().to_string()]);
    let client = Client::connect_with(
        &nkeyed.url,
        async_nats::ConnectOptions::with_nkey(user.seed().unwrap()),
    );
    client.stream("CLICKS", &["clicks.>"]);
    reads_with(
        &nkeyed.url,
        &["--nats-nkey", &seed.display().to_string()],
        &client,
    );

    // TLS, with a certificate authority of its own.
    let (ca, cert, key) = certificates(keys.path());
    let tls = NatsServer::start_with(&["--tls", "--tlscert", &cert, "--tlskey", &key]);
    let url = tls.url.replace("nats://", "tls://");
    let client = Client::connect_with(
        &url,
        async_nats::ConnectOptions::new().add_root_certificates(ca.clone().into()),
    );
    client.stream("CLICKS", &["clicks.>"]);
    reads_with(&url, &["--nats-ca", &ca], &client);
}

#[test]
fn unusable_nats_credentials_stop_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let bad_seed = dir.path().join("bad.nk");
    std::fs::write(&bad_seed, "not a seed").unwrap();
    let bad_creds = dir.path().join("bad.creds");
    std::fs::write(&bad_creds, "not a creds file").unwrap();
    for args in [
        vec!["--nats-nkey".to_owned(), bad_seed.display().to_string()],
        vec!["--nats-creds".into(), bad_creds.display().to_string()],
        vec![
            "--nats-ca".into(),
            dir.path().join("missing.pem").display().to_string(),
        ],
        vec!["--nats-user".into(), "weir".into()],
        vec![
            "--nats-token".into(),
            "t".into(),
            "--nats-nkey".into(),
            bad_seed.display().to_string(),
        ],
        vec!["--nats".into(), "http://127.0.0.1:1".into()],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .env_remove("WEIR_NATS_PASSWORD")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains("--nats"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_served_nats_pipeline_survives_a_sigkill_with_every_result_once() {
    let Served {
        nats,
        client,
        dir,
        mut server,
    } = Served::start();
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let mut spec = nats_spec("durable");
    spec["sinks"] = json!({"results": {"nats": "default", "subject": "results.durable"}});
    create_and_start_spec(&server, &spec);
    let events = clicks(0, 4_000);
    let (before, after) = events.split_at(2_000);
    client.publish("clicks.a", before);
    server.wait_for_events_in("durable", before.len());
    server.kill();
    drop(server);
    // Restarted without the server its spec names: kept, failed, saying what is missing.
    let server = Server::start(dir.path());
    let status = server.status("durable");
    assert_eq!(status["state"], "failed", "{status}");
    assert!(
        status["error"].as_str().unwrap().contains("--nats"),
        "{status}"
    );
    drop(server);
    let server = Server::start_with(dir.path(), &["--nats", &nats.url]);
    client.publish("clicks.a", after);
    server.wait_for_events_in("durable", events.len());
    // Status says how far behind the stream's last message the pipeline is: none now.
    server.wait_for("no lag", PATIENCE, || {
        let status = server.status("durable");
        match status["input_lag_sequences"].as_u64() {
            Some(0) => Ok(()),
            _ => Err(status.to_string()),
        }
    });
    let expected = closed(&events);
    let results = server.wait_for("every result once", PATIENCE, || {
        let results = client.read_all("RESULTS");
        if results.len() >= expected.len() {
            Ok(results)
        } else {
            Err(format!("{} of {}", results.len(), expected.len()))
        }
    });
    let ids: std::collections::BTreeSet<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), results.len(), "a result was published twice");
    let records: Vec<Value> = results.into_iter().map(|(_, record)| record).collect();
    assert_eq!(by_window(&records), expected);
}

#[test]
fn subjects_a_spec_lists_hold_the_watermark_back_from_the_start() {
    let Served {
        nats: _nats,
        client,
        dir: _dir,
        server,
    } = Served::start();
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    for (name, subjects) in [
        ("listed", json!(["clicks.a", "clicks.b"])),
        ("wildcard", json!(["clicks.>"])),
    ] {
        let mut spec = nats_spec(name);
        spec["source"]["subjects"] = subjects;
        create_and_start_spec(&server, &spec);
    }
    // Subject a publishes its whole hour first, then b the same hour: b is not late where
    // the spec listed it (as Flink's splits known at start), and is where only a wildcard
    // named it (b was unknown until its first event, a alone moved the watermark).
    let hour = clicks(0, 500);
    client.publish("clicks.a", &hour);
    client.publish("clicks.b", &hour);
    for name in ["listed", "wildcard"] {
        // Counted once written: after the checkpoint that covers every event.
        server.wait_for_checkpoint_of(name, 1_000);
    }
    assert_eq!(server.status("listed")["late"], 0);
    let late = server.status("wildcard")["late"].as_u64().unwrap();
    assert!(late > 400, "{late} late events");
}

#[test]
fn messages_of_many_events_are_read_whole_across_a_sigkill() {
    let Served {
        nats,
        client,
        dir,
        mut server,
    } = Served::start();
    // A count-sum that spends a third of a millisecond per event: checkpoints come while a
    // message is being read.
    server.upload_ok(
        "count-sum",
        "1.0.0",
        &crate::support::guest("busy-per-event"),
    );
    let mut spec = nats_spec("batched");
    spec["sinks"] = json!({"results": {"nats": "default", "subject": "results.batched"}});
    spec["batch_size"] = json!(7); // batches, and so checkpoints, end inside messages
    create_and_start_spec(&server, &spec);
    let events = clicks(0, 6_000);
    // 60 messages of 100 events each, as JSON Lines.
    let publish = |events: &[Value]| {
        let messages: Vec<String> = (events.chunks(100))
            .map(|chunk| {
                chunk
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        client.runtime.block_on(async {
            for message in messages {
                let ack = client
                    .jetstream
                    .publish("clicks.a", message.into())
                    .await
                    .unwrap();
                ack.await.unwrap();
            }
        });
    };
    let (before, after) = events.split_at(3_000);
    publish(before);
    // Killed once a checkpoint has ended inside a message (its position counts the lines read
    // of it).
    server.wait_for("a checkpoint inside a message", PATIENCE, || {
        let status = server.status("batched");
        match status["last_checkpoint"]["events"].as_u64() {
            Some(n) if n % 100 != 0 => Ok(()),
            _ => Err(status.to_string()),
        }
    });
    server.kill();
    drop(server);
    let server = Server::start_with(dir.path(), &["--nats", &nats.url]);
    publish(after);
    server.wait_for_events_in("batched", events.len());
    let expected = closed(&events);
    let results = server.wait_for("every result once", PATIENCE, || {
        let results = client.read_all("RESULTS");
        if results.len() >= expected.len() {
            Ok(results)
        } else {
            Err(format!("{} of {}", results.len(), expected.len()))
        }
    });
    let records: Vec<Value> = results.into_iter().map(|(_, record)| record).collect();
    assert_eq!(records.len(), expected.len(), "a result published twice");
    assert_eq!(by_window(&records), expected);
}
