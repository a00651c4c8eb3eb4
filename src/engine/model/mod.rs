//! The formulas: HumanJudge scoring, duplicate windows, judge sessions, consensus, the bias
//! audit, statistics, the leaderboard, Bradley-Terry ratings, a judge's agreement with the
//! humans, judge quality, the effective number of judges and reviewer reliability, and the
//! bounded item store judge quality and reviewer reliability share. Pure functions and the
//! state they keep; each is documented with its formula in docs/ (reviewer reliability:
//! docs/reviewers.md).

pub mod agreement;
pub mod bias;
pub mod bounded;
pub mod bradley_terry;
pub mod consensus;
pub mod dedupe;
pub mod effective_judges;
pub mod judge_quality;
pub mod leaderboard;
pub mod record_bytes;
pub mod reviewers;
pub mod score;
pub mod session;
pub mod stats;
