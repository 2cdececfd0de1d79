//! `weir bench`: its options, and each mode (the count-sum, checkpoints, recovery, Nexmark,
//! NATS, served ingest) run and reported. Uses the library's `bench` and `spec`.

use std::path::PathBuf;

use super::{
    Measured, NatsAuthArgs, ServeShape, bench_serve, median, p99, print_count_sum, print_medians,
    range,
};

/// The options of `weir bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Another benchmark than the count-sum.
    #[command(subcommand)]
    suite: Option<BenchSuite>,
    /// Events to generate.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Shards.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Events per batch.
    #[arg(long, default_value_t = weir::spec::DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Measure checkpoint cost instead: throughput with checkpoints every second versus
    /// none, and checkpoint duration as state grows (10 thousand to 1 million keys; add
    /// --large for 10 million).
    #[arg(long)]
    checkpoints: bool,
    /// Measure recovery instead: a count-sum over --keys keys with open windows is stopped
    /// after --events events (checkpointed), and the restart on its data directory is timed.
    #[arg(long)]
    recovery: bool,
    /// With --checkpoints: also measure a state of 10 million keys (needs about 2 GB of disk).
    #[arg(long, requires = "checkpoints")]
    large: bool,
    /// Read the same generated events from a JSON Lines file (written first to a temporary
    /// directory, about 45 bytes per event), so that decoding is measured too.
    #[arg(long, conflicts_with_all = ["checkpoints", "recovery"])]
    jsonl: bool,
    /// The count-sum component.
    #[arg(
        long,
        default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
    )]
    module: PathBuf,
    /// The Python count-sum (`make polyglot` builds it); skipped if absent.
    #[arg(
        long,
        default_value = "target/weir-components/tumbling-count-sum-python.wasm"
    )]
    python: PathBuf,
    /// The JavaScript count-sum (`make polyglot` builds it); skipped if absent.
    #[arg(
        long,
        default_value = "target/weir-components/tumbling-count-sum-js.wasm"
    )]
    js: PathBuf,
    /// Runs of the count-sum (each operator once per run, in turn; with --checkpoints, the run
    /// with checkpoints and the one without) or of `nexmark` (every query, Wasm then native, per
    /// run); with more than one, the medians and ranges follow. This machine's speed drifts:
    /// compare medians, not runs. Not with --recovery or `nats`, which run once.
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

