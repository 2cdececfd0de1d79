//! Summarises each session of a key: its event count, first and last event time.
//!
//! Build the component and run the sample pipeline (session windows, gap 30 s) from the
//! workspace root:
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 -p weir-example-session-summary
//! target/debug/weir run examples/session-summary/pipeline.toml
//! ```
//!
//! The component is `target/wasm32-wasip2/release/weir_example_session_summary.wasm`. Each
//! session's output has `events`, `first` and `last` (event times, ms since the epoch) and
//! `duration_ms` (`last - first`), all ints. When sessions merge, their summaries combine.

use weir_sdk::{Aggregate, Events, Output, State, Window};

/// The session-summary aggregate.
pub struct SessionSummary;

impl Aggregate for SessionSummary {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let times = batch.rows.iter().map(|event| event.timestamp);
        combine(state, batch.len() as i64, times.clone().min(), times.max());
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        let events = source.get_int("events").unwrap_or(0);
        combine(
            target,
            events,
            source.get_int("first"),
            source.get_int("last"),
        );
        Ok(())
    }

    fn finish(state: &State, window: Window) -> Result<Output, String> {
        let first = state.get_int("first").unwrap_or(window.start);
        let last = state.get_int("last").unwrap_or(first);
        Ok(Output::new()
            .with("events", state.get_int("events").unwrap_or(0))
            .with("first", first)
            .with("last", last)
            .with("duration_ms", last - first))
    }
}

/// Adds `events` events spanning `first..=last` to the summary in `state`.
fn combine(state: &State, events: i64, first: Option<i64>, last: Option<i64>) {
    state.add_int("events", events);
    if let Some(first) = first.into_iter().chain(state.get_int("first")).min() {
        state.put("first", first);
    }
    if let Some(last) = last.into_iter().chain(state.get_int("last")).max() {
        state.put("last", last);
    }
}

weir_sdk::export_aggregate!(SessionSummary);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    fn batch(times: &[i64]) -> Events {
        times.iter().fold(Events::new(["page"]), |batch, &time| {
            batch.with_row(time, ["/"])
        })
    }

    #[test]
    fn summarises_out_of_order_events() {
        let memory = MemoryState::new("v1");
        SessionSummary::add(&memory.state(), &batch(&[5_000, 2_000, 9_000])).unwrap();
        SessionSummary::add(&memory.state(), &batch(&[1_000])).unwrap();
        let output = SessionSummary::finish(
            &memory.state(),
            Window {
                start: 1_000,
                end: 39_000,
            },
        );
        let expected = Output::new()
            .with("events", 4)
            .with("first", 1_000)
            .with("last", 9_000)
            .with("duration_ms", 8_000);
        assert_eq!(output.unwrap(), expected);
    }

    #[test]
    fn merging_sessions_sums_counts_and_widens_the_span() {
        let (target, source, empty) = (
            MemoryState::new("v1"),
            MemoryState::new("v1"),
            MemoryState::new("v1"),
        );
        SessionSummary::add(&target.state(), &batch(&[50_000, 60_000])).unwrap();
        SessionSummary::add(&source.state(), &batch(&[20_000, 30_000])).unwrap();
        SessionSummary::merge(&target.state(), &source.state()).unwrap();
        SessionSummary::merge(&target.state(), &empty.state()).unwrap();
        let output = SessionSummary::finish(
            &target.state(),
            Window {
                start: 20_000,
                end: 90_000,
            },
        );
        let expected = Output::new()
            .with("events", 4)
            .with("first", 20_000)
            .with("last", 60_000)
            .with("duration_ms", 40_000);
        assert_eq!(output.unwrap(), expected);
    }
}
