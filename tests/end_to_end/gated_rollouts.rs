//! Analysis-gated rollouts (issue 42): a rollout in steps whose gates are judged on what Weir
//! measures at each step, against the live version over the same keys and time. A candidate
//! whose results differ on 3 % of windows is stopped by the shadow gate before it serves every
//! key, and rolled back with the gate's figures and the keys that differed; the same candidate
//! within a tolerance passes every step and promotes itself; a candidate with the right results
//! but several times the state per window is stopped by the state gate. Absurd gates are
//! refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{ADMIN, BASE_TS, PIPELINE, Server, count_sum_v1, create_and_start, ev};

/// 200 users; the windows where `(user * 7 + window * 13) % 100 < 3` get an amount of 150
/// (their sum passes 100, where the capped candidate differs), the rest 1.
fn window_events(window: i64) -> Vec<crate::reference::Ev> {
    (0..200)
        .flat_map(|user| {
            let big = (user * 7 + window * 13).rem_euclid(100) < 3;
            let ts = BASE_TS + window * 1_000;
            [0, 500].map(|offset| ev(&format!("u{user}"), ts + offset, if big { 150 } else { 1 }))
        })
        .collect()
}

/// Uploads count-sum 1.0.0 and 1.1.0 (sums capped at 100) and starts the test pipeline on
/// 1.0.0.
fn with_both_versions(server: &Server) {
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let capped = crate::support::guest("count-sum-capped");
    server.upload_ok("count-sum", "1.1.0", &capped);
    create_and_start(server);
}

