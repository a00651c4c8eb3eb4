//! Judge quality's state: the humans' votes per item and the judge scores waiting for them,
//! joined into pairs `(s, h)` of a judge's normalised score for an item and the humans' score
//! for the same item; each judge's window of pairs and its agreement with the humans
//! ([`judge_agreement`]); and the judge scores of a project's last candidates, for how many
//! independent judges a consensus rests on. The pipeline that drives it is
//! `engine::quality`.
//!
//! Each project holds its [`ProjectQuality`], as a part of the project (see [`HoldsQuality`]);
//! a task holds one [`TaskQuality`] beside its projects: the items they hold in one order of
//! arrival (each project holds its items' places in it), so that the task holds at most
//! `judge_quality.max_items` split over the partitions, the oldest forgotten first whatever its
//! project, without touching that project: it drops the place at its own next change
//! ([`Held::prune`]). The task finds an item by its project and id in one table of its own
//! ([`Items`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

use smallvec::SmallVec;

use serde::{Deserialize, Serialize};

use super::agreement::kappa;
pub use super::agreement::{Agreement, judge_agreement};
pub use super::bounded::{Bounded, Held, Items, Places, UNREAD};
use super::effective_judges::{Basis, CandidateScores, Correlations};
use super::record_bytes::{ENVELOPE, LONGEST_F64, json_bytes, json_str_at_most};
use super::reviewers::{Fit, Review, ReviewerLimits, Reviewers, StoredReview, Verdicts};
use crate::engine::contract::time::EventTime;
use crate::engine::ids::{ProjectKey, Projects};

/// The judge scores paired with one item at once.
type SmallScores = SmallVec<[f64; 4]>;

/// The bounds and thresholds of a project's judge-quality state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QualityLimits {
    /// Votes an item needs before its humans' score pairs with judge scores.
    pub min_human_votes: u64,
    /// Items a project remembers votes for, and items with judge scores waiting for votes
    /// (each bound on its own); the oldest is forgotten first.
    pub max_pending_items: usize,
    /// Pairs per judge the agreement is computed over, and candidates the effective number of
    /// judges is computed over.
    pub window: usize,
    /// Judges a project keeps a window for; the one seen first is forgotten first.
    pub max_judges: usize,
    /// Items a task remembers votes for, over all its projects, and items with judge scores
    /// waiting for votes (each bound on its own); the oldest is forgotten first.
    pub max_task_items: usize,
    /// The most bytes an item's waiting judge scores may take in their changelog record
    /// ([`waiting_bytes`]): the item's share of the largest record ([`item_share`]). Beyond
    /// them, as beyond `max_judges`, the oldest are forgotten first.
    pub max_waiting_bytes: usize,
    /// The reviewer model's bounds, when it learns from the items' verdicts; `None` when off.
    pub reviewers: Option<ReviewerLimits>,
}

/// The humans' score of one item: `Σ r·v` and `Σ r` over its first `min_human_votes` votes that
/// carry weight (`votes` of them so far), not decayed, and the event time of the batch that
/// completed them. Only the first ones count, so the score a judge is paired with does not
/// depend on whether its session completed before or after later votes: the two arrive on two
/// topics, in an order no producer decides. Beside it, the reviewers' verdicts on the item, for
/// the reviewer model ([`super::reviewers`]).
///
/// Items are the bulk of a task's changelog, so an item is written as an array,
/// `[weighted, weight, votes, ready_at, review]` (`review` only when there is one, its first
/// verdict's time left out when it is `ready_at`); it reads back from that or from the object
/// written before.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "StoredItemVotes")]
pub struct ItemVotes {
    pub weighted: f64,
    pub weight: f64,
    pub votes: u64,
    pub ready_at: Option<EventTime>,
    pub review: Review,
}

/// An [`ItemVotes`] as read.
#[derive(Deserialize)]
struct StoredItemVotes {
    weighted: f64,
    weight: f64,
    votes: u64,
    #[serde(default)]
    ready_at: Option<EventTime>,
    #[serde(default)]
    review: StoredReview,
}

impl TryFrom<StoredItemVotes> for ItemVotes {
    type Error = &'static str;

    fn try_from(stored: StoredItemVotes) -> Result<Self, Self::Error> {
        Ok(ItemVotes {
            weighted: stored.weighted,
            weight: stored.weight,
            votes: stored.votes,
            ready_at: stored.ready_at,
            review: stored.review.review(stored.ready_at)?,
        })
    }
}

impl Serialize for ItemVotes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let reviewed = !self.review.is_empty();
        let mut seq = s.serialize_seq(Some(4 + usize::from(reviewed)))?;
        seq.serialize_element(&self.weighted)?;
        seq.serialize_element(&self.weight)?;
        seq.serialize_element(&self.votes)?;
        seq.serialize_element(&self.ready_at)?;
        if reviewed {
            seq.serialize_element(&self.review.written(self.ready_at))?;
        }
        seq.end()
    }
}

impl ItemVotes {
    /// The reputation-weighted mean vote; `None` while no vote carries weight.
    pub fn score(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| (self.weighted / self.weight).clamp(0.0, 1.0))
    }

    /// The humans' score and when it was complete, once it is.
    fn ready(&self) -> Option<(f64, EventTime)> {
        Some((self.score()?, self.ready_at?))
    }
}

/// A completed session's judge score of an item, waiting for the item's votes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    pub session: String,
    pub judge: String,
    pub s: f64,
    /// When its session completed.
    pub at: EventTime,
}

/// A judge's score of an item and the humans' score of it, paired once both exist.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub judge: String,
    pub item: String,
    /// The session the judge's score came from.
    pub session: String,
    pub s: f64,
    pub h: f64,
    /// When both sides existed: the later of the session's completion and the humans' score's.
    pub at: EventTime,
}

/// A judge's last `window` pairs by their own time, and which of its alerts are active (each
/// alerts when its finding becomes true and re-arms once it is no longer true).
///
/// The window is ordered by each pair's time ([`Pair::at`]) with a tie-break of its item and
/// session, not by when the pair formed: which pairs form first depends on how the votes and
/// judge-score topics interleave, which no producer decides. A pair older than every pair of a
/// full window never enters it, so the window is the last `window` of all the judge's pairs in
/// that order, whatever order they came in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeWindow {
    #[serde(deserialize_with = "timed_pairs")]
    pub pairs: VecDeque<TimedPair>,
    #[serde(default)]
    pub disagreeing: bool,
    #[serde(default)]
    pub drifting: bool,
    /// The latest of its pairs' times ([`Pair::at`]).
    pub last_event_at: Option<EventTime>,
}

/// A pair in a judge's window: its time, a tie-break (a hash of its item and session), the
/// judge's score and the humans'.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimedPair(pub EventTime, pub u64, pub f64, pub f64);

