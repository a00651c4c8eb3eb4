//! The judging pipeline (`jury.judge-scores`): ballots gathered into sessions; a completed
//! session becomes its `jury.consensus` record, its bias alerts, its leaderboard rows and its
//! judge-quality pairs (see [`super::quality`]).

use std::sync::Arc;

use serde::Serialize;

use super::contract::json;
use super::contract::judge::{BallotEvent, JudgeAction, JudgeEvent, JudgeLimits, Scale};
use super::contract::rejection::{ErrorCode, Rejection};
use super::journal::Change;
use super::model::bias::{audit_session, session_alerts};
use super::model::consensus::{Consensus, JudgeCounts, Ranked, interpretation};
use super::model::effective_judges::Basis;
use super::model::leaderboard::Standing;
use super::model::record_bytes::{ENVELOPE, json_bytes};
use super::model::session::{BookLimits, Completed, SessionBook};
use super::output::{Counted, Output, OutputTopic, OutputValue, Shows};
use super::quality::Weights;
use super::settings::Method;
use super::state::PartitionState;
use super::{Engine, Outcome, Record};

impl Engine {
    fn judge_limits(&self) -> JudgeLimits {
        let (l, s) = (&self.settings.limits, &self.settings.sessions);
        JudgeLimits {
            max_id_bytes: l.max_id_bytes,
            reject_unknown_fields: l.reject_unknown_fields,
            default_scale: Scale {
                min: s.default_scale_min,
                max: s.default_scale_max,
            },
        }
    }

    fn book_limits(&self) -> BookLimits {
        let s = &self.settings.sessions;
        BookLimits {
            timeout_secs: s.timeout_secs,
            max_open_per_project: s.max_open_per_project,
            max_open_total: s.max_open_total,
            completed_window: s.completed_window,
        }
    }

    pub(super) fn apply_judge(
        &self,
        state: &mut PartitionState,
        record: &Record<'_>,
        doc: &json::Json<'_>,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        let event = JudgeEvent::from_json(doc, self.judge_limits())?;
        self.check_key(record, event.project_id)?;
        let at = self.event_time(event.occurred_at, record)?;
        let (project, session) = (event.project_id, event.session_id);
        if state
            .judges(project)
            .is_some_and(|p| p.seen.contains(event.event_id))
        {
            return Err(Rejection::new(
                ErrorCode::DuplicateEventId,
                format!(
                    "`event_id` {:?} was already applied to project {project:?}",
                    event.event_id
                ),
            ));
        }
        if record.held_projects >= self.settings.limits.max_projects
            && !state.projects.contains_key(project)
        {
            return Err(super::project_limit(
                project,
                self.settings.limits.max_projects,
            ));
        }
        if SessionBook::is_completed(&state.projects, project, session) {
            return Err(Rejection::new(
                ErrorCode::SessionCompleted,
                format!("session {session:?} of project {project:?} has already completed"),
            ));
        }
        if let JudgeAction::Ballot(ballot) = &event.action {
            self.check_session_size(state, project, session, ballot)?;
        }
        let remembered = state
            .judges_mut(project)
            .seen
            .insert(event.event_id, self.settings.limits.dedupe_window);
        if let Some(r) = &remembered {
            state.note_window(project, r, false);
        }
        let mut done = Vec::new();
        match &event.action {
            JudgeAction::Ballot(ballot) => state.sessions.ballot(
                &mut state.projects,
                (project, session),
                (ballot, at),
                self.book_limits(),
                &mut done,
            ),
            JudgeAction::Close => state.sessions.close(
                &mut state.projects,
                (project, session),
                at,
                self.book_limits(),
                &mut done,
            ),
        }
        state.note(|| Change::Session {
            project: project.to_owned(),
            session: session.to_owned(),
        });
        state.note(|| Change::Watermark {
            project: project.to_owned(),
        });
        state.note(|| Change::Book);
        for completed in done {
            self.finish_session(state, completed, out);
        }
        Ok(Outcome::Applied)
    }

