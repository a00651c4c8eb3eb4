//! jurystream turns live human votes and LLM-judge scores into trustworthy numbers.
//!
//! The crate has one pure core, [`engine`], and the runtimes that drive it: [`replay`] over a
//! file of records. Both feed the core the same [`engine::Record`]s, so what replay computes is
//! what the service computes.

pub mod changelog;
pub mod config;
pub mod engine;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod prefetch;
pub mod replay;
