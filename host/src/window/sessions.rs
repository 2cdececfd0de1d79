//! Sessions: the rule for what an event does to its key's sessions. A session has no state of
//! its own (it is a live window); this module only decides, from the extents of the key's
//! open sessions, whether the event's own session stands alone, joins one, widens one in place
//! or merges several ([`plan`]). The engine carries the plan out.
//!
//! The engine depends on this module; it depends on `slab` (window ids) and `time` only.

use super::slab::WindowId;
use crate::time::Window;

/// What an event does to its key's sessions.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// It touches none: its own session opens (if not too late).
    Alone,
    /// It falls within session `0`.
    Join(WindowId),
    /// It widens session `0` to extent `1`, in place.
    Extend(WindowId, Window),
    /// It touches sessions that merge into one.
    Merge(Merge),
}

/// Sessions that merge into one.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Merge {
    /// The sessions, by start (ties in the key's order of sessions).
    pub(super) touching: Vec<WindowId>,
    /// The merged extent.
    pub(super) merged: Window,
}

/// What an event whose own session is `own` does to its key's `open` sessions (each with its
/// current extent). With `extend_in_place`, a single session the event widens is widened in
/// place; without, it merges (alone) into the wider one.
pub(super) fn plan(open: &[(Window, WindowId)], own: Window, extend_in_place: bool) -> Plan {
    let mut touching: Vec<(Window, WindowId)> = (open.iter())
        .filter(|(window, _)| window.overlaps_or_touches(&own))
        .copied()
        .collect();
    if touching.is_empty() {
        return Plan::Alone;
    }
    let merged = (touching.iter()).fold(own, |acc, (window, _)| acc.cover(window));
    if let [(window, only)] = touching[..] {
        if window == merged {
            return Plan::Join(only);
        }
        if extend_in_place {
            return Plan::Extend(only, merged);
        }
    }
    touching.sort_by_key(|(window, _)| window.start);
    let touching = touching.into_iter().map(|(_, id)| id).collect();
    Plan::Merge(Merge { touching, merged })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: i64, end: i64) -> Window {
        Window { start, end }
    }

    #[test]
    fn an_event_touching_no_session_stands_alone() {
        assert_eq!(plan(&[(w(0, 10), 1)], w(20, 30), true), Plan::Alone);
        assert_eq!(plan(&[], w(20, 30), true), Plan::Alone);
    }

    #[test]
    fn an_event_within_a_session_joins_it() {
        assert_eq!(plan(&[(w(0, 30), 1)], w(10, 20), true), Plan::Join(1));
    }

    #[test]
    fn an_event_widening_one_session_extends_it_or_merges_it_alone() {
        assert_eq!(
            plan(&[(w(0, 10), 1)], w(5, 15), true),
            Plan::Extend(1, w(0, 15))
        );
        let merge = Merge {
            touching: vec![1],
            merged: w(0, 15),
        };
        assert_eq!(plan(&[(w(0, 10), 1)], w(5, 15), false), Plan::Merge(merge));
    }

    #[test]
    fn an_event_bridging_sessions_merges_them_by_start() {
        let open = [(w(20, 30), 2), (w(0, 10), 1), (w(50, 60), 3)];
        let merge = Merge {
            touching: vec![1, 2],
            merged: w(0, 30),
        };
        assert_eq!(plan(&open, w(10, 20), true), Plan::Merge(merge));
    }
}