    /// Applies a tick of the service's clock (a [`super::TICK_TOPIC`] record, its time its
    /// timestamp): sessions with no ballot since the last tick become idle, and those idle for
    /// `sessions.idle_timeout_secs` complete (`idle`; see [`SessionBook::tick`]); leaderboard
    /// categories whose ratings lack a session are refitted ([`Engine::refit_leaderboards`]).
    pub(super) fn apply_tick(
        &self,
        state: &mut PartitionState,
        record: &Record<'_>,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        let now_ms = record.timestamp_ms.ok_or_else(|| {
            Rejection::new(ErrorCode::MissingTimestamp, "a tick without a timestamp")
        })?;
        let idle_secs = self.settings.sessions.idle_timeout_secs;
        let (mut idled, mut done) = (Vec::new(), Vec::new());
        if idle_secs > 0 {
            let idle_ms = i64::try_from(idle_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
            state.sessions.tick(
                &mut state.projects,
                (now_ms, idle_ms),
                self.book_limits(),
                (&mut idled, &mut done),
            );
        }
        for (project, session) in idled {
            state.note(|| Change::Session { project, session });
        }
        if !done.is_empty() {
            state.note(|| Change::Book);
        }
        for completed in done {
            self.finish_session(state, completed, out);
        }
        self.refit_leaderboards(state, out);
        Ok(Outcome::Applied)
    }

    /// Refits every leaderboard category whose ratings lack a session (see
    /// [`Board::refit_unfitted`](super::model::leaderboard::Board::refit_unfitted)) and
    /// publishes its rows, in order of project: at each tick, so that the ratings of a category
    /// whose sessions stop within `leaderboard.bt_interval_secs` of its last fit are fitted on
    /// them all a tick later, not at its next session, which may never come; and at the end of a
    /// replay.
    pub fn refit_leaderboards(&self, state: &mut PartitionState, out: &mut Vec<Output>) {
        for project in std::mem::take(&mut state.unfitted_boards.0) {
            let judges = state
                .projects
                .get_mut(&project)
                .and_then(|p| p.judges.as_mut());
            let Some(judges) = judges else {
                continue;
            };
            let cfg = &self.settings.leaderboard;
            for (category, standings) in judges.board.refit_unfitted(&project, cfg) {
                state.note(|| Change::Ranking {
                    project: project.to_string(),
                    category,
                });
                for standing in standings {
                    state.note(|| Change::Board {
                        project: standing.project_id.clone(),
                        category: standing.category.clone().unwrap_or_default(),
                        model: standing.model.clone(),
                    });
                    out.push(leaderboard_record(&standing));
                }
            }
        }
    }

    /// Refuses a ballot that would bring its session beyond `sessions.max_judges` judges or
    /// `sessions.max_candidates` candidates: a session's memory and its consensus record grow
    /// with both. Or beyond what its changelog record holds: at the most judges and candidates
    /// an open session's record could take many times the largest record the producer sends
    /// (a hundred ballots of a megabyte each), and a record the producer refused would stop
    /// the service at every restart.
    fn check_session_size(
        &self,
        state: &PartitionState,
        project: &str,
        session: &str,
        ballot: &BallotEvent<'_>,
    ) -> Result<(), Rejection> {
        let s = &self.settings.sessions;
        let (judges, candidates) =
            SessionBook::size_with(&state.projects, project, session, ballot);
        for (what, n, max, key) in [
            ("judges", judges, s.max_judges, "sessions.max_judges"),
            (
                "candidates",
                candidates,
                s.max_candidates,
                "sessions.max_candidates",
            ),
        ] {
            if n > max {
                return Err(Rejection::new(
                    ErrorCode::SessionLimit,
                    format!(
                        "the ballot would give session {session:?} of project {project:?} {n} \
                         {what}, more than {max} ({key})"
                    ),
                ));
            }
        }
        let largest = self.settings.record_bytes;
        let room = largest.saturating_sub(ENVELOPE.saturating_add(json_bytes(&(project, session))));
        let fits = SessionBook::fits(&state.projects, (project, session), ballot, room);
        if let Err(bytes) = fits {
            return Err(Rejection::new(
                ErrorCode::SessionLimit,
                format!(
                    "the ballot would make session {session:?} of project {project:?} {bytes} \
                     bytes of state, more than the {room} its changelog record holds (records \
                     of at most {largest} bytes: limits.max_message_bytes)"
                ),
            ));
        }
        Ok(())
    }

    /// Publishes a completed session: consensus, session and project bias alerts, leaderboard.
    fn finish_session(&self, state: &mut PartitionState, c: Completed, out: &mut Vec<Output>) {
        let cfg = &self.settings;
        state.note(|| Change::Session {
            project: c.project_id.clone(),
            session: c.session_id.clone(),
        });
        if let Some(r) = &c.remembered {
            state.note_window(&c.project_id, r, true);
        }
        state.note(|| Change::Audit {
            project: c.project_id.clone(),
        });
        let (analysis, weighting) = self.analyse(state, &c.project_id, &c.session);
        let audit = audit_session(&analysis, &cfg.bias);
        let effective = self.effective_judges(state, &c.project_id, &analysis);
        let key = Some(c.project_id.clone());
        let record = ConsensusRecord {
            project_id: &c.project_id,
            session_id: &c.session_id,
            completed_by: c.by.as_str(),
            method: match cfg.sessions.method {
                Method::NormalizedScores => "normalized_scores",
                Method::Borda => "borda",
            },
            category: c.session.category.as_deref(),
            last_event_at: c.at.to_string(),
            judges: analysis.judges,
            consensus: analysis.consensus.as_ref(),
            agreement: analysis.agreement,
            krippendorff_alpha: analysis.krippendorff_alpha,
            effective_judges: effective.map(|(n, _)| n),
            effective_judges_basis: effective.map(|(_, basis)| basis),
            weighting,
            rankings: &analysis.rankings,
            bias: SessionBias {
                length_r: audit.length_r,
                length_p: audit.length_p,
                position_variance: audit.position_variance,
                risk: audit.risk,
            },
            interpretation: interpretation(&analysis),
        };
        let mut consensus = Output::json(OutputTopic::Consensus, key.clone(), &record);
        if weighting == Weights::ConfiguredFallback {
            consensus.counted = Some(Counted::WeightsFallback);
        }
        let kept = match &consensus.value {
            // One the changelog could not hold is not kept.
            OutputValue::Json(text) if text.len() <= cfg.record_bytes / 4 => {
                Some(Arc::<str>::from(text.as_str()))
            }
            _ => None,
        };
        out.push(consensus);
        for alert in session_alerts(&c.project_id, &c.session_id, &analysis, &audit, &cfg.bias) {
            out.push(Output::alert(key.clone(), &alert));
        }
        let project = state.judges_mut(&c.project_id);
        // The kept records it added or dropped.
        let limit = cfg.sessions.completed_records;
        let changed = match kept {
            Some(record) if limit > 0 => {
                let mut changed = project.kept.keep(&c.session_id, record, limit);
                changed.push(c.session_id.clone());
                changed
            }
            _ => Vec::new(),
        };
        for alert in
            project
                .audit
                .update(&c.project_id, &c.session_id, &analysis, &audit, &cfg.bias)
        {
            out.push(Output::alert(key.clone(), &alert));
        }
        let category = c.session.category.as_deref();
        let update = project.board.add(
            &c.project_id,
            &c.session_id,
            category,
            c.at,
            &analysis,
            &cfg.leaderboard,
        );
        let ranked = project.board.ranked.get(category.unwrap_or(""));
        if ranked.is_some_and(|r| r.unfitted) {
            state.unfitted_boards.0.insert(c.project_id.as_str().into());
        }
        for session in changed {
            state.note(|| Change::Consensus {
                project: c.project_id.clone(),
                session,
            });
        }
        if update.ranking {
            state.note(|| Change::Ranking {
                project: c.project_id.clone(),
                category: category.unwrap_or("").to_owned(),
            });
        }
        for block in update.blocks {
            state.note(|| Change::RankingBlock {
                project: c.project_id.clone(),
                category: category.unwrap_or("").to_owned(),
                block,
            });
        }
        for standing in update.standings {
            state.note(|| Change::Board {
                project: standing.project_id.clone(),
                category: standing.category.clone().unwrap_or_default(),
                model: standing.model.clone(),
            });
            out.push(leaderboard_record(&standing));
        }
        self.pair_session(state, (&c.project_id, &c.session_id), &analysis, c.at, out);
    }
}

