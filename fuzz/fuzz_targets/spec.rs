//! Fuzzes the pipeline spec parser (TOML and JSON): any text is a checked spec or an error
//! with a message, never a panic.
#![no_main]

#[path = "../../host/src/spec/mod.rs"]
#[allow(dead_code, unused_imports)] // the re-exports the target does not use
mod spec;
#[path = "../../host/src/time.rs"]
#[allow(dead_code)]
mod time;
#[path = "../../host/src/names.rs"]
#[allow(dead_code)]
mod names;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for json in [false, true] {
        match spec::PipelineSpec::parse(text, json, std::path::Path::new("/base")) {
            Ok(spec) => assert!(spec.batch_size > 0 && !spec.name.is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    // A spec sent to `weir serve`: whatever it says, every path it yields stays in its directory
    // (judged here on the path's words, independently of `names`).
    let dir = std::path::Path::new("/data/pipelines/p");
    if let Ok(spec) = spec::PipelineSpec::parse_served(text, dir, spec::Served::New) {
        let inside = |path: &std::path::Path| {
            path.starts_with(dir)
                && path.components().all(|c| {
                    matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_))
                })
        };
        for sink in [&spec.sinks.results, &spec.sinks.late, &spec.sinks.dead_letters] {
            if let spec::Sink::File(path) = sink {
                assert!(inside(path), "{} escapes", path.display());
            }
        }
        match &spec.source {
            spec::SourceSpec::Http(Some(path)) => assert!(inside(path)),
            other => panic!("a served spec reads {other:?}"),
        }
        match &spec.state {
            spec::StateSpec::Redb(path) => assert!(inside(path), "{} escapes", path.display()),
            other => panic!("a served spec keeps its state in {other:?}"),
        }
    }
});