pub(crate) fn bench_checkpoints(
    options: &weir::bench::BenchOptions,
    large: bool,
    runs: u32,
) -> anyhow::Result<()> {
    let rate = weir::bench::BenchReport::rate;
    println!(
        "checkpoint overhead: tumbling count+sum (Wasm), redb state, {} events, {} keys, {} shard(s)",
        options.events, options.keys, options.shards
    );
    let mut kept = Vec::new();
    let mut durations: Vec<f64> = Vec::new();
    for run in 1..=runs {
        if runs > 1 {
            println!("run {run} of {runs}:");
        }
        let (with, without) = weir::bench::checkpoint_throughput(options, 1_000)?;
        let these: Vec<f64> = with.checkpoints.iter().map(|c| c.duration_ms).collect();
        let mean = these.iter().sum::<f64>() / these.len().max(1) as f64;
        let cpu = |summary| Measured::of(String::new(), summary).cpu();
        println!(
            "no checkpoints        {:>12.0} events/s{}",
            rate(&without),
            cpu(&without).map_or_else(String::new, |cpu| format!("  ({cpu})"))
        );
        println!(
            "checkpoints every 1 s {:>12.0} events/s  ({} checkpoints, mean {:.1} ms, max {:.1} ms{})",
            rate(&with),
            these.len(),
            mean,
            these.iter().copied().fold(0.0, f64::max),
            cpu(&with).map_or_else(String::new, |cpu| format!(", {cpu}")),
        );
        kept.push(100.0 * rate(&with) / rate(&without));
        println!("throughput kept: {:.1} %", kept[kept.len() - 1]);
        durations.extend(these);
    }
    if runs > 1 {
        let (low, high) = range(&kept);
        let count = durations.len();
        let checkpoints = match p99(durations) {
            Some(p99) => format!("{count} checkpoints, p99 {p99:.1} ms"),
            None => "no checkpoint was taken".to_owned(),
        };
        println!(
            "median of {runs} runs: throughput kept {:.1} % ({low:.1}-{high:.1}); {checkpoints}",
            median(kept),
        );
    }
    let mut sizes = vec![10_000, 100_000, 1_000_000];
    if large {
        sizes.push(10_000_000);
    }
    println!("checkpoint of 10,000 changed keys as the state grows (median of 5):");
    println!(
        "{:>12} {:>14} {:>12}",
        "state keys", "hand-over ms", "commit ms"
    );
    for row in weir::bench::checkpoint_cost(&sizes, 10_000)? {
        println!(
            "{:>12} {:>14.1} {:>12.1}",
            row.state_keys,
            row.handover.as_secs_f64() * 1e3,
            row.commit.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// The benchmarks besides the count-sum.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum BenchSuite {
    /// Nexmark queries over the Nexmark source, each with its example component and natively:
    /// events/s on one shard and the ratio.
    Nexmark {
        /// The queries (q0, q1, q2, q5, q7, q7-global, q8, q11); all of them if none is given.
        #[arg(long = "query")]
        queries: Vec<String>,
        /// Events to generate (persons, auctions and bids; most queries read only the bids).
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Shards (1 measures per core).
        #[arg(long, default_value_t = 1)]
        shards: usize,
        /// Events per batch.
        #[arg(long, default_value_t = weir::spec::DEFAULT_BATCH_SIZE)]
        batch_size: usize,
        /// Where the query components are (`make components` builds them).
        #[arg(long, default_value = "target/wasm32-wasip2/release")]
        components: PathBuf,
    },
    /// Served HTTP ingest end to end: a `weir serve` of this binary on loopback, clients
    /// posting JSON Lines batches at once to a count-sum pipeline; events/s accepted (durable)
    /// and read, and a batch's acknowledgement latency.
    Serve {
        /// Events.
        #[arg(long, default_value_t = 5_000_000)]
        events: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000)]
        keys: u64,
        /// Events per request.
        #[arg(long, default_value_t = 10_000)]
        batch: usize,
        /// Clients posting at once.
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// The count-sum component.
        #[arg(
            long,
            default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
        )]
        module: PathBuf,
    },
    /// The count-sum reading a Kafka topic and producing its results to another in transactions
    /// (a checkpoint a second), against the same events from a file: events/s and the Kafka
    /// path's cost per event. At --brokers, or in librdkafka's mock cluster started in-process.
    Kafka {
        /// The brokers (host:port,...); default: a mock cluster in this process.
        #[arg(long)]
        brokers: Option<String>,
        /// Events.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000)]
        keys: u64,
        /// The events topic's partitions (the mock cluster keeps at most 5 MiB of each, about
        /// 80,000 events: more events need more partitions or a real broker).
        #[arg(long, default_value_t = 16)]
        partitions: i32,
        /// The count-sum component.
        #[arg(
            long,
            default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
        )]
        module: PathBuf,
    },
    /// The count-sum reading a NATS JetStream stream and publishing its results to one, against
    /// the same events from a file: events/s and the NATS path's cost per event. Needs a
    /// running `nats-server -js`.
    Nats {
        /// How this command's NATS clients authenticate.
        #[command(flatten)]
        auth: NatsAuthArgs,
        /// The server.
        #[arg(long, default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// Events.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000)]
        keys: u64,
        /// The count-sum component.
        #[arg(
            long,
            default_value = "target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm"
        )]
        module: PathBuf,
        /// Also share the pipeline among this many `weir worker` processes (repeat for more
        /// runs, e.g. --workers 1 --workers 3) and time them.
        #[arg(long)]
        workers: Vec<usize>,
        /// Events per NATS message (JSON Lines): a producer that batches pays a message's cost
        /// once per batch.
        #[arg(long, default_value_t = 1)]
        per_message: usize,
        /// With --workers: cut the stream into this many partitions by key, each read by its
        /// slice's worker alone (without: six slices, each reading the whole stream).
        #[arg(long)]
        partitions: Option<usize>,
        /// With --workers: pin worker i to core i (taskset).
        #[arg(long)]
        pin: bool,
        /// With --workers: a global aggregate (one result per minute over every key), its
        /// partials combined on the stage slice.
        #[arg(long)]
        global: bool,
        /// Instead of throughput: how long a SIGKILLed worker's slices wait for another owner,
        /// and a joining worker for its share (two workers, then a third), `--runs` times.
        #[arg(long)]
        takeover: bool,
    },
}