/// The `jury.leaderboard` record of `standing`. Also how the interactive queries' view is
/// seeded from restored state.
pub fn leaderboard_record(standing: &Standing) -> Output {
    Output::json(OutputTopic::Leaderboard, Some(standing.key()), standing).showing(Shows::Row {
        project: standing.project_id.clone(),
        category: standing.category.clone().unwrap_or_default(),
        model: standing.model.clone(),
        live: standing.sessions > 0,
    })
}

/// `jury.consensus`: one record per completed session.
#[derive(Debug, Serialize)]
struct ConsensusRecord<'a> {
    project_id: &'a str,
    session_id: &'a str,
    completed_by: &'static str,
    method: &'static str,
    category: Option<&'a str>,
    last_event_at: String,
    judges: JudgeCounts,
    consensus: Option<&'a Consensus>,
    agreement: Option<f64>,
    krippendorff_alpha: Option<f64>,
    /// `n² / Σ ρ` of the session's judges over the project's recent candidates.
    effective_judges: Option<f64>,
    effective_judges_basis: Option<Basis>,
    /// How its judges were weighted.
    weighting: Weights,
    rankings: &'a [Ranked<'a>],
    bias: SessionBias,
    interpretation: String,
}

#[derive(Debug, Serialize)]
struct SessionBias {
    length_r: f64,
    length_p: f64,
    position_variance: Option<f64>,
    risk: &'static str,
}
