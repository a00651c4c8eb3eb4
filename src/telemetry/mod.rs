//! What the service tells its operators: Prometheus metrics ([`metrics`]), the internal events
//! that log and count in one place ([`events`]), and the HTTP endpoints that serve them
//! ([`http`]).

pub mod events;
pub mod http;
pub mod metrics;