impl TimedPair {
    fn of(pair: &Pair) -> TimedPair {
        let key = hash_of((&pair.item, &pair.session));
        TimedPair(pair.at, key, pair.s, pair.h)
    }

    fn order(&self) -> (EventTime, u64) {
        (self.0, self.1)
    }
}

/// Reads a window's pairs, also as written before they carried their time (`[s, h]`, in the
/// order they formed): those count as older than any timed pair, in their order.
fn timed_pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<VecDeque<TimedPair>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Timed(TimedPair),
        Plain(f64, f64),
    }
    let stored = Vec::<Stored>::deserialize(d)?;
    Ok(stored
        .into_iter()
        .enumerate()
        .map(|(i, p)| match p {
            Stored::Timed(p) => p,
            Stored::Plain(s, h) => TimedPair(EventTime::MIN, i as u64, s, h),
        })
        .collect())
}

impl JudgeWindow {
    /// The agreement over the window.
    pub fn agreement_with_humans(&self) -> Agreement {
        let pairs: Vec<(f64, f64)> = self.pairs.iter().map(|p| (p.2, p.3)).collect();
        judge_agreement(&pairs)
    }

    /// How the kappa moved within a full window: the kappa of its newer half less that of its
    /// older half. `None` before the window holds `window` pairs, or where either kappa is
    /// undefined. Computed from the window alone, so it does not depend on the order in which
    /// the pairs formed.
    pub fn kappa_change(&self, window: usize) -> Option<f64> {
        let window = window.max(2);
        if self.pairs.len() < window {
            return None;
        }
        let half = self.pairs.len() / 2;
        let kappa_of = |pairs: &mut dyn Iterator<Item = &TimedPair>| {
            let pairs: Vec<(f64, f64)> = pairs.map(|p| (p.2, p.3)).collect();
            kappa(&pairs)
        };
        let older = kappa_of(&mut self.pairs.iter().take(half))?;
        let newer = kappa_of(&mut self.pairs.iter().skip(self.pairs.len() - half))?;
        Some(newer - older)
    }

    /// Adds `pair` in its place by time; beyond `window` the oldest leaves.
    fn insert(&mut self, pair: TimedPair, window: usize) {
        let at = self.pairs.partition_point(|p| p.order() <= pair.order());
        self.pairs.insert(at, pair);
        while self.pairs.len() > window {
            self.pairs.pop_front();
        }
    }
}

/// A judge's standing after a pair: its agreement over the window, and how far its kappa moved
/// since `window` pairs earlier (`None` before there were that many).
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeStanding {
    pub judge: String,
    pub agreement: Agreement,
    pub kappa_change: Option<f64>,
}

/// What a task's judge-quality state did with votes or a completed session: the pairs
/// formed, and what it changed or forgot (for the changelog).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The pairs formed, in order.
    pub pairs: Vec<Pair>,
    /// The places of items whose votes changed or were forgotten. This and `forgotten` hold
    /// what a vote usually changes (its item; the item forgotten to make room for it) inline:
    /// a vote allocates nothing for them.
    pub items: SmallVec<[u64; 2]>,
    /// The places of items whose waiting judge scores changed, paired or were forgotten.
    pub waiting: Vec<u64>,
    /// Whether the reviewer model left out verdicts of the votes' batch (its project's count
    /// of those changed).
    pub left_out: bool,
    /// The projects whose items' verdicts or judges' verdicts changed and that were not
    /// already waiting for their reviewers' records to be published: each is now marked as
    /// waiting ([`Reviewers::hold`]), and the engine lists it for publication (every
    /// `Observed` goes through `Engine::review`). (An item the task's bound forgets changes
    /// nothing published of its project until the project's next change.)
    pub reviewed: Vec<ProjectKey>,
    /// Whether the votes' project passed a checkpoint of its reviewer model
    /// ([`Reviewers::checkpoint_due`]).
    pub checkpoint: bool,
    /// Whether these were the flush's first items forgotten (see [`ItemUndo`]): the record of
    /// the places forgotten is written with it.
    pub first_forgotten: bool,
    /// Why no judge score of the project pairs, where these found it
    /// ([`ProjectQuality::unpaired`]).
    pub unpaired: Option<Unpaired>,
}

/// Why no judge score of a project pairs with the humans' ([`ProjectQuality::unpaired`]): a
/// mistake in how the two sides are sent, as a rule, not a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpaired {
    /// Its judges and humans name their items apart: none of the items its judges scored has
    /// votes (another id scheme, as a rule).
    Apart,
    /// The items its judges scored have votes, but none has the `min_human_votes` that make a
    /// humans' score (each item gets fewer reviews, as a rule).
    ShortOfVotes,
}

/// What a project's judged items with votes reach while none pairs
/// ([`Unpaired::ShortOfVotes`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shortfall<'a> {
    /// Items its judges scored that wait for votes and have some.
    pub shared: usize,
    /// The most votes carrying weight one of those has, and its id.
    pub most: Option<(u64, &'a str)>,
}

/// The two sides of a project's pairing: the items its judges scored that wait for votes, and
/// the items with votes it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sides {
    pub waiting: usize,
    pub voted: usize,
}

impl Observed {
    /// Notes that the reviews of `project` (its judge quality `q`) changed: the project is
    /// listed once until its records are published ([`Reviewers::hold`]).
    fn reviewed(&mut self, (project, q): (&str, &mut ProjectQuality)) {
        if q.reviewers.hold() {
            self.reviewed.push(ProjectKey::from(project));
        }
    }
}

/// A project's judge-quality state: the humans' votes per item, the judge scores of completed
/// sessions waiting for them, each judge's window of pairs, and the judge scores of its last
/// candidates (for the effective number of judges).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectQuality {
    /// Its items with votes: their places in the task's [`TaskQuality`], which holds them.
    pub items: Held,
    pub waiting: Bounded<Vec<Waiting>>,
    pub judges: Bounded<JudgeWindow>,
    /// The last candidates' judge scores, by their place in the project's order.
    pub recent: BTreeMap<u64, CandidateScores>,
    /// The running correlations of judge pairs over `recent`, kept with it.
    pub correlations: Correlations,
    /// Its reviewers' findings, and the count of verdicts the model left out.
    pub reviewers: Reviewers,
    /// Whether no judge score of it was found to pair ([`ProjectQuality::unpaired`]) and no
    /// pair has formed since: the finding is said once.
    pub unmatched: bool,
}

