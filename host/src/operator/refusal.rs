//! [`HostRefusal`]: why the host refused an operator call's input, output or writes, by a limit
//! of the pipeline's rather than the operator's own judgement. Such a call is handled as one the
//! operator rejected ([`super::OperatorError::Refused`]): its writes are dropped and its events
//! become dead letters with this reason (a refused batch is first retried event by event).
//!
//! Wasm-free, like the rest of the trait layer: the facts are plain numbers. Depends on
//! `operator::quota`.

use super::quota::QuotaExceeded;

/// A limit the host holds an operator call to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostRefusal {
    /// The call's writes would pass the pipeline's state quota (`[state] max_keys`,
    /// `max_bytes`).
    #[error(transparent)]
    StateQuota(#[from] QuotaExceeded),
    /// The call's output is larger than `sandbox.max_output_bytes`, which keeps one call from
    /// filling the host's memory with results.
    #[error(
        "the output is {size} bytes, more than the limit of {limit} bytes \
         (sandbox.max_output_bytes)"
    )]
    OutputTooLarge {
        /// The output's size, in bytes.
        size: usize,
        /// `sandbox.max_output_bytes`.
        limit: usize,
    },
    /// An enricher's output event names an input event the batch did not have.
    #[error("output event names origin {origin}, but the batch had {inputs} events")]
    UnknownOrigin {
        /// The index the output event names.
        origin: u32,
        /// The events in the batch.
        inputs: usize,
    },
    /// An enricher's output event does not hold one value per field.
    #[error("output event has {values} values for {fields} fields")]
    ValuesPerFields {
        /// The values the event holds.
        values: usize,
        /// The fields the output names.
        fields: usize,
    },
    /// A batch whose events bring so many different fields that crossing it in one call would
    /// take more than `max` values; its events cross one call each.
    #[error(
        "a batch of {events} events with {fields} different fields is too wide to cross in one \
         call (at most {max} values); its events cross one call each"
    )]
    BatchTooWide {
        /// The events in the batch.
        events: usize,
        /// The different fields they bring.
        fields: usize,
        /// The most values a call crosses.
        max: usize,
    },
    /// A window whose events would take a call carrying many windows past its budget of
    /// values; the window crosses in a call of its own.
    #[error(
        "a window of {events} events would take its call to {total} values (at most {budget}); \
         it crosses in a call of its own"
    )]
    WindowTooLarge {
        /// The window's events.
        events: usize,
        /// The values the call would hold with it.
        total: usize,
        /// The most values the call may hold.
        budget: usize,
    },
}
