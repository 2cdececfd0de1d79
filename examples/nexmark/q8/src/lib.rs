//! Nexmark Q8, new users: the persons who opened an auction within the same 10-second window
//! in which they registered. A window join of persons (keyed by `id`) with auctions (keyed by
//! `seller`): the pipeline's `[join]` puts both sides of a person and window into one call,
//! each event with `side` = `left` (the person) or `right` (an auction). A window with only one
//! side gives no result (an empty output). Native twin: `native = "nexmark-q8"`.

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The new-users join.
pub struct NewUsers;

impl Aggregate for NewUsers {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        for (side, name) in batch.values("side").zip(batch.values("name")) {
            match side.and_then(Value::as_text) {
                Some("left") => {
                    let name = name
                        .and_then(Value::as_text)
                        .ok_or("a person without a name")?;
                    state.put("name", name);
                }
                Some("right") => {
                    state.add_int("auctions", 1);
                }
                _ => return Err("an event on neither side of the join".into()),
            }
        }
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        if let Some(name) = source.get_text("name") {
            target.put("name", name);
        }
        target.add_int("auctions", source.get_int("auctions").unwrap_or(0));
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(match (state.get_text("name"), state.get_int("auctions")) {
            (Some(name), Some(auctions)) if auctions > 0 => {
                Output::new().with("name", name).with("auctions", auctions)
            }
            _ => Output::new(),
        })
    }
}

weir_sdk::export_aggregate!(NewUsers);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    const WINDOW: Window = Window {
        start: 0,
        end: 10_000,
    };

    #[test]
    fn a_person_with_an_auction_in_the_window_is_a_result_and_one_side_alone_is_none() {
        let both = MemoryState::new("1000");
        let person = Events::new(["side", "name"]).with_row(1, ["left", "Kate Smith"]);
        let auction =
            Events::new(["side", "seller"]).with_row(2, [Value::from("right"), 1000.into()]);
        NewUsers::add(&both.state(), &person).unwrap();
        NewUsers::add(&both.state(), &auction).unwrap();
        let expected = Output::new().with("name", "Kate Smith").with("auctions", 1);
        assert_eq!(NewUsers::finish(&both.state(), WINDOW).unwrap(), expected);
        let alone = MemoryState::new("1001");
        NewUsers::add(&alone.state(), &auction).unwrap();
        assert_eq!(
            NewUsers::finish(&alone.state(), WINDOW).unwrap(),
            Output::new()
        );
    }
}
