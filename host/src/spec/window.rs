//! The `[window]` and `[emit]` sections: the window assigner (tumbling, sliding, session), the
//! allowed lateness, and how window results are written (on close, as a changelog, or early),
//! with their raw forms, limits and checks. A stage's `[stages.window]` is checked here too.
//!
//! Depends on `values` and `time` only.

use serde::Deserialize;

use super::Result;
use super::values::{RawDuration, duration, invalid, positive};
use crate::time::Millis;

/// The most windows one event may fall into (sliding windows: `size / slide`).
pub const MAX_WINDOWS_PER_EVENT: i64 = 1_000;

/// A window assigner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// Fixed, non-overlapping windows of `size`.
    Tumbling {
        /// Window length.
        size: Millis,
    },
    /// Windows of `size` starting every `slide`.
    Sliding {
        /// Window length.
        size: Millis,
        /// Distance between window starts; at most `size`.
        slide: Millis,
    },
    /// Per-key sessions closed by `gap` without events.
    Session {
        /// Inactivity that ends a session.
        gap: Millis,
    },
}

/// How window results are written (`[emit] mode`): `on_close` (the default: a window's result
/// when the watermark passes its end, then an update per change within the allowed lateness),
/// `changelog` (each update preceded by the retraction of the result it replaces, so a
/// downstream sum can subtract) or `early` (also the window's current result every
/// `early_every` of its events before it closes). A result equal to the last one written for
/// its window is never written again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmitSpec {
    /// Updates are written as a retraction and the new result.
    pub changelog: bool,
    /// Early results every this many events of a window.
    pub early_every: Option<u64>,
    /// HTTP sources: early results of every window that changed, every this long of wall
    /// clock (`early_interval`).
    pub early_interval: Option<Millis>,
}

/// A `[window]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindow {
    #[serde(rename = "type")]
    kind: String,
    size: Option<RawDuration>,
    slide: Option<RawDuration>,
    gap: Option<RawDuration>,
    allowed_lateness: Option<RawDuration>,
}

/// The `[emit]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmit {
    mode: Option<String>,
    early_every: Option<u64>,
    early_interval: Option<RawDuration>,
}

/// The checked `[window]` and `[emit]`.
#[derive(Debug)]
pub(super) struct Windows {
    /// The windows, when the pipeline aggregates.
    pub(super) window: Option<WindowSpec>,
    /// How long after a window's end late events still update it.
    pub(super) allowed_lateness: Millis,
    /// How window results are written.
    pub(super) emit: EmitSpec,
}

/// Checks the `[window]`, then the `[emit]` (`staged`: the output is a stage's, not the
/// aggregate's; `http`: the source is HTTP ingest).
pub(super) fn check(
    window: Option<RawWindow>,
    emit: &RawEmit,
    staged: bool,
    http: bool,
) -> Result<Windows> {
    let (window, allowed_lateness) = check_window(window)?;
    let emit = check_emit(emit, window.is_some(), staged, http)?;
    Ok(Windows {
        window,
        allowed_lateness,
        emit,
    })
}

/// Checks the `[window]`: the assigner and the allowed lateness.
pub(super) fn check_window(raw: Option<RawWindow>) -> Result<(Option<WindowSpec>, Millis)> {
    Ok(match raw {
        None => (None, 0),
        Some(w) => {
            let lateness = match &w.allowed_lateness {
                Some(raw) => duration("window.allowed_lateness", raw)?,
                None => 0,
            };
            let spec = match w.kind.as_str() {
                "tumbling" => WindowSpec::Tumbling {
                    size: positive("window.size", w.size.as_ref())?,
                },
                "sliding" => {
                    let size = positive("window.size", w.size.as_ref())?;
                    let slide = positive("window.slide", w.slide.as_ref())?;
                    if slide > size {
                        return Err(invalid(format!(
                            "window.slide ({slide} ms) must not exceed window.size ({size} ms): \
                             events between windows would belong to none"
                        )));
                    }
                    if size / slide > MAX_WINDOWS_PER_EVENT {
                        return Err(invalid(format!(
                            "window: size {size} ms over slide {slide} ms puts every event \
                             into {} windows; the limit is {MAX_WINDOWS_PER_EVENT} \
                             (make the slide at least size / {MAX_WINDOWS_PER_EVENT})",
                            size / slide
                        )));
                    }
                    WindowSpec::Sliding { size, slide }
                }
                "session" => WindowSpec::Session {
                    gap: positive("window.gap", w.gap.as_ref())?,
                },
                other => {
                    return Err(invalid(format!(
                        "window.type {other:?} is unknown: use tumbling, sliding or session"
                    )));
                }
            };
            (Some(spec), lateness)
        }
    })
}

/// Checks the `[emit]`. Early results are the aggregate's: with stages (or a global
/// aggregate, whose combine is a stage) the output is a later stage's, which has none. Early
/// results by wall clock need the ingest log to record when they are due (an HTTP source).
fn check_emit(raw: &RawEmit, windowed: bool, staged: bool, http: bool) -> Result<EmitSpec> {
    let interval = match &raw.early_interval {
        None => None,
        Some(_) if raw.mode.as_deref() != Some("early") => {
            return Err(invalid("emit.early_interval is for emit.mode = \"early\""));
        }
        Some(_) if !http => {
            return Err(invalid(
                "emit.early_interval is for an HTTP source (weir serve records when each early \
                 result is due in the ingest log); use early_every with other sources",
            ));
        }
        Some(raw) => Some(positive("emit.early_interval", Some(raw))?),
    };
    let mode = raw.mode.as_deref().unwrap_or("on_close");
    if mode == "early" && staged {
        return Err(invalid(
            "emit.mode = \"early\" is for a pipeline whose output is its aggregate's: with \
             [[stages]] or a global aggregate the results are a stage's, emitted on close",
        ));
    }
    if mode != "on_close" && !windowed {
        return Err(invalid(format!(
            "emit.mode = {mode:?} is about window results: this pipeline has no [window]"
        )));
    }
    match (mode, raw.early_every) {
        ("on_close", None) => Ok(EmitSpec::default()),
        ("changelog", None) => Ok(EmitSpec {
            changelog: true,
            ..EmitSpec::default()
        }),
        ("early", None) if interval.is_some() => Ok(EmitSpec {
            early_interval: interval,
            ..EmitSpec::default()
        }),
        ("early", Some(every @ 1..=1_000_000_000)) => Ok(EmitSpec {
            changelog: false,
            early_every: Some(every),
            early_interval: interval,
        }),
        ("early", Some(other)) => Err(invalid(format!(
            "emit.early_every = {other}: give 1 to 1000000000 events per early result"
        ))),
        ("early", None) => Err(invalid(
            "emit.mode = \"early\" needs early_every (a window's current result every that many \
             of its events) or early_interval (every window's that changed, that often)",
        )),
        ("on_close" | "changelog", Some(_)) => {
            Err(invalid("emit.early_every is for emit.mode = \"early\""))
        }
        (other, _) => Err(invalid(format!(
            "emit.mode = {other:?}: expected \"on_close\", \"changelog\" or \"early\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::tests::{SPEC, parse};

    #[test]
    fn refuses_a_slide_larger_than_the_size() {
        let err = parse(&SPEC.replace("slide = \"30s\"", "slide = \"2m\"")).unwrap_err();
        assert!(
            err.to_string().contains("must not exceed window.size"),
            "{err}"
        );
    }
}
