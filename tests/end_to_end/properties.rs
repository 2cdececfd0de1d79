//! Property tests: random out-of-order streams through the runtime (in process, the Wasm
//! count-sum component and a memory backend) give exactly the reference model's output, for any
//! shard count and batch size.

use std::path::Path;

use proptest::prelude::*;
use weir::spec::{OperatorCode, PipelineSpec, Sink, StateSpec};

use crate::reference::{Ev, ModelSpec, WindowKind, run_model};
use crate::support::{count_sum_body, emissions, to_jsonl};

fn window() -> impl Strategy<Value = WindowKind> {
    prop_oneof![
        (1i64..60).prop_map(|size| WindowKind::Tumbling { size }),
        (1i64..60, 1i64..60).prop_map(|(size, s)| WindowKind::Sliding {
            size,
            slide: 1 + (s - 1) % size
        }),
        (1i64..40).prop_map(|gap| WindowKind::Session { gap }),
    ]
}

fn events() -> impl Strategy<Value = Vec<Ev>> {
    // Timestamps drift upwards with random disorder, including negative times.
    proptest::collection::vec((0usize..4, -30i64..40, -50i64..50), 0..120).prop_map(|steps| {
        let mut clock = -100;
        steps
            .into_iter()
            .map(|(key, step, amount)| {
                clock += step / 3;
                Ev {
                    key: format!("k{key}"),
                    ts: clock + step,
                    amount,
                }
            })
            .collect()
    })
}

fn run_in_process(
    spec: &ModelSpec,
    events: &[Ev],
    shards: usize,
    batch_size: usize,
    native: bool,
) -> (Vec<crate::reference::Emission>, Vec<usize>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.jsonl"), to_jsonl(events)).unwrap();
    let text = format!(
        "name = \"prop\"\n[source]\ntype = \"file\"\npath = \"events.jsonl\"\n{}",
        count_sum_body(spec)
    );
    let mut pipeline = PipelineSpec::parse(&text, false, dir.path()).unwrap();
    pipeline.state = StateSpec::Memory;
    pipeline.shards = Some(shards);
    pipeline.batch_size = batch_size;
    if native {
        pipeline.aggregate.as_mut().unwrap().code = OperatorCode::Native("count-sum".into());
    }
    let out = dir.path().join("results.jsonl");
    let late = dir.path().join("late.jsonl");
    pipeline.sinks.results = Sink::File(out.clone());
    pipeline.sinks.late = Sink::File(late.clone());
    pipeline.sinks.dead_letters = Sink::Stderr;
    let summary = weir::run(&pipeline).expect("the pipeline runs");
    assert_eq!(summary.dead_letters, 0);
    let read = |path: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let late_lines = read(&late)
        .iter()
        .map(|l| l["line"].as_u64().unwrap() as usize - 1)
        .collect();
    (emissions(&read(&out)), late_lines)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_streams_give_the_models_results(
        window in window(),
        bound in 0i64..20,
        lateness in prop_oneof![Just(0i64), 0i64..40],
        events in events(),
        shards in 1usize..4,
        batch_size in 1usize..50,
    ) {
        let spec = ModelSpec { window, bound, lateness };
        let expected = run_model(&spec, &events);
        let (got, late) = run_in_process(&spec, &events, shards, batch_size, false);
        prop_assert_eq!(got, expected.emissions);
        prop_assert_eq!(late, expected.late);
    }

    #[test]
    fn the_native_baseline_agrees_with_the_model(
        window in window(),
        bound in 0i64..20,
        events in events(),
    ) {
        let spec = ModelSpec { window, bound, lateness: 10 };
        let expected = run_model(&spec, &events);
        let (got, late) = run_in_process(&spec, &events, 2, 16, true);
        prop_assert_eq!(got, expected.emissions);
        prop_assert_eq!(late, expected.late);
    }
}