/// A server with count-sum 1.0.0 live and 1.1.0 (sums capped at 100) uploaded, and a thread
/// sending ten windows' events a second until this is dropped (a failed assertion too, so the
/// server it holds goes with it).
pub(crate) struct Feeding {
    pub(crate) server: Arc<Server>,
    stop: Arc<AtomicBool>,
    feeder: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Feeding {
    pub(crate) fn start() -> Feeding {
        let dir = tempfile::tempdir().unwrap();
        let server = Arc::new(Server::start(dir.path()));
        with_both_versions(&server);
        let stop = Arc::new(AtomicBool::new(false));
        let feeder = std::thread::spawn({
            let (server, stop) = (server.clone(), stop.clone());
            move || {
                let mut window = 0;
                while !stop.load(Ordering::Relaxed) && window < 3_000 {
                    server.ingest(PIPELINE, &window_events(window));
                    window += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Feeding {
            server,
            stop,
            feeder: Some(feeder),
            _dir: dir,
        }
    }
}

impl Feeding {
    /// Stops sending (the server goes on).
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(feeder) = self.feeder.take() {
            let _ = feeder.join();
        }
    }
}

impl Drop for Feeding {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the gated rollout of 1.1.0 with `gates` (see [`gated`]).
pub(crate) fn roll_out_gated(server: &Server, gates: Value) {
    let path = format!("/v1/pipelines/{PIPELINE}/rollout");
    let request = gated(gates);
    server.expect(
        "a gated rollout",
        server.post_json(&path, Some(ADMIN), &request),
        200,
    );
}

pub(crate) fn gated(gates: Value) -> Value {
    json!({"version": "1.1.0", "steps": [1, 10, 50, 100], "hold": "1500ms", "gates": gates, "promote": true})
}

#[test]
fn a_candidate_that_differs_on_three_percent_of_windows_is_stopped_by_the_shadow_gate() {
    let mut feeding = Feeding::start();
    let server = feeding.server.clone();
    let gates = json!({"max_shadow_diff_rate": 0.01, "min_comparisons": 100});
    roll_out_gated(&server, gates);
    let status = server.wait_for(
        "the shadow gate to stop it",
        Duration::from_secs(60),
        || {
            let status = server.status(PIPELINE);
            match status["rollout"]["rolled_back"].as_str() {
                Some(_) => Ok(status),
                None => Err(status["rollout"].to_string()),
            }
        },
    );
    feeding.stop();
    let rollout = &status["rollout"];
    let reason = rollout["rolled_back"].as_str().unwrap();
    assert!(reason.contains("gate shadow_diff_rate"), "{reason}");
    let timeline = rollout["analysis"]["timeline"].as_array().unwrap();
    let failed = timeline.last().unwrap();
    assert_eq!(failed["outcome"], "failed", "{rollout}");
    assert_ne!(
        failed["percent"], 100,
        "stopped before it served every key: {rollout}"
    );
    // The steps before it passed; the failed one was judged on enough windows, at about 3 %.
    assert!(
        timeline[..timeline.len() - 1]
            .iter()
            .all(|s| s["outcome"] == "passed"),
        "{rollout}"
    );
    let gate = &failed["gates"][0];
    assert!(gate["samples"].as_u64().unwrap() >= 100, "{gate}");
    let rate = gate["value"].as_f64().unwrap();
    assert!((0.01..0.1).contains(&rate), "about 3 % differ: {gate}");
    // The example keys are keys whose windows differ: users with a big window.
    let keys = failed["example_keys"].as_array().unwrap();
    assert!(!keys.is_empty(), "{failed}");
    // Every key back on 1.0.0.
    server.wait_for_routing(PIPELINE, "the rollback to apply", |r| {
        r["candidate"].is_null()
    });
    assert_eq!(status["operator"]["version"], "1.0.0");
}

#[test]
fn a_candidate_within_its_tolerance_passes_every_step_and_promotes_itself() {
    let mut feeding = Feeding::start();
    let server = feeding.server.clone();
    let gates = json!({"max_shadow_diff_rate": 0.01, "min_comparisons": 100,
        "tolerance": {"sum": 1000}, "max_trap_rate_increase": 0.0});
    roll_out_gated(&server, gates);
    let status = server.wait_for("the promotion", Duration::from_secs(60), || {
        let status = server.status(PIPELINE);
        match status["operator"]["version"].as_str() {
            Some("1.1.0") => Ok(status),
            _ => Err(status["rollout"].to_string()),
        }
    });
    feeding.stop();
    assert!(status["rollout"].is_null(), "{status}");
    let timeline = status["last_analysis"]["timeline"].as_array().unwrap();
    let steps: Vec<(u64, &str)> = (timeline.iter())
        .map(|s| {
            (
                s["percent"].as_u64().unwrap(),
                s["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            (1, "passed"),
            (10, "passed"),
            (50, "passed"),
            (100, "passed")
        ]
    );
    // Compared on enough windows where it served, all within the tolerance.
    // Judged where the candidate served enough keys (how many windows a step's hold sees
    // depends on the machine's load): no difference beyond the tolerance.
    let judged: Vec<&Value> = (timeline.iter())
        .map(|step| &step["gates"][0])
        .filter(|gate| gate["gate"] == "shadow_diff_rate" && !gate["value"].is_null())
        .collect();
    assert!(!judged.is_empty(), "{timeline:?}");
    assert!(judged.iter().all(|gate| gate["value"] == 0.0), "{judged:?}");
    server.wait_for_routing(PIPELINE, "the promotion to apply", |r| r["live"] == "1.1.0");
}

#[test]
fn a_candidate_whose_state_grows_is_stopped_by_the_state_gate_though_its_results_are_right() {
    let mut feeding = Feeding::start();
    let server = feeding.server.clone();
    let hoarder = crate::support::guest("count-sum-hoarder");
    server.upload_ok("count-sum", "1.2.0", &hoarder);
    let mut request = gated(json!({"max_state_growth_ratio": 1.5, "min_comparisons": 50,
        "max_shadow_diff_rate": 0.0}));
    request["version"] = json!("1.2.0");
    server.expect(
        "a gated rollout",
        server.post_json(
            &format!("/v1/pipelines/{PIPELINE}/rollout"),
            Some(ADMIN),
            &request,
        ),
        200,
    );
    let status = server.wait_for("the state gate to stop it", Duration::from_secs(60), || {
        let status = server.status(PIPELINE);
        match status["rollout"]["rolled_back"].as_str() {
            Some(_) => Ok(status),
            None => Err(status["rollout"].to_string()),
        }
    });
    feeding.stop();
    let rollout = &status["rollout"];
    let reason = rollout["rolled_back"].as_str().unwrap();
    assert!(reason.contains("gate state_growth_ratio"), "{reason}");
    let failed = rollout["analysis"]["timeline"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let gate = |name: &str| {
        (failed["gates"].as_array().unwrap().iter())
            .find(|g| g["gate"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {failed}"))
    };
    // The same results (no window differs), several times the state.
    let shadow = gate("shadow_diff_rate");
    assert!(
        shadow["passed"] == true && shadow["value"].as_f64().is_none_or(|v| v == 0.0),
        "{shadow}"
    );
    let state = gate("state_growth_ratio");
    assert!(state["value"].as_f64().unwrap() > 1.5, "{state}");
    assert!(state["samples"].as_u64().unwrap() >= 50, "{state}");
    server.wait_for_routing(PIPELINE, "the rollback to apply", |r| {
        r["candidate"].is_null()
    });
}

#[test]
fn absurd_gates_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    with_both_versions(&server);
    let path = format!("/v1/pipelines/{PIPELINE}/rollout");
    let refused = |what: &str, request: Value, fragment: &str| {
        let error = server.expect_error(what, server.post_json(&path, Some(ADMIN), &request), 400);
        assert!(error.contains(fragment), "{what}: {error}");
    };
    let shadow = json!({"max_shadow_diff_rate": 0.01});
    refused(
        "a rate over 1",
        gated(json!({"max_shadow_diff_rate": 3})),
        "between 0 and 1",
    );
    refused(
        "a negative rate",
        gated(json!({"max_trap_rate_increase": -0.5})),
        "between 0 and 1",
    );
    refused("no limit at all", gated(json!({})), "at least one limit");
    refused(
        "a ratio of 0",
        gated(json!({"max_call_time_ratio": 0})),
        "above 0",
    );
    refused(
        "an infinite state growth",
        gated(json!({"max_state_growth_ratio": 1e300})),
        "at most 1000000",
    );
    refused(
        "a negative tolerance",
        gated(json!({"max_shadow_diff_rate": 0.1, "tolerance": {"sum": -1}})),
        "tolerance",
    );
    refused(
        "an unknown gate",
        gated(json!({"max_vibes": 1})),
        "max_vibes",
    );
    refused(
        "a huge minimum",
        gated(json!({"max_shadow_diff_rate": 0.1, "min_comparisons": 1u64 << 40})),
        "min_comparisons",
    );
    let mut no_hold = gated(shadow.clone());
    no_hold.as_object_mut().unwrap().remove("hold");
    refused("gates without a hold", no_hold, "hold");
    let mut clocked = gated(shadow.clone());
    clocked["every"] = json!("1s");
    refused("gates and a clock", clocked, "every");
    let mut shadowed = gated(shadow.clone());
    shadowed["shadow"] = json!(true);
    refused("gates on a shadow run", shadowed, "shadow");
    let mut hold_alone = json!({"version": "1.1.0", "percent": 10, "hold": "1s"});
    refused("a hold without gates", hold_alone.take(), "give `gates`");
    let mut long_hold = gated(shadow);
    long_hold["hold"] = json!(0);
    refused("a hold of 0", long_hold, "hold");
    // Nothing was rolled out.
    assert!(server.status(PIPELINE)["rollout"].is_null());
}
