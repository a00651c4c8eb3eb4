//! Open judge sessions of the projects of one state: ballots, completion and bounds.
//!
//! A session completes when its expected judges have all reported, on `session_close`, when its
//! project's event-time watermark passes its last activity plus the timeout, or when it is
//! evicted to respect the open-session bounds. The watermark is the project's own (the latest
//! event time of its judge-scores events), not its partition's: then when a session times out
//! depends only on its project's records in their order, never on which other projects share
//! the partition or how the partitions of the input were interleaved on their way to it, so
//! replay and the Kafka service complete the same sessions in the same order whatever the
//! partitioning. Only `max_open_total`, a memory bound of the whole state, looks across
//! projects.

use std::collections::BTreeMap;

use crate::engine::ids::{ProjectKey, Projects};

use serde::{Deserialize, Serialize};

use super::dedupe::{RecentIds, Remembered};
use super::record_bytes::{json_bytes, json_str_at_most};
use crate::engine::contract::judge::{BallotEvent, CandidateMeta, Status};
use crate::engine::contract::time::EventTime;

/// One judge's latest ballot in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ballot {
    pub status: Status,
    /// Normalized scores by candidate.
    pub scores: BTreeMap<String, f64>,
    pub ranking: Option<Vec<String>>,
}

/// An open session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Creation order within the partition (eviction takes the smallest).
    pub seq: u64,
    pub last_activity: EventTime,
    /// Latest ballot per judge; a later ballot from the same judge replaces the earlier one.
    pub ballots: BTreeMap<String, Ballot>,
    /// Candidate metadata merged over all ballots (a later value wins).
    pub candidates: BTreeMap<String, CandidateMeta>,
    pub expected_judges: Option<u32>,
    pub category: Option<String>,
    /// The time of the first tick after its last ballot (wall-clock milliseconds, as the tick
    /// carries it; see [`SessionBook::tick`]): `None` while no tick came since. Absent from
    /// changelogs written before ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<i64>,
}

impl Session {
    fn new(seq: u64, at: EventTime) -> Self {
        Session {
            seq,
            last_activity: at,
            ballots: BTreeMap::new(),
            candidates: BTreeMap::new(),
            expected_judges: None,
            category: None,
            idle_since: None,
        }
    }

    /// Records a ballot; the session's last activity becomes the latest event time seen, and
    /// it is no longer idle.
    pub fn add(&mut self, ballot: &BallotEvent<'_>, at: EventTime) {
        self.idle_since = None;
        self.last_activity = self.last_activity.max(at);
        for (id, meta) in &ballot.candidates {
            self.candidates.entry(id.clone()).or_default().merge(meta);
        }
        if ballot.expected_judges.is_some() {
            self.expected_judges = ballot.expected_judges;
        }
        if let Some(c) = ballot.category {
            self.category = Some(c.to_owned());
        }
        self.ballots.insert(
            ballot.judge.to_owned(),
            Ballot {
                status: ballot.status,
                scores: ballot.scores.clone(),
                ranking: ballot.ranking.clone(),
            },
        );
    }

    /// What the session would hold with `ballot` added: (judges, candidates). Its candidates
    /// are every id named in a score, a ranking or candidate metadata.
    pub fn size_with(&self, ballot: &BallotEvent<'_>) -> (usize, usize) {
        let judges = self.ballots.len() + usize::from(!self.ballots.contains_key(ballot.judge));
        (judges, candidates_with(Some(self), ballot))
    }

    /// The bytes of the session's changelog record (its JSON) once `ballot` is added, or a few
    /// more: the judge's ballot it replaces goes; the ballot comes, with its candidates'
    /// metadata, category and expected judges (each merged into what the session holds, which
    /// may then take fewer than both).
    pub fn bytes_with(&self, ballot: &BallotEvent<'_>) -> usize {
        let replaced = self.ballots.get(ballot.judge);
        let replaced = replaced.map_or(0, |b| json_bytes(&(ballot.judge, b)));
        json_bytes(self)
            .saturating_sub(replaced)
            .saturating_add(added_bytes(ballot))
    }

