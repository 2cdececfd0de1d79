//! How `weir bench` prints what it measured: one line per operator with events per second,
//! CPU per event and the ratios to native, and the medians and ranges of several runs. Uses the
//! library's `bench` and `pipeline`.

/// One operator's figures in one run of the count-sum benchmark.
pub(crate) struct Measured {
    pub(crate) label: String,
    /// Events per second.
    pub(crate) rate: f64,
    /// Its shards' CPU time per event, in nanoseconds, where the platform tells it: the
    /// operator's cost even when the router, not the shard, limits the throughput.
    pub(crate) shard_ns: Option<f64>,
    /// Its router's CPU time per event (reading, decoding, routing), likewise.
    pub(crate) router_ns: Option<f64>,
}

impl Measured {
    pub(crate) fn of(label: String, summary: &weir::pipeline::Summary) -> Measured {
        let per_event =
            |cpu: std::time::Duration| cpu.as_nanos() as f64 / (summary.events_in as f64).max(1.0);
        Measured {
            label,
            rate: weir::bench::BenchReport::rate(summary),
            shard_ns: summary.shards_cpu.map(per_event),
            router_ns: summary.router_cpu.map(per_event),
        }
    }

    /// `CPU per event: shards .. ns, router .. ns` where the platform tells them: which of
    /// the two threads limits the run.
    pub(crate) fn cpu(&self) -> Option<String> {
        let (shard, router) = self.shard_ns.zip(self.router_ns)?;
        Some(format!(
            "CPU per event: shards {shard:.0} ns, router {router:.0} ns"
        ))
    }
}

/// Prints one run of the count-sum benchmark, checks that every operator gave the native
/// results, and returns each operator's figures (the native one last).
pub(crate) fn print_count_sum(report: &weir::bench::BenchReport) -> anyhow::Result<Vec<Measured>> {
    let mut rows = vec![("rust wasm".to_owned(), &report.wasm)];
    rows.extend(
        report
            .others
            .iter()
            .map(|(language, summary)| (format!("{language} wasm"), summary)),
    );
    rows.push(("native".to_owned(), &report.native));
    let measured: Vec<Measured> = (rows.iter())
        .map(|(label, summary)| Measured::of(label.clone(), summary))
        .collect();
    let native = native_of(&measured);
    for ((_, summary), this) in rows.iter().zip(&measured) {
        println!(
            "{:<12} {:>12.0} events/s  ({:.2} s, {} results, {} dead letters, {} traps, {:.2} x native{})",
            this.label,
            this.rate,
            summary.elapsed.as_secs_f64(),
            summary.results_out,
            summary.dead_letters,
            summary.traps,
            this.rate / native.rate,
            this.cpu()
                .map_or_else(String::new, |cpu| format!(", {cpu}")),
        );
    }
    println!(
        "wasm/native throughput ratio: {:.2}",
        measured[0].rate / native.rate
    );
    if let Some(ratio) = cost_ratio(&measured[0], native) {
        println!("wasm/native by shard CPU per event (native's cost over wasm's): {ratio:.2}");
    }
    for (label, summary) in &rows {
        anyhow::ensure!(
            summary.results_out == report.native.results_out && summary.dead_letters == 0,
            "{label} and native disagree on the number of results, or {label} had dead letters"
        );
    }
    Ok(measured)
}

/// The native operator's figures in a run's, which [`print_count_sum`] puts last.
pub(crate) fn native_of(run: &[Measured]) -> &Measured {
    run.last().expect("a run has the native operator, last")
}

/// Native's shard CPU per event over `this` one's: 1 when they cost the same, 0.5 when `this`
/// costs twice as much.
pub(crate) fn cost_ratio(this: &Measured, native: &Measured) -> Option<f64> {
    Some(native.shard_ns? / this.shard_ns?).filter(|ratio| ratio.is_finite())
}

/// Prints, for each operator of several runs, the median events/s and its ratio to the native
/// run of the same run (median, lowest, highest), and the same for shard CPU per event.
pub(crate) fn print_medians(runs: &[Vec<Measured>]) {
    println!("medians of {} runs (ratios within each run):", runs.len());
    let natives: Vec<&Measured> = runs.iter().map(|run| native_of(run)).collect();
    for (i, first) in runs[0].iter().enumerate() {
        let this: Vec<&Measured> = runs.iter().map(|run| &run[i]).collect();
        let ratios: Vec<f64> = (this.iter().zip(&natives))
            .map(|(this, native)| this.rate / native.rate)
            .collect();
        let (low, high) = range(&ratios);
        print!(
            "{:<12} {:>12.0} events/s  {:.2} x native ({low:.2}-{high:.2})",
            first.label,
            median(this.iter().map(|m| m.rate).collect()),
            median(ratios),
        );
        let costs: Option<Vec<f64>> = (this.iter().zip(&natives))
            .map(|(this, native)| cost_ratio(this, native))
            .collect();
        let nanos: Option<Vec<f64>> = this.iter().map(|m| m.shard_ns).collect();
        if let (Some(costs), Some(nanos)) = (costs, nanos) {
            let (low, high) = range(&costs);
            print!(
                "; shard CPU {:.0} ns/event, native's over this: {:.2} ({low:.2}-{high:.2})",
                median(nanos),
                median(costs),
            );
        }
        println!();
    }
}

/// The lowest and highest of `values` (positive figures: rates, ratios, shares).
pub(crate) fn range(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    (low, values.iter().copied().fold(0.0, f64::max))
}

/// The 99th percentile of `values` (the nearest rank: the smallest value at or above 99 % of
/// them); none of no values.
pub(crate) fn p99(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * 99).div_ceil(100);
    values.get(rank.checked_sub(1)?).copied()
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() % 2 {
        0 => (values[middle - 1] + values[middle]) / 2.0,
        _ => values[middle],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_ranges_and_percentiles_of_bench_figures() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(range(&[0.7, 0.9, 0.8]), (0.7, 0.9));
        assert_eq!(p99(vec![]), None);
        assert_eq!(p99(vec![5.0]), Some(5.0));
        // Of 100 values 1..=100 the 99th; of 101, the 100th (rank 99.99 rounds up).
        assert_eq!(p99((1..=100).rev().map(f64::from).collect()), Some(99.0));
        assert_eq!(p99((1..=101).map(f64::from).collect()), Some(100.0));
        assert_eq!(p99((1..=25).map(f64::from).collect()), Some(25.0));
    }

    #[test]
    fn the_cost_ratio_is_native_over_this_and_none_without_a_figure() {
        let measured = |shard_ns| Measured {
            label: "x".into(),
            rate: 1.0,
            shard_ns,
            router_ns: None,
        };
        let native = measured(Some(100.0));
        assert_eq!(cost_ratio(&measured(Some(200.0)), &native), Some(0.5));
        assert_eq!(cost_ratio(&measured(None), &native), None);
        assert_eq!(
            cost_ratio(&measured(Some(0.0)), &native),
            None,
            "not finite"
        );
        let run = [measured(Some(1.0)), native];
        assert_eq!(native_of(&run).shard_ns, Some(100.0));
    }
}