/// `weir bench kafka`.
fn bench_kafka(
    brokers: Option<&str>,
    events: u64,
    keys: u64,
    partitions: i32,
    module: PathBuf,
) -> anyhow::Result<()> {
    // The mock keeps 100,000 records or 5 MiB of a partition, whichever is less; the events'
    // lines are about 55 bytes, so 5 MiB comes first (400,000 events in 4 partitions lost some).
    const MOCK_RECORDS_PER_PARTITION: u64 = 80_000;
    anyhow::ensure!(
        events > 0 && keys > 0 && (1..=256).contains(&partitions),
        "--events and --keys must be at least 1, --partitions 1 to 256"
    );
    anyhow::ensure!(
        brokers.is_some() || events / partitions as u64 <= MOCK_RECORDS_PER_PARTITION,
        "librdkafka's mock cluster keeps at most 5 MiB of a partition (and drops the oldest): \
         with {events} events give at least {} partitions, or --brokers",
        events.div_ceil(MOCK_RECORDS_PER_PARTITION)
    );
    let options = weir::bench::BenchOptions {
        events,
        keys,
        shards: 1,
        module,
        others: Vec::new(),
        batch_size: weir::spec::DEFAULT_BATCH_SIZE,
        jsonl: false,
    };
    println!(
        "tumbling count+sum (Rust Wasm), {events} events, {keys} keys, 1 shard, one process, \
         {partitions} partitions, a checkpoint a second"
    );
    let report = weir::bench::kafka(&options, brokers, partitions)?;
    let rate = weir::bench::BenchReport::rate;
    let (file, kafka) = (rate(&report.file), rate(&report.kafka));
    println!("brokers: {}", report.brokers);
    println!("file source, results discarded      {file:>12.0} events/s");
    println!(
        "Kafka source, results to Kafka      {kafka:>12.0} events/s  ({} results produced)",
        report.kafka.results_out
    );
    println!(
        "Kafka path cost: {:.2} us per event more than the file ({:.2} x the file's rate); producing the events took {:.0} events/s",
        (1.0 / kafka - 1.0 / file) * 1e6,
        kafka / file,
        report.produce_rate
    );
    Ok(())
}