impl ProjectQuality {
    /// Adds `pair` to its judge's window and returns the judge's standing; a judge new beyond
    /// `max_judges` forgets the one seen first, whose name is appended to `forgotten`.
    pub fn add(
        &mut self,
        pair: &Pair,
        limits: &QualityLimits,
        forgotten: &mut Vec<String>,
    ) -> JudgeStanding {
        let window = limits.window.max(1);
        let mut gone = Vec::new();
        let (_, w) = self.judges.entry(&pair.judge, limits.max_judges, &mut gone);
        w.insert(TimedPair::of(pair), window);
        let agreement = w.agreement_with_humans();
        w.last_event_at = w.last_event_at.max(Some(pair.at));
        let kappa_change = w.kappa_change(window);
        forgotten.extend(gone.into_iter().map(|(_, judge, _)| judge.into()));
        JudgeStanding {
            judge: pair.judge.clone(),
            agreement,
            kappa_change,
        }
    }

    /// Whether `judge`'s findings are true now, and which of them just became true: sets the
    /// judge's active flags to `(disagreeing, drifting)` and returns those that were not set.
    pub fn findings(&mut self, judge: &str, now: (bool, bool)) -> (bool, bool) {
        let Some((_, w)) = self.judges.get_mut(judge) else {
            return (false, false);
        };
        let fresh = (now.0 && !w.disagreeing, now.1 && !w.drifting);
        (w.disagreeing, w.drifting) = now;
        fresh
    }

    /// Adds a session's candidates (each its judges' scores) to the recent window, forgetting
    /// the oldest beyond `window`; returns the places added and forgotten.
    pub fn remember(&mut self, candidates: Vec<CandidateScores>, window: usize) -> Vec<u64> {
        let mut changed = Vec::new();
        let first = self.recent.last_key_value().map_or(0, |(k, _)| k + 1);
        let scored = candidates.into_iter().filter(|s| !s.is_empty());
        for (seq, scores) in (first..).zip(scored) {
            self.correlations.apply(&scores, 1);
            self.recent.insert(seq, scores);
            changed.push(seq);
        }
        while self.recent.len() > window.max(1) {
            if let Some((seq, scores)) = self.recent.pop_first() {
                self.correlations.apply(&scores, -1);
                changed.push(seq);
            }
        }
        changed
    }

    /// Rebuilds what is derived from the rest, after a restore wrote that directly: the
    /// correlations from `recent`. The runtime fits the reviewers once it has restored the
    /// state (`Engine::republish_reviewers`).
    pub fn rebuild(&mut self) {
        self.correlations = Correlations::of(self.recent.values());
        self.reviewers.forget_checkpoint();
    }

    /// Whether any of its items held (in `task`) has a verdict.
    pub fn has_verdicts(&self, task: &TaskQuality) -> bool {
        task.reviews(&self.items).any(|r| !r.verdicts.is_empty())
    }

    /// The reviewer model fitted on the verdicts of the items held now (in `task`), at most
    /// `max_reviewers` reviewers, each with its latest verdict's time: what a release
    /// publishes. It reads every held item.
    pub fn fit_reviewers(&self, task: &TaskQuality, max_reviewers: usize) -> Fit {
        super::reviewers::fit(task.reviews(&self.items), max_reviewers)
    }

    /// [`ProjectQuality::fit_reviewers`] without the latest times, which a checkpoint does not
    /// need: it counts the patterns its places are tagged with (see
    /// [`Book`](super::reviewers::Book)), read in order, and reads only the items whose review
    /// changed since the last fit (or that were restored), tagging their places. So an item
    /// is read by the first fit after each change, not by every fit while it is held: a large
    /// project's checkpoints count `O(4)` places per verdict admitted and read each item about
    /// once.
    pub fn checkpoint_fit(&mut self, task: &TaskQuality, max_reviewers: usize) -> Fit {
        let book = self.reviewers.book_mut();
        let mut counts = vec![0u64; book.len()];
        for (seq, tag) in self.items.held_tags_mut(&task.items) {
            if *tag == UNREAD {
                let Some((_, votes)) = task.items.get(seq) else {
                    continue;
                };
                *tag = book.tag(&votes.review);
            }
            let at = *tag as usize;
            if counts.len() <= at {
                counts.resize(at + 1, 0);
            }
            counts[at] += 1;
        }
        let fitted = book.fit(&counts, max_reviewers);
        self.keep_book_bounded();
        fitted
    }

    /// Whether no judge score of it pairs, and why, found now and said once: no pair has
    /// formed, at least `at_least` items its judges scored wait for votes, it holds at least
    /// `at_least` items with votes (in `task`), and either none of the waiting items has votes
    /// ([`Unpaired::Apart`]: judge quality pairs a judge's score of a candidate with the votes
    /// on the item of the same id, and here the two name their items apart), or `at_least` of
    /// them have ([`Unpaired::ShortOfVotes`]: a waiting item with votes has fewer than
    /// `judge_quality.min_human_votes`, or it would have paired; so items reviewed fewer times
    /// than that, as a rule). Either is most likely a mistake, not a wait. Sets
    /// [`ProjectQuality::unmatched`] when it finds one. A vote of a project without `at_least`
    /// waiting items pays two comparisons, inline; past both counts it looks up waiting items
    /// in the task (until `at_least` with votes), at most `judge_quality.max_pending_items`
    /// lookups, until its first pair.
    #[inline]
    pub fn unpaired(
        &mut self,
        project: &str,
        task: &TaskQuality,
        at_least: usize,
    ) -> Option<Unpaired> {
        let at_least = at_least.max(1);
        if self.unmatched || self.waiting.len() < at_least {
            return None;
        }
        self.found_unpaired(project, task, at_least)
    }

    /// [`ProjectQuality::unpaired`] once its judges' side is reached.
    #[cold]
    fn found_unpaired(
        &mut self,
        project: &str,
        task: &TaskQuality,
        at_least: usize,
    ) -> Option<Unpaired> {
        if !self.judges.is_empty() || self.sides(task).voted < at_least {
            return None;
        }
        let voted = |item: &&str| task.item((project, item)).is_some();
        let shared = self.waiting.iter().map(|(item, _)| item).filter(voted);
        let found = match shared.take(at_least).count() {
            0 => Unpaired::Apart,
            n if n == at_least => Unpaired::ShortOfVotes,
            _ => return None,
        };
        self.unmatched = true;
        Some(found)
    }

    /// How far its judged items with votes got while none pairs (for
    /// [`Unpaired::ShortOfVotes`]'s alert): `O(waiting)` lookups.
    pub fn shortfall<'a>(&'a self, project: &str, task: &'a TaskQuality) -> Shortfall<'a> {
        let voted = self
            .waiting
            .iter()
            .filter_map(|(item, _)| Some((task.item((project, item))?.votes, item)));
        let (mut shared, mut most) = (0, None);
        for (n, item) in voted {
            shared += 1;
            most = match most {
                Some((m, _)) if m >= n => most,
                _ => Some((n, item)),
            };
        }
        Shortfall { shared, most }
    }

