//! The input formats: one reader per input topic, checked against the event contract
//! (docs/events.md), with the precise rejection (error code and message) for anything else.

pub mod fields;
pub mod json;
pub mod judge;
pub mod rejection;
pub mod time;
pub mod vote;
