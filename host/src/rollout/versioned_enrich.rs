//! [`VersionedEnrich`]: one enrichment operator of a shard during (or outside) a rollout. Keys
//! are split between the live and the candidate version by the same sticky buckets as an
//! aggregate's. Enrichment state is per key and typed, so the version that serves a key reads
//! what the other wrote. In shadow mode the candidate serves nothing: each call runs it too, on
//! a copy of the key's state as it was before the call (its writes are dropped), and its output
//! is compared with the live version's; the comparison goes to the shadow log.
//!
//! Depends on `event`, `operator` and `value`.

use std::io::Write;
use std::sync::Arc;

use super::versioned::Slot;
use super::{CounterBook, Routing, ShadowLog};
use crate::event::Event;
use crate::operator::{EnrichOperator, Enriched, OperatorError, Result, Scope};
use crate::value::fields_to_json;

/// An enrichment operator's versions in one shard.
pub struct VersionedEnrich {
    /// The operator's name (its counters are kept as `name@version`).
    name: String,
    live: Slot<dyn EnrichOperator>,
    candidate: Option<Slot<dyn EnrichOperator>>,
    routing: Routing,
    shadow_log: Option<ShadowLog>,
}

impl std::fmt::Debug for VersionedEnrich {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionedEnrich")
            .field("name", &self.name)
            .field("routing", &self.routing)
            .finish()
    }
}

/// The key an enricher version's counters are kept under: its versions may share names with
/// the aggregate's.
pub fn counter_key(operator: &str, version: &str) -> String {
    format!("{operator}@{version}")
}

fn slot(
    name: &str,
    version: &str,
    operator: Box<dyn EnrichOperator>,
    counters: &CounterBook,
) -> Slot<dyn EnrichOperator> {
    Slot {
        version: version.into(),
        operator,
        counters: counters.of(&counter_key(name, version)),
        calls: 0,
    }
}