    /// At least [`Session::bytes_with`], from the lengths of the ids alone (each as JSON could
    /// spell it, six bytes a byte, and each number of the longest): what a ballot is checked
    /// against first, so that the session is written out to be counted only when long ids
    /// could make its record too large.
    pub fn bytes_at_most_with(&self, ballot: &BallotEvent<'_>) -> usize {
        let kept = self
            .ballots
            .iter()
            .filter(|(judge, _)| judge.as_str() != ballot.judge);
        let ballots = kept.map(|(judge, b)| ballot_at_most(judge, &b.scores, &b.ranking));
        let metas = self
            .candidates
            .iter()
            .map(|(id, meta)| meta_at_most(id, meta));
        let category = self.category.as_deref().map_or(0, id_at_most);
        [
            EMPTY_SESSION_BYTES.saturating_add(category),
            ballots.fold(0, usize::saturating_add),
            metas.fold(0, usize::saturating_add),
            added_at_most(ballot),
        ]
        .into_iter()
        .fold(0, usize::saturating_add)
    }

    /// All expected judges have reported.
    pub fn is_full(&self) -> bool {
        self.expected_judges
            .is_some_and(|n| self.ballots.len() >= n as usize)
    }
}

/// At least the bytes of a new session's changelog record before its first ballot
/// (`{"seq":...,"ballots":{},...}`, its numbers and time of the longest).
const EMPTY_SESSION_BYTES: usize = 192;

/// A ballot as [`Ballot`] writes it, borrowed from its event.
#[derive(Serialize)]
struct BallotWritten<'a> {
    status: Status,
    scores: &'a BTreeMap<String, f64>,
    ranking: &'a Option<Vec<String>>,
}

/// What `ballot` can add to its session's record: the judge's ballot as the session keeps it,
/// each candidate's metadata, the category and the expected judges, each with room for its
/// name and separators.
fn added_bytes(ballot: &BallotEvent<'_>) -> usize {
    let written = BallotWritten {
        status: ballot.status,
        scores: &ballot.scores,
        ranking: &ballot.ranking,
    };
    let candidates = ballot.candidates.iter().map(|c| json_bytes(&c));
    [
        json_bytes(&(ballot.judge, written)),
        candidates.fold(0, usize::saturating_add),
        json_bytes(&ballot.category),
        json_bytes(&ballot.expected_judges),
    ]
    .into_iter()
    .fold(0, usize::saturating_add)
}

/// At least the bytes an id takes in a session's record: itself as JSON could spell it, its
/// quotes and a separator.
fn id_at_most(id: &str) -> usize {
    json_str_at_most(id.len()).saturating_add(1)
}

/// At least the bytes a judge's ballot takes in its session's record: the judge, each score's
/// candidate and number, the ranking, and the ballot's field names.
fn ballot_at_most(
    judge: &str,
    scores: &BTreeMap<String, f64>,
    ranking: &Option<Vec<String>>,
) -> usize {
    let scores = scores.keys().map(|c| id_at_most(c).saturating_add(NUMBER));
    let ranked = ranking.iter().flatten().map(|c| id_at_most(c));
    [id_at_most(judge), 64]
        .into_iter()
        .chain(scores)
        .chain(ranked)
        .fold(0, usize::saturating_add)
}

/// At least the bytes a candidate's metadata takes in its session's record.
fn meta_at_most(id: &str, meta: &CandidateMeta) -> usize {
    let author = meta.author.as_deref().map_or(0, id_at_most);
    id_at_most(id)
        .saturating_add(author)
        .saturating_add(48 + 2 * NUMBER)
}

/// [`added_bytes`] at least, from lengths alone.
fn added_at_most(ballot: &BallotEvent<'_>) -> usize {
    let metas = ballot.candidates.iter().map(|(id, m)| meta_at_most(id, m));
    [
        ballot_at_most(ballot.judge, &ballot.scores, &ballot.ranking),
        ballot.category.map_or(0, id_at_most),
        NUMBER,
    ]
    .into_iter()
    .chain(metas)
    .fold(0, usize::saturating_add)
}

/// The most bytes a number takes in JSON (`-1.2345678901234567e-300`), with a separator.
const NUMBER: usize = 26;

