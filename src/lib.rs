//! jurystream turns live human votes and LLM-judge scores into trustworthy numbers.
//!
//! # Layout
//!
//! One pure core, [`engine`], and the runtimes that drive it. Both runtimes feed the core the
//! same [`engine::Record`]s, so what replay computes is what the service computes.
//!
//! - [`engine`]: the pure core: no I/O, no clock, no async. Its facade applies one record at a
//!   time to the state it belongs to and appends the records to publish.
//!   - `engine::contract`: the input formats, one reader for every input topic (a vote batch
//!     read by a serde-derived struct, the tree of any topic wording the rejections), and the
//!     rejections;
//!   - `engine::model`: the formulas (score, dedupe, session, consensus, bias, stats,
//!     leaderboard, Bradley-Terry, a judge's agreement with the humans, judge quality,
//!     effective judges, reviewer reliability, and the bounded item store they share);
//!   - `engine::votes`, `engine::judging`: the two pipelines; `engine::quality` joins them
//!     (judge scores with the humans' votes on the same items); `engine::reviewers` learns
//!     which human reviewers to trust from the verdicts it keeps, and publishes it;
//!   - `engine::routing`: a record's project, read for the stage that repartitions by it;
//!   - `engine::state`, `engine::journal`, `engine::origins`, `engine::ids`: per-partition
//!     state (one map of projects, each a `Project` that owns all of it), what changed in it,
//!     which input records it holds, and the maps and keys of ids;
//!   - `engine::record`, `engine::output`: what goes in and what comes out; `engine::prepared`:
//!     a vote batch read and checked, not yet applied (a record may carry one, read ahead);
//!   - `engine::settings`: all the engine may know of the configuration.
//! - [`changelog`]: partition state as compacted changelog records and back: `stores` declares
//!   each kind of state once (its key, its value, its recovery), `render` writes a flush from
//!   the journal, `restore` reads a partition back. Pure.
//! - [`replay`]: the file runtime.
//! - [`topics`]: the one table between the engine's topics and their configured names, and the
//!   names of the internal topics.
//! - [`kafka`]: the service: `run` builds the clients and the threads (a `poll` thread per
//!   stage's consumer, one `process` thread); `core` is the processor's state they share,
//!   `repartition` the stage that forwards input records by project, `collector` produces,
//!   `epoch` is the commit protocol, `tasks` holds the owned partitions' state, `stage` the
//!   stages and their consumer groups, `contexts` their consumers' rebalance callbacks, `clients`
//!   the client settings and topics, `wall_clock` what the service does with a clock that can
//!   step and differ between instances (the time of the ticks that complete idle sessions, the
//!   watch for another instance's clock ahead), `faults` the crash injection of the recovery
//!   tests.
//! - [`queries`]: interactive queries: the live per-project view the service keeps, and the
//!   `/v1` HTTP endpoints that read it.
//! - [`telemetry`]: Prometheus metrics, the internal events that log and count in one place,
//!   and the `/metrics`, `/healthz`, `/readyz` endpoints.
//! - [`config`]: loading and validating the configuration.
//!
//! Dependencies point down: [`config`] imports nothing of the crate; the engine imports
//! nothing outside `engine/` but [`config`] (its settings); [`changelog`]
//! imports the engine; [`topics`] names the engine's topics; [`kafka`] and [`replay`] import
//! the engine, the changelog and the topic table, and [`kafka`] reports through [`telemetry`].
//!
//! [`kafka`], [`queries`], [`telemetry`] and the binary are the `service` feature, on by
//! default. Without it the crate is the core and the file runtime alone, with none of the
//! Kafka, HTTP or async dependencies: the fuzzing harness builds it so.

#![forbid(unsafe_code)]
// The layout above names the service's modules, which exist only with the `service` feature: a
// docs build of the core alone leaves those links as text rather than failing.
#![cfg_attr(not(feature = "service"), allow(rustdoc::broken_intra_doc_links))]

pub mod changelog;
pub mod config;
pub mod engine;
#[cfg(feature = "service")]
pub mod kafka;
#[cfg(feature = "service")]
pub mod queries;
pub mod replay;
#[cfg(feature = "service")]
pub mod telemetry;
pub mod topics;