impl VersionedEnrich {
    /// Operator `name`, only `live` (version `version`) serving.
    pub fn new(
        name: &str,
        version: &str,
        live: Box<dyn EnrichOperator>,
        counters: &CounterBook,
    ) -> Self {
        VersionedEnrich {
            name: name.to_owned(),
            live: slot(name, version, live, counters),
            candidate: None,
            routing: Routing {
                operator: Some(name.to_owned()),
                ..Routing::single(version)
            },
            shadow_log: None,
        }
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The routing in effect.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// The version that serves `key` now: the candidate's for the keys routed to it (not in
    /// shadow, where it serves nothing), else the live one's.
    pub fn serving(&self, key: &str) -> &Arc<str> {
        match &self.candidate {
            Some(candidate) if !self.routing.shadow && self.routing.to_candidate(key) => {
                &candidate.version
            }
            _ => &self.live.version,
        }
    }

    /// Applies a new routing. `candidate` is an instance of the version the routing names that
    /// this shard does not run yet (the candidate, or a promoted version).
    pub fn route(
        &mut self,
        routing: Routing,
        candidate: Option<Box<dyn EnrichOperator>>,
        counters: &CounterBook,
        shadow_log: Option<ShadowLog>,
    ) {
        let mut candidate = candidate;
        if *self.live.version != *routing.live {
            // A promotion: the candidate (or the code sent with the change) becomes live.
            match self.candidate.take() {
                Some(promoted) if *promoted.version == *routing.live => self.live = promoted,
                other => {
                    self.candidate = other;
                    if let Some(operator) = candidate.take() {
                        self.live = slot(&self.name, &routing.live, operator, counters);
                    }
                }
            }
        }
        match (&routing.candidate, candidate) {
            (Some(version), Some(operator)) => {
                self.candidate = Some(slot(&self.name, version, operator, counters));
            }
            (None, _) => self.candidate = None,
            (Some(_), None) => {}
        }
        self.shadow_log = shadow_log;
        self.routing = routing;
    }

    /// The shadow's run of a call: the candidate on a copy of the state before the call.
    fn shadow_run(&mut self, before: &Scope, events: &[&Event], live: &[Enriched]) {
        let Some(shadow) = self.candidate.as_mut().filter(|_| self.routing.shadow) else {
            return;
        };
        let mut copy = Scope {
            key: before.key.clone(),
            state: before.state.clone(),
        };
        let started = shadow.clock();
        let outcome = shadow.operator.process(&mut copy, events);
        let candidate = shadow.count(events.len(), started, outcome);
        use std::sync::atomic::Ordering::Relaxed;
        shadow.counters.shadow_compared.fetch_add(1, Relaxed);
        let same = candidate.as_ref().is_ok_and(|c| c == live);
        if !same {
            shadow.counters.shadow_differed.fetch_add(1, Relaxed);
        }
        let Some(log) = &self.shadow_log else {
            return;
        };
        let outputs = |enriched: &[Enriched]| -> Vec<serde_json::Value> {
            (enriched.iter())
                .map(|e| {
                    let fields = (e.fields.iter())
                        .map(|(name, value)| (name.to_string(), value.clone()))
                        .collect();
                    serde_json::json!({"timestamp": e.timestamp, "value": fields_to_json(&fields)})
                })
                .collect()
        };
        let record = serde_json::json!({
            "operator": self.name,
            "key": &*before.key,
            "live": outputs(live),
            "candidate": match &candidate {
                Ok(c) => outputs(c).into(),
                Err(e) => serde_json::Value::from(e.to_string()),
            },
            "candidate_version": &*shadow.version,
            "same": same,
        });
        let mut log = log.lock().expect("shadow log lock");
        let _ = writeln!(log, "{record}");
        let _ = log.flush();
    }
}

impl EnrichOperator for VersionedEnrich {
    fn process(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        let before = (self.routing.shadow && self.candidate.is_some()).then(|| Scope {
            key: scope.key.clone(),
            state: scope.state.clone(),
        });
        let slot = match &mut self.candidate {
            Some(candidate) if self.routing.to_candidate(&scope.key) => candidate,
            _ => &mut self.live,
        };
        let started = slot.clock();
        let outcome = slot.operator.process(scope, events);
        let live = slot.count(events.len(), started, outcome)?;
        if let Some(before) = before {
            self.shadow_run(&before, events, &live);
        }
        Ok::<_, OperatorError>(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{EnrichCode, Limits, NativeEnrich, Projection};
    use crate::value::Value;

    /// A native enrichment operator is rolled out as code, as a component is: the candidate
    /// made from its `EnrichCode` serves the keys the routing gives it.
    #[test]
    fn a_native_enricher_rolls_out_as_code_like_a_component() {
        let counters = CounterBook::default();
        let code = |name: &str| {
            let code = NativeEnrich::named(name).expect("a native enricher");
            code.instantiate(Limits::default(), Projection::All)
                .unwrap()
        };
        let mut bids = VersionedEnrich::new("bids", "q0", code("nexmark-q0"), &counters);
        let line = br#"{"auction":1,"bidder":7,"price":1000,"date_time":5}"#;
        let event = (crate::event::Decoder::new("bidder", "date_time"))
            .decode(1, line)
            .unwrap();
        let mut scope = Scope {
            key: "7".into(),
            state: Default::default(),
        };
        let price = |out: Vec<Enriched>| {
            (out[0].fields.iter())
                .find(|(name, _)| name.as_ref() == "price")
                .map(|(_, value)| value.clone())
        };
        let before = bids.process(&mut scope, &[&event]).unwrap();
        assert_eq!(price(before), Some(Value::Int(1000)), "q0 passes the price");
        let routing = Routing {
            live: "q0".into(),
            candidate: Some("q1".into()),
            percent: 100,
            shadow: false,
            operator: Some("bids".into()),
            ..Routing::single("q0")
        };
        bids.route(routing, Some(code("nexmark-q1")), &counters, None);
        let after = bids.process(&mut scope, &[&event]).unwrap();
        assert_eq!(price(after), Some(Value::Int(908)), "q1 gives euros");
        assert!(NativeEnrich::named("no-such-enricher").is_none());
    }
}