/// The distinct candidate ids of `session` (if any) and `ballot` together.
fn candidates_with(session: Option<&Session>, ballot: &BallotEvent<'_>) -> usize {
    let held = session.into_iter().flat_map(|s| {
        let scored = s.ballots.values().flat_map(|b| {
            let ranked = b.ranking.iter().flatten();
            b.scores.keys().chain(ranked)
        });
        s.candidates.keys().chain(scored)
    });
    let new = ballot
        .scores
        .keys()
        .chain(ballot.ranking.iter().flatten())
        .chain(ballot.candidates.keys());
    held.chain(new)
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Why a session completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletedBy {
    AllJudges,
    SessionClose,
    Timeout,
    Evicted,
    /// No ballot for `sessions.idle_timeout_secs` of the service's ticks.
    Idle,
}

impl CompletedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            CompletedBy::AllJudges => "all_judges",
            CompletedBy::SessionClose => "session_close",
            CompletedBy::Timeout => "timeout",
            CompletedBy::Evicted => "evicted",
            CompletedBy::Idle => "idle",
        }
    }
}

/// A session that has just completed, handed to consensus and the audits.
#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    pub project_id: String,
    pub session_id: String,
    pub by: CompletedBy,
    /// The event time the completion is attributed to (the session's last activity, or the
    /// watermark for a timeout).
    pub at: EventTime,
    pub session: Session,
    /// How the completed-session window changed (for the changelog).
    pub remembered: Option<Remembered>,
}

/// The session ids of one project that are open or recently completed, and its event time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectSessions {
    pub open: BTreeMap<String, Session>,
    pub completed: RecentIds,
    /// The latest event time of the project's accepted judge-scores events: its sessions time
    /// out against it.
    pub watermark: Option<EventTime>,
    /// (last activity, seq) -> open session: timeout order. Derived from `open`.
    by_activity: BTreeMap<(EventTime, u64), String>,
}

/// What the book keeps across the projects of one state: their sessions' creation counter and
/// age order (`sessions.max_open_total` bounds them all). Each project keeps its own sessions
/// ([`ProjectSessions`]), beside the rest of it, in the state's map of projects that every
/// method is handed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionBook {
    next_seq: u64,
    /// seq -> (project, session): age order, for eviction.
    by_age: BTreeMap<u64, (String, String)>,
}

/// A project as the book finds it in its state's map: what holds its sessions.
pub trait HoldsSessions: Default {
    fn sessions(&self) -> &ProjectSessions;
    fn sessions_mut(&mut self) -> &mut ProjectSessions;
}

impl HoldsSessions for ProjectSessions {
    fn sessions(&self) -> &ProjectSessions {
        self
    }
    fn sessions_mut(&mut self) -> &mut ProjectSessions {
        self
    }
}

/// The sessions of `project`, if held.
fn of<'a, P: HoldsSessions>(
    projects: &'a Projects<P>,
    project: &str,
) -> Option<&'a ProjectSessions> {
    projects.get(project).map(P::sessions)
}

/// The sessions of `project`, if held.
fn of_mut<'a, P: HoldsSessions>(
    projects: &'a mut Projects<P>,
    project: &str,
) -> Option<&'a mut ProjectSessions> {
    projects.get_mut(project).map(P::sessions_mut)
}

/// The sessions of `project`, which is created if new (a key of up to 24 bytes allocates
/// nothing).
fn held<'a, P: HoldsSessions>(
    projects: &'a mut Projects<P>,
    project: &str,
) -> &'a mut ProjectSessions {
    projects
        .entry(ProjectKey::from(project))
        .or_default()
        .sessions_mut()
}

/// Bounds and windows the book enforces.
#[derive(Debug, Clone, Copy)]
pub struct BookLimits {
    pub timeout_secs: u64,
    pub max_open_per_project: usize,
    pub max_open_total: usize,
    pub completed_window: usize,
}

impl SessionBook {
    /// Whether the session has already completed (a ballot for it is rejected).
    pub fn is_completed<P: HoldsSessions>(
        projects: &Projects<P>,
        project: &str,
        session: &str,
    ) -> bool {
        of(projects, project)
            .is_some_and(|p| p.completed.contains(session) && !p.open.contains_key(session))
    }

    /// What session `session_id` of `project` would hold with `ballot` added: (judges,
    /// candidates), counting from nothing if it is not open.
    pub fn size_with<P: HoldsSessions>(
        projects: &Projects<P>,
        project: &str,
        session_id: &str,
        ballot: &BallotEvent<'_>,
    ) -> (usize, usize) {
        match of(projects, project).and_then(|p| p.open.get(session_id)) {
            Some(s) => s.size_with(ballot),
            None => (1, candidates_with(None, ballot)),
        }
    }