    /// The items its judges scored that wait for votes, and the items with votes it holds (in
    /// `task`).
    pub fn sides(&self, task: &TaskQuality) -> Sides {
        Sides {
            waiting: self.waiting.len(),
            voted: self.items.held(&task.items),
        }
    }

    /// The oldest item of each side ([`ProjectQuality::sides`]): the id of an item its judges
    /// scored that waits for votes, and of one with votes, which show how the two name items.
    pub fn oldest_of_sides<'a>(
        &'a self,
        task: &'a TaskQuality,
    ) -> (Option<&'a str>, Option<&'a str>) {
        let waiting = self.waiting.iter().next().map(|(item, _)| item);
        let voted = self.items.held_tags(&task.items).next();
        let voted = voted.and_then(|(seq, _)| task.items.get(seq));
        (waiting, voted.map(|(item, _)| item.as_str()))
    }

    /// Notes that the review of its item at `seq` changed: its place's tag is dropped, and the
    /// next fit reads the item. (Tagging it here instead would touch the book at every vote,
    /// out of the caches, to save reading the item once.)
    pub fn review_changed(&mut self, seq: u64) {
        self.items.set_tag(seq, UNREAD);
    }

    /// Rebuilds the book of patterns from the tags in use once it holds over twice as many
    /// patterns as places are held, and 16: `O(places)` each time, at most once in as many
    /// new patterns, so the book is bounded by the items its project holds.
    fn keep_book_bounded(&mut self) {
        let places = self.items.len();
        if self
            .reviewers
            .book()
            .is_some_and(|b| b.len() > 2 * places + 16)
        {
            self.reviewers.book_mut().compact(self.items.tags_mut());
        }
    }

    /// The effective number of `judges` over the recent candidates (see
    /// [`super::effective_judges`]), from the running correlations: `O(judges²)`.
    pub fn effective_judges(&self, judges: &[&str], min_shared: usize) -> Option<(f64, Basis)> {
        self.correlations.effective_judges(judges, min_shared)
    }

    /// The kappa of each judge's window, where defined.
    pub fn kappas(&self) -> impl Iterator<Item = (&str, f64)> {
        self.judges
            .iter()
            .filter_map(|(j, w)| Some((j, w.agreement_with_humans().kappa?)))
    }

    /// The learned weight of each of `judges` whose window holds at least `min_pairs` pairs:
    /// `max(0, kappa)` of its window. Fewer pairs are too little evidence to override the
    /// configured weight (two unlucky pairs give kappa -1).
    pub fn learned_weights<'a>(
        &'a self,
        judges: impl Iterator<Item = &'a str> + 'a,
        min_pairs: usize,
    ) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        judges.filter_map(move |j| {
            let w = self.judges.get(j)?;
            if w.pairs.len() < min_pairs {
                return None;
            }
            Some((j, w.agreement_with_humans().kappa?.max(0.0)))
        })
    }
}

/// What judge quality keeps across a task's projects, in one order of arrival each: the items
/// with votes themselves (their projects hold their places, see [`Held`]), and the places of
/// the items with waiting judge scores (their projects hold those). Beside each project's bound
/// (`max_pending_items`), the task holds at most `max_task_items` of each, and forgets its
/// oldest first, whatever its project: with a new item per vote that is one item per vote, and
/// it is read from the front of the task's order, in the order it was written, not from
/// wherever its project's memory lies. The places are the task's, so the changelog writes a
/// task's items in buckets of consecutive places, whichever projects they belong to, each
/// bucket one sweep of the order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskQuality {
    items: Items<ItemVotes>,
    waits: Places,
    /// What the current flush changed of the items, when the state journals.
    undo: Undo,
    /// What the task forgot to stay within the bounds: counts, not state.
    forgotten: Tally,
}

/// What a task forgot to stay within the bounds, beside its state, not of it: never restored,
/// and every two compare equal.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    /// Items and waiting judge scores forgotten since the task was taken (restored or
    /// started), for the metrics.
    forgotten: u64,
    /// Items the task forgot since it last dropped their places from every project's places
    /// ([`TaskQuality::sweep`]).
    unswept: usize,
}

impl PartialEq for Tally {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A project as judge quality finds it in its state's map: what holds its [`ProjectQuality`].
/// The task keeps only what spans projects (the items' order of arrival), each project its own.
pub trait HoldsQuality: Default {
    fn quality(&self) -> &ProjectQuality;
    fn quality_mut(&mut self) -> &mut ProjectQuality;
}

impl HoldsQuality for ProjectQuality {
    fn quality(&self) -> &ProjectQuality {
        self
    }
    fn quality_mut(&mut self) -> &mut ProjectQuality {
        self
    }
}

/// The judge quality of `project`, created with the project if new (a key of up to 24 bytes
/// allocates nothing).
fn held_quality<'a, P: HoldsQuality>(
    projects: &'a mut Projects<P>,
    project: &str,
) -> &'a mut ProjectQuality {
    projects
        .entry(ProjectKey::from(project))
        .or_default()
        .quality_mut()
}

/// The judge quality of `project`, if held.
fn of<'a, P: HoldsQuality>(projects: &'a Projects<P>, project: &str) -> Option<&'a ProjectQuality> {
    projects.get(project).map(P::quality)
}

/// Item places per changelog record of a task's items (and of its items with waiting judge
/// scores): a flush writes its new items' records once each, and rewrites the older records of
/// items voted on again, a few kilobytes each at most. The flush's [`ItemUndo`] needs it too:
/// only a record the flush writes needs the items it forgot.
pub const ITEM_BUCKET: u64 = 16;

/// The most bytes one item may take in a changelog record of its task's items when the
/// largest record the runtime's producer sends is `record_limit`: a record holds the items of
/// [`ITEM_BUCKET`] places and, in an item bucket, those items again as its flush found them,
/// so at most twice `ITEM_BUCKET` items share it. Within that share every such record fits,
/// however long the ids: the configuration refuses settings whose items could outgrow it
/// (`crate::config`), and an item's waiting judge scores are kept within it
/// ([`QualityLimits::max_waiting_bytes`]).
pub fn item_share(record_limit: usize) -> usize {
    record_limit.saturating_sub(ENVELOPE) / (2 * ITEM_BUCKET as usize)
}

/// The bytes of an item's entry in its changelog record of waiting judge scores
/// (`[seq,"proj-42","trace-100",[{...},...]]`, JSON: the changelog's `WaitsStore`) with
/// `waiting` as its scores.
pub fn waiting_bytes((seq, project, item): (u64, &str, &str), waiting: &[Waiting]) -> usize {
    json_bytes(&(seq, project, item, waiting))
}

