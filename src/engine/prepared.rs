//! A vote batch read and validated, not yet applied ([`PreparedVotes`]): what the record that
//! carries it ([`super::Record::votes`]) and the vote pipeline (`votes`, which reads and applies
//! it) share, apart from the state either works on.

use compact_str::CompactString;
use smallvec::SmallVec;

use super::contract::time::EventTime;
use super::ids::ProjectKey;

/// A `jury.votes` record read and validated, not yet applied: what applying it takes from the
/// batch, owned, so that the service can read it on its polling thread while the queue is deep
/// ([`Engine::prepare_votes`](super::Engine::prepare_votes)) and the payload is never read
/// twice. Every vote batch is applied from one of these, by one applier
/// (`Engine::apply_votes`).
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedVotes {
    pub(super) votes: SmallVec<[PreparedVote; 4]>,
    pub(super) at: EventTime,
    pub(super) project: ProjectKey,
    /// The event id (for a rejection's message) and its dedupe fingerprint.
    pub(super) event_id: CompactString,
    pub(super) fingerprint: u128,
    /// The batch's `item_id`, kept when judge scores pair with votes (see
    /// `Engine::observe_votes`).
    pub(super) item: Option<CompactString>,
}

/// One vote of a [`PreparedVotes`]: its value, its explicit reputation, and its voter, whose
/// reputation the table gives when the batch is applied and none is explicit (see
/// [`vote::weight`](super::contract::vote::weight)), and whose verdict the reviewer model
/// learns. Ids of up to 24 bytes are kept inline, so preparing a vote allocates nothing.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PreparedVote {
    pub(super) value: f64,
    pub(super) reputation: Option<f64>,
    pub(super) voter: CompactString,
}