    /// Whether the changelog record of `project`'s session `session_id` takes at most `room`
    /// bytes with `ballot` added; if not, about how many it would take
    /// ([`Session::bytes_with`]).
    pub fn fits<P: HoldsSessions>(
        projects: &Projects<P>,
        (project, session_id): (&str, &str),
        ballot: &BallotEvent<'_>,
        room: usize,
    ) -> Result<(), usize> {
        let open = of(projects, project).and_then(|p| p.open.get(session_id));
        let at_most = match open {
            Some(s) => s.bytes_at_most_with(ballot),
            None => EMPTY_SESSION_BYTES.saturating_add(added_at_most(ballot)),
        };
        if at_most <= room {
            return Ok(());
        }
        let bytes = match open {
            Some(s) => s.bytes_with(ballot),
            None => EMPTY_SESSION_BYTES.saturating_add(added_bytes(ballot)),
        };
        if bytes <= room { Ok(()) } else { Err(bytes) }
    }

    /// Open sessions on this partition.
    pub fn open_sessions(&self) -> usize {
        self.by_age.len()
    }

    /// Adds a ballot, then completes what it causes: the session itself when all its judges have
    /// reported, the oldest sessions beyond the bounds, and every session the advanced watermark
    /// times out. Completed sessions are appended to `done` in completion order.
    pub fn ballot<P: HoldsSessions>(
        &mut self,
        projects: &mut Projects<P>,
        (project, session_id): (&str, &str),
        (ballot, at): (&BallotEvent<'_>, EventTime),
        limits: BookLimits,
        done: &mut Vec<Completed>,
    ) {
        let p = held(projects, project);
        let seq = match p.open.get(session_id).map(|s| (s.last_activity, s.seq)) {
            Some((last, seq)) => {
                p.by_activity.remove(&(last, seq));
                seq
            }
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.by_age
                    .insert(seq, (project.to_owned(), session_id.to_owned()));
                p.open.insert(session_id.to_owned(), Session::new(seq, at));
                seq
            }
        };
        let Some(s) = p.open.get_mut(session_id) else {
            return;
        };
        s.add(ballot, at);
        let (last, full) = (s.last_activity, s.is_full());
        p.by_activity.insert((last, seq), session_id.to_owned());
        if full {
            let by = (CompletedBy::AllJudges, last);
            self.complete(projects, (project, session_id), by, limits, done);
        }
        self.enforce_bounds(projects, project, limits, done);
        self.advance(projects, project, at, limits, done);
    }

    /// Completes a session on `session_close` (an empty one if no ballot arrived yet).
    pub fn close<P: HoldsSessions>(
        &mut self,
        projects: &mut Projects<P>,
        (project, session_id): (&str, &str),
        at: EventTime,
        limits: BookLimits,
        done: &mut Vec<Completed>,
    ) {
        let p = held(projects, project);
        if p.open.contains_key(session_id) {
            let by = (CompletedBy::SessionClose, at);
            self.complete(projects, (project, session_id), by, limits, done);
        } else {
            let remembered = p.completed.insert(session_id, limits.completed_window);
            done.push(Completed {
                project_id: project.to_owned(),
                session_id: session_id.to_owned(),
                by: CompletedBy::SessionClose,
                at,
                session: Session::new(u64::MAX, at),
                remembered,
            });
        }
        self.advance(projects, project, at, limits, done);
    }

    fn complete<P: HoldsSessions>(
        &mut self,
        projects: &mut Projects<P>,
        (project, session_id): (&str, &str),
        (by, at): (CompletedBy, EventTime),
        limits: BookLimits,
        done: &mut Vec<Completed>,
    ) {
        let Some(p) = of_mut(projects, project) else {
            return;
        };
        let Some(session) = p.open.remove(session_id) else {
            return;
        };
        let remembered = p.completed.insert(session_id, limits.completed_window);
        p.by_activity.remove(&(session.last_activity, session.seq));
        self.by_age.remove(&session.seq);
        let at = if by == CompletedBy::SessionClose {
            at.max(session.last_activity)
        } else {
            at
        };
        done.push(Completed {
            project_id: project.to_owned(),
            session_id: session_id.to_owned(),
            by,
            at,
            session,
            remembered,
        });
    }