/// At least [`waiting_bytes`], from the ids' lengths alone: each id's bytes as JSON could spell
/// them (six a byte, `\u0001`), each score's number and time of the longest. What an item's
/// waiting scores are checked against first, so that the scores are written out to be counted
/// only when long ids could make them too many bytes.
fn waiting_bytes_at_most((_, project, item): (u64, &str, &str), waiting: &[Waiting]) -> usize {
    let id = |s: &str| json_str_at_most(s.len());
    let score = |w: &Waiting| {
        id(&w.session)
            .saturating_add(id(&w.judge))
            .saturating_add(96)
    };
    let scores = waiting.iter().map(score).fold(0, usize::saturating_add);
    (32 + id(project))
        .saturating_add(id(item))
        .saturating_add(scores)
}

/// The most bytes [`waiting_bytes`] can count for an item with one waiting score when ids are
/// at most `max_id_bytes`: its project, id, session and judge of the longest ids, each
/// character spelled in six bytes (`\u0001`), its place, score and time of the longest.
pub fn largest_waiting_bytes(max_id_bytes: usize) -> usize {
    json_str_at_most(max_id_bytes)
        .saturating_mul(4)
        .saturating_add(152)
}

/// The most bytes a judge's window of `window` pairs takes in its changelog record (JSON),
/// counted from above: every pair's time to the nanosecond, its tie-break and scores at their
/// longest. The configuration refuses a `judge_quality.window` whose window outgrows a record.
pub fn largest_window_bytes(window: usize) -> usize {
    let at = EventTime::LONGEST;
    let fixed = json_bytes(&JudgeWindow {
        last_event_at: Some(at),
        ..JudgeWindow::default()
    });
    let pair = json_bytes(&TimedPair(at, u64::MAX, LONGEST_F64, LONGEST_F64)) + 1;
    fixed.saturating_add(window.saturating_mul(pair))
}

/// The item places of changelog record `bucket` ([`ITEM_BUCKET`]).
pub fn bucket_places(bucket: u64) -> Range<u64> {
    bucket * ITEM_BUCKET..(bucket + 1) * ITEM_BUCKET
}

/// What a flush changed of a task's items, for the changelog's recovery rule (see
/// `crate::changelog`): item buckets are written once, before the rest of the flush, so a
/// bucket written by a flush a crash cut short must read back as it was when the flush began.
/// That needs only the places the flush took (new items: dropped) and, in the buckets it
/// writes, the items it changed or forgot that existed before it (their values then), which
/// with a new item per vote is almost nothing; items forgotten are deleted from the changelog
/// in the next flush, once this one is whole, and `forgotten` tells a restore which to drop
/// until then.
///
/// A bucket the flush does not write keeps its record of before the flush, which holds its
/// forgotten items as the flush found them: the undo keeps a forgotten item only while its
/// bucket may still be written (it holds other items, which a vote may change), and drops the
/// bucket's once it holds none. The task forgets its oldest first, so beside the items of the
/// buckets the flush writes it holds a bucket's worth at most, taken and dropped while in the
/// caches, where keeping every item a flush forgot until its end wrote each to memory of its
/// own and read it again there.
#[derive(Debug, Clone, Default)]
pub struct ItemUndo {
    /// The first place this flush took: items at or after it are new.
    pub from: u64,
    /// Items held when the flush began that changed since, by place: their project, id and
    /// value then.
    before: BTreeMap<u64, Found>,
    /// Items held when the flush began that were forgotten since, as [`ItemUndo::before`], in
    /// ascending places, in chunks of [`GONE_CHUNK`]. A task forgets its oldest first, so
    /// nearly every forgotten item joins at the end here, where a map would take a node's room
    /// and search for each; one that would not goes to `before`. Chunks, not one run, so that a
    /// flush's many items (when its buckets are written) never move to a run twice the size.
    /// Only the last chunk is ever empty, and only when it is the one.
    gone: Vec<Vec<(u64, Found)>>,
    /// The buckets before `from`'s this flush writes whatever else it changes: those it
    /// changed an item of, and those it began with (the places the flush before forgot, or a
    /// restore's: see [`TaskQuality::start_undo`]). A flush writes no other bucket before
    /// `from`'s: the journal notes an old item's bucket when it changes, and a bucket of the
    /// places forgotten when the flush ends, for the next.
    written: BTreeSet<u64>,
    /// The places forgotten in this flush.
    pub forgotten: Vec<u64>,
}

/// An item as a flush found it: its project, id and value.
pub type Found = (ProjectKey, ProjectKey, ItemVotes);

/// Forgotten items per chunk of [`ItemUndo`]'s `gone`.
const GONE_CHUNK: usize = 256;

impl ItemUndo {
    /// Notes what the item at `seq` was when the flush began (its project, id and value, made
    /// only if needed), the first time the flush changes it: its bucket is written.
    fn changed(&mut self, seq: u64, found: impl FnOnce() -> Found) {
        if seq < self.from && !self.before.contains_key(&seq) {
            self.before.insert(seq, found());
            self.note_written([seq]);
        }
    }

    /// Notes that this flush writes the buckets of `places`, whatever else it changes: places
    /// in order, as a flush forgets them, are noted a bucket at a time.
    fn note_written(&mut self, places: impl IntoIterator<Item = u64>) {
        let mut noted = None;
        for seq in places.into_iter().filter(|&seq| seq < self.from) {
            let bucket = seq / ITEM_BUCKET;
            if noted != Some(bucket) {
                noted = Some(bucket);
                self.written.insert(bucket);
            }
        }
    }

    /// Whether this flush writes `bucket`, as far as is known now: a bucket it does not holds
    /// items it may still change, or none.
    fn writes(&self, bucket: u64) -> bool {
        bucket >= self.from / ITEM_BUCKET || self.written.contains(&bucket)
    }

    /// Notes that the item at `seq`, `found` now, was forgotten, its bucket then holding no
    /// item if `emptied`: keeps what it was when the flush began, unless the flush took it or
    /// changed it before, or no restore can read it (its bucket, empty, is not written).
    fn forgot(&mut self, seq: u64, found: Found, emptied: bool) {
        self.forgotten.push(seq);
        if seq >= self.from || self.before.contains_key(&seq) {
            return;
        }
        let last = self.gone.last().and_then(|chunk| chunk.last());
        if last.is_some_and(|&(last, _)| last >= seq) {
            self.before.insert(seq, found);
            return;
        }
        let bucket = seq / ITEM_BUCKET;
        if emptied && !self.writes(bucket) {
            // The bucket's items kept before are the last in `gone`: places ascend there.
            self.drop_gone_from(bucket * ITEM_BUCKET);
            return;
        }
        match self.gone.last_mut() {
            Some(chunk) if chunk.len() < GONE_CHUNK => chunk.push((seq, found)),
            _ => {
                let mut chunk = Vec::with_capacity(GONE_CHUNK);
                chunk.push((seq, found));
                self.gone.push(chunk);
            }
        }
    }

