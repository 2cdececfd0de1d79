//! Fuzzes the event decoder: any bytes become an event or a dead letter with a reason, never a
//! panic; a decoded event has a non-empty key and a timestamp in range.
#![no_main]

#[path = "../../host/src/event/mod.rs"]
#[allow(dead_code)]
mod event;
#[path = "../../host/src/field_name.rs"]
#[allow(dead_code)]
mod field_name;
#[path = "../../host/src/hashing.rs"]
#[allow(dead_code)]
mod hashing;
#[path = "../../host/src/prefetch.rs"]
#[allow(dead_code)]
mod prefetch;
#[path = "../../host/src/time.rs"]
#[allow(dead_code)]
mod time;
#[path = "../../host/src/value.rs"]
#[allow(dead_code)]
mod value;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = event::Decoder::new("key", "ts");
    match decoder.decode(1, data) {
        Ok(event) => {
            assert!(!event.key.is_empty());
            assert!(event.timestamp.abs() <= time::MAX_TIMESTAMP);
            let _ = event.to_json().to_string();
        }
        Err(dead) => assert!(!dead.reason.is_empty()),
    }
});
