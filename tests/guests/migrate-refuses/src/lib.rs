//! Test fixture: count-sum whose `migrate` refuses a state it cannot convert: one whose `sum`
//! passes 100 (as a version with a narrower type would). A migration dry run over a real
//! savepoint must refuse it with such a state as its counterexample.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// Count-sum that cannot migrate a sum over 100.
pub struct MigrateRefuses;

impl Aggregate for MigrateRefuses {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        count_sum::add(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(count_sum::finish(state))
    }

    fn migrate(state: &State, from_version: &str) -> Result<(), String> {
        match state.get("sum") {
            Some(Value::Int(sum)) if sum > 100 => Err(format!(
                "cannot migrate a sum of {sum} from {from_version}: this version keeps sums up to 100"
            )),
            _ => Ok(()),
        }
    }
}

weir_sdk::export_aggregate!(MigrateRefuses);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn a_sum_over_100_is_not_migrated() {
        let memory = MemoryState::new("u1");
        memory.state().put("sum", 150);
        assert!(MigrateRefuses::migrate(&memory.state(), "1.0.0").is_err());
        memory.state().put("sum", 50);
        assert!(MigrateRefuses::migrate(&memory.state(), "1.0.0").is_ok());
    }
}