    /// Drops the forgotten items kept in `gone` at place `from` or after, keeping an emptied
    /// chunk's room if it is the only one.
    fn drop_gone_from(&mut self, from: u64) {
        while let Some(chunk) = self.gone.last_mut() {
            let before = chunk.iter().rposition(|&(seq, _)| seq < from);
            chunk.truncate(before.map_or(0, |at| at + 1));
            if !chunk.is_empty() || self.gone.len() == 1 {
                return;
            }
            self.gone.pop();
        }
    }

    /// The items at `places` as the flush found them, those it changed or forgot, in order.
    pub fn found(&self, places: Range<u64>) -> Vec<(u64, &Found)> {
        let (from, end) = (places.start, places.end);
        let first = self
            .gone
            .partition_point(|chunk| chunk.last().is_some_and(|&(last, _)| last < from));
        let gone = self.gone[first..]
            .iter()
            .flatten()
            .skip_while(|(seq, _)| *seq < from)
            .take_while(|(seq, _)| *seq < end)
            .map(|(seq, found)| (*seq, found));
        let mut found: Vec<_> = self.before.range(places).map(|(&s, f)| (s, f)).collect();
        found.extend(gone);
        found.sort_unstable_by_key(|(seq, _)| *seq);
        found
    }
}

/// A flush's [`ItemUndo`] while the state journals (`None` in replay). Like the journal's hint,
/// it is not state: never restored, and every two compare equal.
#[derive(Debug, Clone, Default)]
struct Undo(Option<ItemUndo>);

impl PartialEq for Undo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl TaskQuality {
    /// Starts noting what each flush changes of the items (see [`ItemUndo`]): a journaling
    /// state's, from now on, whose next flush writes the buckets of `written` whatever else it
    /// changes (a restored state's: the places forgotten by the flush it was restored to, and
    /// those of buckets a flush cut short wrote).
    pub fn start_undo(&mut self, written: impl IntoIterator<Item = u64>) {
        let mut undo = ItemUndo {
            from: self.items.next(),
            ..ItemUndo::default()
        };
        undo.note_written(written);
        self.undo = Undo(Some(undo));
    }

    /// What the current flush changed of the items, if noted.
    pub fn undo(&self) -> Option<&ItemUndo> {
        self.undo.0.as_ref()
    }

    /// Ends a flush (its changelog is rendered): returns the places it forgot, whose buckets the
    /// next flush writes (to delete them), and starts noting the next.
    pub fn end_flush(&mut self) -> Vec<u64> {
        let next = self.items.next();
        let Some(undo) = self.undo.0.as_mut() else {
            return Vec::new();
        };
        undo.from = next;
        undo.before.clear();
        undo.gone.clear();
        undo.written.clear();
        let forgotten = std::mem::take(&mut undo.forgotten);
        undo.note_written(forgotten.iter().copied());
        forgotten
    }

    /// Forgets a restored item at `seq` that the flush the state was restored to had forgotten
    /// (see [`ItemUndo`]).
    pub fn drop_restored<P: HoldsQuality>(&mut self, projects: &mut Projects<P>, seq: u64) {
        let Some((project, _)) = self.items.remove(seq) else {
            return;
        };
        if let Some(p) = projects.get_mut(project.as_str()) {
            p.quality_mut().items.remove(seq);
        }
    }

    /// The humans' votes on `item` of `project` so far.
    pub fn item(&self, (project, item): (&str, &str)) -> Option<&ItemVotes> {
        let seq = self.items.place(project, item)?;
        self.items.get(seq).map(|(_, votes)| votes)
    }