/// `weir bench nats`.
pub(crate) fn bench_nats(
    url: &str,
    events: u64,
    keys: u64,
    module: PathBuf,
    workers: &[usize],
    (per_message, partitions, pin, global): (usize, Option<usize>, bool, bool),
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=10_000).contains(&per_message),
        "--per-message from 1 to 10000"
    );
    anyhow::ensure!(
        events > 0 && keys > 0,
        "--events and --keys must be at least 1"
    );
    let options = weir::bench::BenchOptions {
        events,
        keys,
        shards: 1,
        module: module.clone(),
        others: Vec::new(),
        batch_size: weir::spec::DEFAULT_BATCH_SIZE,
        jsonl: false,
    };
    println!(
        "tumbling count+sum (Rust Wasm), {events} events, {keys} keys, 1 shard, one process, \
         {per_message} event(s) per NATS message"
    );
    let report = weir::bench::nats(&options, url, per_message)?;
    let rate = weir::bench::BenchReport::rate;
    let (file, nats) = (rate(&report.file), rate(&report.nats));
    println!("file source, results discarded    {file:>12.0} events/s");
    println!(
        "NATS source, results to NATS      {nats:>12.0} events/s  ({} results published)",
        report.nats.results_out
    );
    println!(
        "NATS path cost: {:.2} us per event more than the file ({:.2} x the file's rate); publishing the events took {:.0} events/s",
        (1.0 / nats - 1.0 / file) * 1e6,
        nats / file,
        report.publish_rate
    );
    // The router's and the shards' CPU (not the collector's or the client's threads): what
    // the workers' figure below compares with.
    let cpu = |run: &weir::pipeline::Summary| {
        let spent = run.router_cpu? + run.shards_cpu?;
        Some(spent.as_secs_f64() / (run.events_in.max(1) as f64 / 1e6))
    };
    if let (Some(file), Some(nats)) = (cpu(&report.file), cpu(&report.nats)) {
        println!(
            "CPU per million events, router and shard: file {file:.2} s, NATS {nats:.2} s ({:.2} x)",
            nats / file
        );
    }
    for &count in workers {
        anyhow::ensure!((1..=16).contains(&count), "--workers from 1 to 16");
        let shape = weir::bench::ClusterShape {
            workers: count,
            partitions,
            per_message,
            pin,
            global,
        };
        let run = weir::bench::cluster(url, &module, (events, keys), shape)?;
        let millions = events as f64 / 1e6;
        println!(
            "shared by {count} worker process(es), {}{}{} {:>8.0} events/s  ({} results, {:.2} s from the workers' start; CPU per million events: workers {:.2} s, nats-server {:.2} s)",
            partitions.map_or("6 slices reading all".into(), |p| format!("{p} partitions")),
            if pin { ", pinned" } else { "" },
            if global { ", global aggregate" } else { "" },
            run.rate(),
            run.results,
            run.elapsed.as_secs_f64(),
            run.workers_cpu.as_secs_f64() / millions,
            run.nats_cpu.as_secs_f64() / millions,
        );
    }
    Ok(())
}

/// `weir bench nats --takeover`.
fn bench_takeover(url: &str, module: &std::path::Path, runs: u32) -> anyhow::Result<()> {
    println!(
        "two workers sharing a count-sum in 6 slices: one SIGKILLed, then a third started; owners read every 50 ms"
    );
    let (mut takeovers, mut joins) = (Vec::new(), Vec::new());
    for run in 1..=runs.max(1) {
        let report = weir::bench::takeover(url, module)?;
        println!(
            "run {run}: slices of the killed worker held again after {:.2} s; the joining \
             worker held its share {:.2} s after it joined",
            report.takeover.as_secs_f64(),
            report.join.as_secs_f64()
        );
        takeovers.push(report.takeover.as_secs_f64());
        joins.push(report.join.as_secs_f64());
    }
    let median = |figures: &mut Vec<f64>| {
        figures.sort_by(f64::total_cmp);
        (
            figures[figures.len() / 2],
            figures[0],
            figures[figures.len() - 1],
        )
    };
    let (takeover, low, high) = median(&mut takeovers);
    println!("takeover after SIGKILL: median {takeover:.2} s ({low:.2}-{high:.2})");
    let (join, low, high) = median(&mut joins);
    println!("share of a joining worker: median {join:.2} s ({low:.2}-{high:.2})");
    Ok(())
}