    fn enforce_bounds<P: HoldsSessions>(
        &mut self,
        projects: &mut Projects<P>,
        project: &str,
        limits: BookLimits,
        done: &mut Vec<Completed>,
    ) {
        loop {
            let oldest = of(projects, project)
                .filter(|p| p.open.len() > limits.max_open_per_project)
                .and_then(|p| p.open.iter().min_by_key(|(_, s)| s.seq))
                .map(|(id, s)| (id.clone(), s.last_activity));
            let Some((id, last)) = oldest else { break };
            let by = (CompletedBy::Evicted, last);
            self.complete(projects, (project, &id), by, limits, done);
        }
        while self.by_age.len() > limits.max_open_total {
            let Some((_, (p, s))) = self.by_age.first_key_value().map(|(k, v)| (*k, v.clone()))
            else {
                break;
            };
            let last = of(projects, &p)
                .and_then(|x| x.open.get(&s))
                .map_or(EventTime::MIN, |x| x.last_activity);
            self.complete(
                projects,
                (&p, &s),
                (CompletedBy::Evicted, last),
                limits,
                done,
            );
        }
    }

    /// Moves `project`'s watermark to `at` (never back) and times out its sessions idle for
    /// longer than the timeout: those whose last activity + timeout is before the watermark.
    fn advance<P: HoldsSessions>(
        &mut self,
        projects: &mut Projects<P>,
        project: &str,
        at: EventTime,
        limits: BookLimits,
        done: &mut Vec<Completed>,
    ) {
        let p = held(projects, project);
        let wm = p.watermark.map_or(at, |w| w.max(at));
        p.watermark = Some(wm);
        let timeout = i64::try_from(limits.timeout_secs).unwrap_or(i64::MAX);
        loop {
            let Some(p) = of(projects, project) else {
                return;
            };
            let Some((&(last, _), s)) = p.by_activity.first_key_value() else {
                return;
            };
            if last.plus_seconds(timeout) >= wm {
                return;
            }
            let s = s.clone();
            let by = (CompletedBy::Timeout, wm);
            self.complete(projects, (project, &s), by, limits, done);
        }
    }

    /// A tick at wall-clock time `now_ms` (see `crate::engine::TICK_TOPIC`): every open session
    /// of the state, oldest first, that had a ballot since the last tick is idle from now on
    /// (its `(project, session)` appended to `idled`, for the changelog), and every one idle
    /// since a tick at least `idle_ms` before this one completes (`idle`, at its last activity's
    /// event time), appended to `done`. A function of the records and ticks in the order the
    /// log holds them, so replay of the same log completes the same sessions.
    ///
    /// A tick before the one a session went idle at (a writer whose clock is behind the last
    /// one's: the partition moved to an instance with a slower clock) makes it idle from this
    /// tick instead: otherwise it would wait the clocks' difference on top of the timeout, an
    /// hour for a clock an hour behind. So a session waits at most `idle_ms` of ticks once
    /// they run forward again, whatever clock went before.
    pub fn tick<P: HoldsSessions>(
        &mut self,
        projects: &mut Projects<P>,
        (now_ms, idle_ms): (i64, i64),
        limits: BookLimits,
        (idled, done): (&mut Vec<(String, String)>, &mut Vec<Completed>),
    ) {
        let open: Vec<(String, String)> = self.by_age.values().cloned().collect();
        for (project, session_id) in open {
            let Some(s) = of_mut(projects, &project).and_then(|p| p.open.get_mut(&session_id))
            else {
                continue;
            };
            let since = match s.idle_since {
                Some(since) if since <= now_ms => since,
                // No tick since its last ballot, or this one is before the one it went idle at.
                _ => {
                    s.idle_since = Some(now_ms);
                    idled.push((project, session_id));
                    continue;
                }
            };
            if now_ms.saturating_sub(since) >= idle_ms {
                let by = (CompletedBy::Idle, s.last_activity);
                self.complete(projects, (&project, &session_id), by, limits, done);
            }
        }
    }