    /// The reviews of the items a project holds (its places, `held`), oldest first.
    pub fn reviews<'a>(&'a self, held: &'a Held) -> impl Iterator<Item = &'a Review> + 'a {
        let items = &self.items;
        held.places()
            .filter_map(move |seq| items.get(seq).map(|(_, votes)| &votes.review))
    }

    /// The items with votes, in order of place: each its project, key and votes.
    pub fn items(&self) -> &Items<ItemVotes> {
        &self.items
    }

    /// Items held with votes, and with waiting judge scores.
    pub fn held(&self) -> (usize, usize) {
        (self.items.len(), self.waits.len())
    }

    /// Items and waiting judge scores forgotten to stay within the bounds since the task was
    /// taken (restored or started).
    pub fn forgotten(&self) -> u64 {
        self.forgotten.forgotten
    }

    /// Applied votes `(reputation, value)` of `project` on `item`, of a batch at event time
    /// `at`, and their `verdicts` for the reviewer model: [`TaskQuality::sweep`], then
    /// [`TaskQuality::votes_in`] with the project's judge quality, created if new.
    pub fn votes<P: HoldsQuality>(
        &mut self,
        projects: &mut Projects<P>,
        (project, item): (&str, &str),
        votes: (&[(f64, f64)], Verdicts),
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        self.sweep(projects, limits.max_task_items);
        let q = held_quality(projects, project);
        self.votes_in((project, q), item, votes, at, limits)
    }

    /// Drops from every project's places those the task forgot ([`Held::prune`]), once it
    /// has forgotten `max_task_items` (as many as it holds at most) since it last did: so that
    /// its projects hold at most twice that many places (and one vote's), whichever
    /// projects stop changing. `O(projects)` each `max_task_items` items forgotten. A caller of
    /// [`TaskQuality::votes_in`] runs it before each vote, before it takes the vote's project.
    pub fn sweep<P: HoldsQuality>(&mut self, projects: &mut Projects<P>, max_task_items: usize) {
        if self.forgotten.unswept < max_task_items.max(1) {
            return;
        }
        for p in projects.values_mut() {
            p.quality_mut().items.prune(&self.items);
        }
        self.forgotten.unswept = 0;
    }

    /// [`TaskQuality::votes`] for a caller that holds the vote's project already: its id and
    /// judge quality `q`. The first `min_human_votes` that carry weight make the item's score;
    /// once it has them, the judge scores waiting for it pair with it. Later votes change
    /// nothing of the score.
    pub fn votes_in(
        &mut self,
        (project, q): (&str, &mut ProjectQuality),
        item: &str,
        (votes, verdicts): (&[(f64, f64)], Verdicts),
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        let mut observed = Observed::default();
        let none_forgotten = |undo: &Undo| undo.0.as_ref().is_some_and(|u| u.forgotten.is_empty());
        let before = none_forgotten(&self.undo);
        let seq = place_item(
            (q, &mut self.items),
            (project, item),
            limits,
            (&mut observed, &mut self.undo, &mut self.forgotten),
        );
        observed.first_forgotten = before && !none_forgotten(&self.undo);
        let undo = &mut self.undo.0;
        let Some((_, agg)) = self.items.get_mut(seq) else {
            return observed;
        };
        if let Some(undo) = undo {
            undo.changed(seq, || (project.into(), item.into(), agg.clone()));
        }
        let needed = limits.min_human_votes.max(1);
        for &(r, v) in votes.iter().filter(|(r, _)| *r > 0.0) {
            if agg.votes < needed {
                agg.weighted += r * v;
                agg.weight += r;
                agg.votes += 1;
                if agg.votes == needed {
                    agg.ready_at = Some(at);
                }
            }
        }
        let ready = agg.ready();
        observed.items.push(seq);
        if let Some(reviewer_limits) = limits.reviewers {
            let left_out = q.reviewers.left_out;
            let added = q.reviewers.add(&mut agg.review, verdicts, reviewer_limits);
            if added.changed {
                q.review_changed(seq);
            }
            observed.left_out = q.reviewers.left_out != left_out;
            let held = q.items.held(&self.items) as u64;
            let mark = || item_mark((project, item));
            observed.checkpoint = added.admitted > 0
                && Reviewers::checkpoint_due(mark, held, reviewer_limits.min_items);
            if added.changed {
                observed.reviewed((project, q));
            }
        }
        if let Some((h, ready_at)) = ready
            && let Some((waited, waiting)) = q.waiting.remove(item)
        {
            self.waits.remove(waited);
            observed.waiting.push(waited);
            observed.pairs = waiting
                .into_iter()
                .map(|w| Pair {
                    judge: w.judge,
                    item: item.to_owned(),
                    session: w.session,
                    s: w.s,
                    h,
                    at: w.at.max(ready_at),
                })
                .collect();
            if limits.reviewers.is_some() {
                let scores: SmallScores = observed.pairs.iter().map(|p| p.s).collect();
                self.judged((project, q), item, &scores, &mut observed);
            }
        }
        observed
    }

    /// Judge scores `scores` paired with `item` of `project` (whose judge quality is `q`): the
    /// judges' verdict on it, which its reviewers' agreement with the judges counts.
    fn judged(
        &mut self,
        (project, q): (&str, &mut ProjectQuality),
        item: &str,
        scores: &[f64],
        observed: &mut Observed,
    ) {
        let Some(seq) = self.items.place(project, item) else {
            return;
        };
        let Some((_, entry)) = self.items.get_mut(seq) else {
            return;
        };
        if let Some(undo) = &mut self.undo.0 {
            undo.changed(seq, || (project.into(), item.into(), entry.clone()));
        }
        for &s in scores {
            entry.review.judge(s);
        }
        q.review_changed(seq);
        observed.items.push(seq);
        if !entry.review.verdicts.is_empty() {
            observed.reviewed((project, q));
        }
    }

    /// A completed session's judge scores `(item, judge, s)` in `project`, completed at `at`:
    /// each pairs now if its item has `min_human_votes`, or waits for them (at most
    /// `max_judges` scores per item, the oldest dropped first and counted as forgotten).
    pub fn completed<P: HoldsQuality>(
        &mut self,
        projects: &mut Projects<P>,
        (project, session): (&str, &str),
        scores: &[(&str, &str, f64)],
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        let mut observed = Observed::default();
        for &(item, judge, s) in scores {
            let ready = self.item((project, item)).and_then(ItemVotes::ready);
            if let Some((h, ready_at)) = ready {
                observed.pairs.push(Pair {
                    judge: judge.to_owned(),
                    item: item.to_owned(),
                    session: session.to_owned(),
                    s,
                    h,
                    at: at.max(ready_at),
                });
                if limits.reviewers.is_some()
                    && let Some(q) = projects.get_mut(project).map(P::quality_mut)
                {
                    self.judged((project, q), item, &[s], &mut observed);
                }
                continue;
            }
            let (seq, q) = place_waiting(
                (projects, &mut self.waits),
                (project, item),
                limits,
                (&mut observed, &mut self.forgotten),
            );
            let Some((_, waiting)) = q.waiting.get_mut(item) else {
                continue;
            };
            waiting.push(Waiting {
                session: session.to_owned(),
                judge: judge.to_owned(),
                s,
                at,
            });
            // An item scored in session after session without votes keeps only its last
            // `max_judges` scores, and only as many of those as its changelog record has room
            // for: sessions and judges are named by ids of up to `limits.max_id_bytes`, which
            // JSON may spell in six bytes a byte. (The newest always fits on its own: the
            // configuration refuses ids too long for that.)
            let mut excess = waiting.len().saturating_sub(limits.max_judges.max(1));
            let at = (seq, project, item);
            if waiting_bytes_at_most(at, &waiting[excess..]) > limits.max_waiting_bytes {
                while excess + 1 < waiting.len()
                    && waiting_bytes(at, &waiting[excess..]) > limits.max_waiting_bytes
                {
                    excess += 1;
                }
            }
            waiting.drain(..excess);
            self.forgotten.forgotten += excess as u64;
            if observed.waiting.last() != Some(&seq) {
                observed.waiting.push(seq);
            }
        }
        observed
    }

    /// The items with votes at `places`, in order, with their projects: a changelog bucket.
    pub fn items_at(
        &self,
        places: Range<u64>,
    ) -> impl Iterator<Item = (u64, &str, &str, &ItemVotes)> {
        self.items
            .range(places)
            .map(|(seq, project, (item, votes))| (seq, project, item.as_str(), votes))
    }

    /// The items with waiting judge scores at `places`, in order, with their projects.
    pub fn waits_at<'a, P: HoldsQuality>(
        &'a self,
        projects: &'a Projects<P>,
        places: Range<u64>,
    ) -> impl Iterator<Item = (u64, &'a str, &'a str, &'a Vec<Waiting>)> {
        self.waits.range(places).filter_map(|(seq, project, ())| {
            let (item, waiting) = of(projects, project)?.waiting.at(seq)?;
            Some((seq, project, item, waiting))
        })
    }

    /// Puts a restored item's votes back at its place.
    pub fn restore_item<P: HoldsQuality>(
        &mut self,
        projects: &mut Projects<P>,
        (project, item): (&str, &str),
        seq: u64,
        votes: ItemVotes,
    ) {
        let held = self.items.restore(seq, (project, item), votes);
        let q = held_quality(projects, project);
        if let Some(held) = held {
            q.items.remove(held);
        }
        q.items.push(&self.items, seq);
    }

    /// Puts a restored item's waiting judge scores back at its place.
    pub fn restore_waiting<P: HoldsQuality>(
        &mut self,
        projects: &mut Projects<P>,
        (project, item): (&str, &str),
        seq: u64,
        waiting: Vec<Waiting>,
    ) {
        self.waits.restore(seq, project, ());
        if let Some(held) = held_quality(projects, project)
            .waiting
            .insert(item, seq, waiting)
            && held != seq
        {
            self.waits.remove(held);
        }
    }

    /// Whether the task's places and its projects' agree (for tests of the invariants).
    pub fn consistent<P: HoldsQuality>(&self, projects: &Projects<P>) -> bool {
        let (items, waits) = projects.values().map(P::quality).fold((0, 0), |(i, w), q| {
            (i + q.items.held(&self.items), w + q.waiting.len())
        });
        let items_held = self.items.consistent()
            && self.items.range(0..u64::MAX).all(|(seq, p, _)| {
                of(projects, p)
                    .is_some_and(|q| q.items.held_tags(&self.items).any(|(s, _)| s == seq))
            });
        let waits_held = self
            .waits
            .range(0..u64::MAX)
            .all(|(seq, p, ())| of(projects, p).is_some_and(|q| q.waiting.at(seq).is_some()));
        items == self.items.len()
            && waits == self.waits.len()
            && items_held
            && waits_held
            && projects.iter().all(|(id, p)| {
                let q = p.quality();
                let tagged = q.items.held_tags(&self.items).all(|(seq, tag)| {
                    let review = self.items.get(seq).map(|(_, votes)| &votes.review);
                    tag == UNREAD
                        || review
                            .is_some_and(|r| q.reviewers.book().is_some_and(|b| b.tags(tag, r)))
                });
                q.items.consistent(&self.items, id) && q.waiting.consistent() && tagged
            })
    }
}