/// `weir bench nexmark`.
pub(crate) fn bench_nexmark(
    mut queries: Vec<String>,
    events: u64,
    shards: usize,
    batch_size: usize,
    components: &std::path::Path,
    runs: u32,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=weir::spec::MAX_BATCH_SIZE).contains(&batch_size),
        "--batch-size must be 1 to {}",
        weir::spec::MAX_BATCH_SIZE
    );
    anyhow::ensure!(
        (1..=weir::spec::MAX_SHARDS).contains(&shards),
        "--shards must be 1 to {}",
        weir::spec::MAX_SHARDS
    );
    if queries.is_empty() {
        queries = weir::bench::NEXMARK_QUERIES.map(String::from).to_vec();
    }
    println!("nexmark, {events} events generated, {shards} shard(s), batches of {batch_size}");
    // Each query's runs (in the order given, a query given twice twice), Wasm then native
    // (native last, as `print_medians` wants).
    let mut measured: Vec<Vec<Vec<Measured>>> = queries.iter().map(|_| Vec::new()).collect();
    for run in 1..=runs {
        if runs > 1 {
            println!("run {run} of {runs}:");
        }
        let rows = weir::bench::nexmark(&queries, events, shards, batch_size, components)?;
        for (row, runs) in rows.into_iter().zip(&mut measured) {
            let [wasm, native] = [("wasm", &row.wasm), ("native", &row.native)]
                .map(|(label, summary)| Measured::of(label.into(), summary));
            println!(
                "{:<4} wasm {:>10.0} events/s  native {:>10.0} events/s  ({} events read, {} results; wasm/native {:.2})",
                row.query,
                wasm.rate,
                native.rate,
                row.wasm.events_in,
                row.wasm.results_out,
                wasm.rate / native.rate
            );
            anyhow::ensure!(
                row.wasm.results_out == row.native.results_out
                    && row.wasm.dead_letters == 0
                    && row.native.dead_letters == 0,
                "{}: Wasm and native disagree on the number of results, or one had dead letters",
                row.query
            );
            runs.push(vec![wasm, native]);
        }
    }
    if runs > 1 {
        for (query, runs) in queries.iter().zip(&measured) {
            print!("{query}: ");
            print_medians(runs);
        }
    }
    Ok(())
}

/// `weir bench`.
pub(crate) fn bench(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !((args.jsonl || args.checkpoints || args.recovery) && args.suite.is_some()),
        "--jsonl, --checkpoints and --recovery apply to the count-sum benchmark only, not to \
         `weir bench nexmark` or `nats`"
    );
    if let Some(BenchSuite::Nexmark {
        queries,
        events,
        shards,
        batch_size,
        components,
    }) = args.suite
    {
        return bench_nexmark(queries, events, shards, batch_size, &components, args.runs);
    }
    if let Some(BenchSuite::Serve {
        events,
        keys,
        batch,
        clients,
        module,
    }) = &args.suite
    {
        anyhow::ensure!(args.runs == 1, "`weir bench serve` runs once");
        let shape = ServeShape {
            events: *events,
            keys: *keys,
            batch: *batch,
            clients: *clients,
        };
        return bench_serve(&shape, module);
    }
    anyhow::ensure!(
        args.runs == 1
            || !(args.recovery
                || matches!(
                    args.suite,
                    Some(BenchSuite::Nats {
                        takeover: false,
                        ..
                    })
                )),
        "--runs applies to the count-sum, --checkpoints, `weir bench nexmark` and `weir bench nats \
         --takeover`; --recovery and `weir bench nats` run once"
    );
    if let Some(BenchSuite::Kafka {
        brokers,
        events,
        keys,
        partitions,
        module,
    }) = args.suite
    {
        return bench_kafka(brokers.as_deref(), events, keys, partitions, module);
    }
    if let Some(BenchSuite::Nats {
        nats,
        events,
        keys,
        module,
        workers,
        per_message,
        partitions,
        pin,
        global,
        auth,
        takeover,
    }) = args.suite
    {
        auth.install()?;
        if takeover {
            return bench_takeover(&nats, &module, args.runs);
        }
        let shape = (per_message, partitions, pin, global);
        return bench_nats(&nats, events, keys, module, &workers, shape);
    }
    bench_count_sum(args)
}

