//! Enrichment operators: reference data joined per key, de-duplication state, and the state
//! TTL in event time, identical for any batch boundaries.

use crate::support::{Pipeline, component, workspace};

fn body(ttl: Option<&str>) -> String {
    format!(
        "[event]\nkey = \"customer_id\"\ntimestamp = \"ts\"\n\
         [[operators]]\nname = \"enrich\"\nversion = \"1.0.0\"\nkind = \"enrich\"\nmodule = {:?}\n\
         reference = {{ path = {:?}, key = \"customer_id\" }}\n{}",
        component("enrich-customers").display().to_string(),
        workspace()
            .join("examples/enrich-customers/customers.jsonl")
            .display()
            .to_string(),
        ttl.map(|t| format!("state_ttl = \"{t}\"\n"))
            .unwrap_or_default()
    )
}

const ORDERS: &str = "{\"customer_id\":\"C001\",\"order_id\":\"O1\",\"ts\":0}\n\
                      {\"customer_id\":\"C001\",\"order_id\":\"O1\",\"ts\":10}\n\
                      {\"customer_id\":\"C002\",\"order_id\":\"O2\",\"ts\":50000}\n\
                      {\"customer_id\":\"C001\",\"order_id\":\"O1\",\"ts\":60000}\n\
                      {\"customer_id\":\"C999\",\"order_id\":\"O3\",\"ts\":60001}\n";

fn orders(run: &crate::support::Run) -> Vec<(String, String, String)> {
    run.results
        .iter()
        .map(|r| {
            let v = &r["value"];
            (
                r["key"].as_str().unwrap().into(),
                v["order_id"].as_str().unwrap().into(),
                v["customer_name"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn enrichment_joins_reference_data_and_drops_duplicates() {
    let run = Pipeline::new(&body(None), ORDERS).run(&[]);
    assert!(run.success, "{}", run.stderr);
    let got = orders(&run);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].0, "C001");
    assert_ne!(got[0].2, "unknown", "C001 is in the reference table");
    assert_eq!(got[2], ("C999".into(), "O3".into(), "unknown".into()));
    assert!(run.results.iter().all(|r| r["kind"] == "event"));
    assert_eq!(run.results[0]["id"], "test/enrich/e0.0");
}

#[test]
fn state_ttl_forgets_old_state_but_keeps_reference_data_for_any_batching() {
    let pipeline = Pipeline::new(&body(Some("1s")), ORDERS);
    for batch in ["1", "2", "100"] {
        let run = pipeline.run(&["--batch-size", batch]);
        assert!(run.success, "{}", run.stderr);
        let got = orders(&run);
        // The repeat at ts 10 is a duplicate; the one at ts 60000 comes after the watermark
        // passed 10 + 1 s, so the de-duplication state had expired.
        let c001: Vec<_> = got.iter().filter(|o| o.0 == "C001").collect();
        assert_eq!(c001.len(), 2, "batch {batch}: {got:?}");
        assert_eq!(c001[0].2, c001[1].2, "the reference data survives the TTL");
    }
}

#[test]
fn state_ttl_is_refused_for_aggregates() {
    let body = crate::support::count_sum_body(&crate::reference::ModelSpec {
        window: crate::reference::WindowKind::Tumbling { size: 10 },
        bound: 0,
        lateness: 0,
    }) + "state_ttl = \"1s\"\n";
    let run = Pipeline::new(&body, "").run(&[]);
    assert!(!run.success);
    assert!(
        run.stderr
            .contains("`state_ttl` is for enrichment operators"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_refused_enrichment_output_keeps_none_of_the_calls_state_writes() {
    // The guest numbers each key's events in its state and names an origin outside the batch
    // for the `bad` event. The host refuses that call, retries its events one by one, and only
    // the bad one becomes a dead letter: were the refused call's writes kept, `n` would skip.
    let body = format!(
        "[event]\nkey = \"k\"\ntimestamp = \"ts\"\n\
         [[operators]]\nname = \"numbering\"\nversion = \"1.0.0\"\nkind = \"enrich\"\nmodule = {:?}\n",
        crate::support::guest("enrich-bad-origin")
            .display()
            .to_string()
    );
    let input: String = (1..=6)
        .map(|i| {
            let bad = if i == 3 { ",\"bad\":true" } else { "" };
            format!("{{\"k\":\"a\",\"id\":{i},\"ts\":{i}{bad}}}\n")
        })
        .collect();
    let pipeline = Pipeline::new(&body, &input);
    for batch in ["100", "4", "1"] {
        let run = pipeline.run(&["--batch-size", batch]);
        assert!(run.success, "{}", run.stderr);
        let numbered: Vec<(i64, i64)> = (run.results.iter())
            .map(|r| {
                (
                    r["value"]["id"].as_i64().unwrap(),
                    r["value"]["n"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            numbered,
            [(1, 1), (2, 2), (4, 3), (5, 4), (6, 5)],
            "batch {batch}"
        );
        assert_eq!(run.dead_letters.len(), 1, "batch {batch}");
        let reason = run.dead_letters[0]["reason"].as_str().unwrap();
        assert!(reason.contains("names origin"), "{reason}");
    }
}