    /// The creation counter, for the changelog.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Rebuilds a book from its parts (the changelog's view of it): the projects' open
    /// sessions, and the creation counter. The indexes are derived from the sessions.
    pub fn restore<P: HoldsSessions>(projects: &mut Projects<P>, next_seq: u64) -> Self {
        let mut by_age = BTreeMap::new();
        for (project, p) in projects.iter_mut() {
            let p = p.sessions_mut();
            p.by_activity.clear();
            for (id, s) in &p.open {
                p.by_activity.insert((s.last_activity, s.seq), id.clone());
                by_age.insert(s.seq, (project.to_string(), id.clone()));
            }
        }
        SessionBook { next_seq, by_age }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(
        judge: &'a str,
        scores: &[(&str, f64)],
        category: Option<&'a str>,
    ) -> BallotEvent<'a> {
        BallotEvent {
            judge,
            status: Status::Ok,
            scores: scores.iter().map(|(c, s)| ((*c).to_owned(), *s)).collect(),
            ranking: Some(scores.iter().map(|(c, _)| (*c).to_owned()).collect()),
            candidates: [(
                "A".to_owned(),
                CandidateMeta {
                    author: Some("m/\u{1}".to_owned()),
                    words: Some(1e300),
                    position: Some(u64::MAX),
                },
            )]
            .into(),
            expected_judges: Some(u32::MAX),
            category,
        }
    }

    /// What a ballot adds is counted from above, and not by much: a new judge, a judge's
    /// ballot replaced by a shorter one, a candidate's metadata merged again.
    #[test]
    fn a_sessions_bytes_with_a_ballot_bound_its_record_closely() {
        let at = EventTime::from_epoch_millis(1_795_168_800_000).unwrap();
        let mut session = Session::new(7, at);
        let ballots = [
            event("j1", &[("A", 0.25), ("B\"", 0.5)], Some("chat")),
            event("j2", &[("A", 1.0 / 3.0)], None),
            event("j1", &[("A", 0.75)], Some("code")),
        ];
        for ballot in &ballots {
            let counted = session.bytes_with(ballot);
            let at_most = session.bytes_at_most_with(ballot);
            session.add(ballot, at);
            let written = json_bytes(&session);
            assert!(counted >= written, "{counted} < {written}");
            assert!(counted <= written + 128, "{counted} against {written}");
            assert!(at_most >= written, "{at_most} < {written}");
        }
        // The ballot as counted is the ballot as kept.
        let kept = &session.ballots["j1"];
        let written = BallotWritten {
            status: kept.status,
            scores: &kept.scores,
            ranking: &kept.ranking,
        };
        assert_eq!(
            serde_json::to_string(&written).ok(),
            serde_json::to_string(kept).ok()
        );
    }

    proptest::proptest! {
        /// Whatever the ids (quotes, control characters, any length) and scores, both counts
        /// of a ballot's session are at least the bytes its record then takes.
        #[test]
        fn a_sessions_counts_are_never_below_its_record(
            ballots in proptest::collection::vec(
                (
                    "[a-c\"\\\u{1}é]{0,6}",
                    proptest::collection::btree_map("[a-c\"\u{1}]{0,5}", -1e300f64..1e300, 0..4),
                    proptest::option::of("[x\u{1f}]{0,4}"),
                    proptest::option::of(0u32..u32::MAX),
                ),
                1..8,
            ),
        ) {
            let at = EventTime::from_epoch_millis(1_795_168_800_000).unwrap();
            let mut session = Session::new(3, at);
            for (judge, scores, category, expected) in &ballots {
                let ranking = Some(scores.keys().cloned().collect());
                let candidates = scores
                    .keys()
                    .map(|c| (c.clone(), CandidateMeta { author: category.clone(), ..Default::default() }))
                    .collect();
                let ballot = BallotEvent {
                    judge,
                    status: Status::Ok,
                    scores: scores.clone(),
                    ranking,
                    candidates,
                    expected_judges: *expected,
                    category: category.as_deref(),
                };
                let (counted, at_most) = (session.bytes_with(&ballot), session.bytes_at_most_with(&ballot));
                session.add(&ballot, at);
                let written = json_bytes(&session);
                proptest::prop_assert!(counted >= written && at_most >= written, "{counted}, {at_most} < {written}");
            }
        }
    }

    /// A session before its first ballot, of the longest place and time, fits what is counted
    /// for it.
    #[test]
    fn an_empty_session_takes_at_most_what_is_counted() {
        let late = EventTime::new(253_402_300_799, 999_999_999).unwrap();
        let mut session = Session::new(u64::MAX, late);
        session.idle_since = Some(i64::MIN);
        assert!(
            json_bytes(&session) <= EMPTY_SESSION_BYTES,
            "{}",
            json_bytes(&session)
        );
    }
}