/// `weir bench` without a suite: the count-sum (in the Wasm component and the other languages'
/// builds that are there), or with `--checkpoints` or `--recovery` those measurements of it.
fn bench_count_sum(args: BenchArgs) -> anyhow::Result<()> {
    let BenchArgs {
        suite: _,
        events,
        keys,
        shards,
        batch_size,
        module,
        python,
        js,
        checkpoints,
        recovery,
        large,
        jsonl,
        runs,
    } = args;
    let mut others = Vec::new();
    for (language, module) in [("python", python), ("js", js)] {
        if module.exists() {
            others.push((language.to_owned(), module));
        } else {
            println!(
                "{language}: {} not built, skipped (`make polyglot` builds it)",
                module.display()
            );
        }
    }
    anyhow::ensure!(
        shards > 0 && keys > 0 && batch_size > 0,
        "--shards, --keys and --batch-size must be at least 1"
    );
    let options = weir::bench::BenchOptions {
        events,
        keys,
        shards,
        module,
        others,
        batch_size,
        jsonl,
    };
    if checkpoints {
        return bench_checkpoints(&options, large, runs);
    }
    if recovery {
        return bench_recovery(&options);
    }
    let from = if jsonl {
        "JSON Lines file"
    } else {
        "generator"
    };
    println!(
        "tumbling count+sum, 1 min windows, {events} events from the {from}, {keys} keys, {shards} shard(s), batches of {batch_size}"
    );
    let mut measured: Vec<Vec<Measured>> = Vec::new();
    for run in 1..=runs {
        if runs > 1 {
            println!("run {run} of {runs}:");
        }
        measured.push(print_count_sum(&weir::bench::run(&options)?)?);
    }
    if runs > 1 {
        print_medians(&measured);
    }
    Ok(())
}

/// `weir bench --recovery`: the restart of a count-sum stopped after `options.events` events.
fn bench_recovery(options: &weir::bench::BenchOptions) -> anyhow::Result<()> {
    let (keys, events) = (options.keys, options.events);
    println!(
        "recovery: count-sum over {keys} keys, one-day windows, redb, stopped after {events} events"
    );
    let report = weir::bench::recovery(options, events)?;
    let mb = report.data_bytes as f64 / 1e6;
    println!(
        "data directory {mb:.0} MB after {} events; restart to running {:.2} s ({:.2} s per 100 MB)",
        report.events,
        report.restart.as_secs_f64(),
        report.restart.as_secs_f64() / mb.max(f64::EPSILON) * 100.0
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench_args(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        let cli =
            <crate::Cli as clap::Parser>::try_parse_from(["weir", "bench"].iter().chain(args))?;
        match cli.command {
            crate::Command::Bench(args) => Ok(args),
            other => panic!("not a bench command: {other:?}"),
        }
    }

    /// Options that would be silently ignored are refused instead; `--runs` may follow
    /// `nexmark`, which honours it.
    #[test]
    fn bench_options_that_do_not_apply_are_refused() {
        assert!(
            bench_args(&["--large"]).is_err(),
            "--large needs --checkpoints"
        );
        assert!(bench_args(&["--checkpoints", "--large"]).is_ok());
        let refused = |args: &[&str]| {
            let error = bench(bench_args(args).unwrap()).unwrap_err().to_string();
            assert!(error.contains("run once"), "{args:?}: {error}");
        };
        refused(&["--runs", "2", "--recovery"]);
        for flag in ["--recovery", "--checkpoints", "--jsonl"] {
            let error = bench(bench_args(&[flag, "nexmark"]).unwrap()).unwrap_err();
            assert!(
                error.to_string().contains("count-sum benchmark only"),
                "{error}"
            );
        }
        refused(&["--runs", "2", "nats"]);
        refused(&["nats", "--runs", "2"]);
        let nexmark = bench_args(&["nexmark", "--runs", "3", "--query", "q7"]).unwrap();
        assert_eq!(nexmark.runs, 3);
    }
}
