//! Fuzzes the pipeline spec parser (TOML and JSON): any text is a checked spec or an error
//! with a message, never a panic.
#![no_main]

#[path = "../../host/src/spec.rs"]
#[allow(dead_code)]
mod spec;
#[path = "../../host/src/time.rs"]
#[allow(dead_code)]
mod time;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for json in [false, true] {
        match spec::PipelineSpec::parse(text, json, std::path::Path::new("/base")) {
            Ok(spec) => assert!(spec.batch_size > 0 && !spec.name.is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
});
