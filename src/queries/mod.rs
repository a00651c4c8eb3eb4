//! Interactive queries: the live state, read over HTTP (`/v1/...`) instead of materialised
//! from the output topics.
//!
//! - [`view`]: the per-project snapshots the processing thread keeps current and the handlers
//!   read, the partitions this instance owns, and the directory of the others' owners;
//! - [`api`]: the HTTP endpoints (and their bearer tokens and proxy);
//! - [`advertise`]: the URL an instance advertises, decided once at start.
//!
//! A project lives on the instance that owns its repartition-topic partition
//! ([`crate::topics::partition_of`]). Each instance announces the partitions it takes, with
//! its `http.advertised_url`, on the compacted topic `<group_id>-instances`, and reads the
//! others' announcements from it: a query for a project owned elsewhere is answered with a
//! `307` to the owner.

pub mod advertise;
pub mod api;
pub mod view;