/// A value forgotten to stay within the bounds: its place, project, key and value.
type Gone<V> = (u64, ProjectKey, ProjectKey, V);

/// The place of `project`'s `item` in the task's `items` (which hold its votes), `q` being the
/// project's judge quality, taking the next place if it is new: first the task's oldest are
/// forgotten down to `max_task_items` (their projects untouched: each drops the places at its
/// own next change, [`Held::prune`], as this project does here, or at the task's next
/// [`TaskQuality::sweep`]), then the project's down to `max_pending_items`. The places
/// forgotten and the reviewers they change are noted in `observed`, the items forgotten handed
/// to `undo` and counted in `forgotten`.
fn place_item(
    (q, items): (&mut ProjectQuality, &mut Items<ItemVotes>),
    (project, item): (&str, &str),
    limits: &QualityLimits,
    (observed, undo, forgotten): (&mut Observed, &mut Undo, &mut Tally),
) -> u64 {
    let unheld = match items.find(project, item) {
        Ok(seq) => {
            q.items.prune(items);
            return seq;
        }
        Err(unheld) => unheld,
    };
    while items.len() >= limits.max_task_items.max(1) {
        let Some((seq, (owner, (key, value)))) = items.pop_oldest() else {
            break;
        };
        let_go((seq, owner, key, value), items, (observed, undo, forgotten));
        forgotten.unswept += 1;
    }
    q.items.prune(items);
    while q.items.len() >= limits.max_pending_items.max(1) {
        let Some(seq) = q.items.oldest() else {
            break;
        };
        let Some((owner, (key, value))) = items.remove(seq) else {
            break;
        };
        q.items.remove(seq);
        if !value.review.verdicts.is_empty() {
            observed.reviewed((owner.as_str(), q));
        }
        let_go((seq, owner, key, value), items, (observed, undo, forgotten));
    }
    let value = ItemVotes::default();
    let seq = items.push((project, item), unheld, value, limits.max_task_items);
    q.items.push(items, seq);
    seq
}

/// Takes an item forgotten to stay within the bounds, out of the task's `items` now: counts it
/// and hands it to `undo` (the flush's), with whether its bucket holds any item still.
fn let_go(
    (seq, project, key, value): Gone<ItemVotes>,
    items: &Items<ItemVotes>,
    (observed, undo, forgotten): (&mut Observed, &mut Undo, &mut Tally),
) {
    forgotten.forgotten += 1;
    match &mut undo.0 {
        Some(undo) => {
            let emptied = items
                .range(bucket_places(seq / ITEM_BUCKET))
                .next()
                .is_none();
            undo.forgot(seq, (project, key, value), emptied);
        }
        // Without an undo its bucket is rewritten by this flush, if anything is.
        None => observed.items.push(seq),
    }
}

/// The place of `project`'s `item` among the task's items with waiting judge scores
/// (`places`), with the project's judge quality, taking the next place if it is new, as
/// [`place_item`] does. A waiting score's value is its project's, so forgetting one touches
/// its project; the places forgotten are noted in `observed` and counted in `forgotten`.
fn place_waiting<'a, P: HoldsQuality>(
    (projects, places): (&'a mut Projects<P>, &mut Places),
    (project, item): (&str, &str),
    limits: &QualityLimits,
    (observed, forgotten): (&mut Observed, &mut Tally),
) -> (u64, &'a mut ProjectQuality) {
    let held_at = projects
        .get_mut(project)
        .and_then(|q| q.quality_mut().waiting.get_mut(item))
        .map(|(seq, _)| seq);
    if let Some(seq) = held_at {
        return (seq, held_quality(projects, project));
    }
    while places.len() >= limits.max_task_items.max(1) {
        let Some((seq, (owner, ()))) = places.pop_oldest() else {
            break;
        };
        if let Some(q) = projects.get_mut(&owner).map(P::quality_mut) {
            q.waiting.remove_at(seq);
        }
        forgotten.forgotten += 1;
        observed.waiting.push(seq);
    }
    let q = held_quality(projects, project);
    let mut made_room = Vec::new();
    q.waiting
        .make_room(limits.max_pending_items, &mut made_room);
    for (seq, _, _) in made_room {
        places.remove(seq);
        forgotten.forgotten += 1;
        observed.waiting.push(seq);
    }
    let seq = places.push(project, (), limits.max_task_items);
    q.waiting.insert(item, seq, Vec::new());
    (seq, q)
}

/// The mark a checkpoint of the reviewer model is drawn by ([`Reviewers::checkpoint_due`]):
/// a hash of the item's project and id.
pub fn item_mark(at: (&str, &str)) -> u64 {
    hash_of(at)
}

/// A hash of two ids, the same in every process and every run (XXH3, unseeded), so that what
/// it decides is the same in a replay and the service: the pair of ids, joined by a byte no
/// UTF-8 id holds. Hashed in one call over the joined bytes (on the stack for ids of usual
/// length), which is XXH3 of the same bytes as its streaming form, without setting up the
/// streaming state for every vote.
fn hash_of((a, b): (&str, &str)) -> u64 {
    let len = a.len() + 1 + b.len();
    let mut stack = [0u8; 96];
    let mut heap = Vec::new();
    let joined = if len <= stack.len() {
        &mut stack[..len]
    } else {
        heap.resize(len, 0);
        &mut heap[..]
    };
    let (first, rest) = joined.split_at_mut(a.len());
    first.copy_from_slice(a.as_bytes());
    rest[0] = 0xFF;
    rest[1..].copy_from_slice(b.as_bytes());
    xxhash_rust::xxh3::xxh3_64(joined)
}

#[cfg(test)]
mod tests;
