//! Crash injection for the recovery tests, built only with the `fault-injection` cargo feature
//! (the test script enables it). Two environment variables make the service abort at the two
//! moments recovery must survive:
//! - `JURYSTREAM_CRASH_AFTER_CHANGELOG`: after an epoch's changelog is acknowledged and before
//!   its offsets are committed (the changelog is ahead of the commits);
//! - `JURYSTREAM_CRASH_MID_CHANGELOG=v|j`: in the middle of the first flush of a votes (`v`) or
//!   judge-scores (`j`) partition that has at least four records, its first half acknowledged
//!   and its offset record not written.
//!
//! One makes a restore see what a broker can report, a partition's end below records it has
//! acknowledged (tansu's high watermark lags its last batch): `JURYSTREAM_RESTORE_STOPS_SHORT`
//! takes every changelog partition's end as reached before a restore has read a record, so what
//! the state holds comes from reading on to the group's commit (see `tasks::catch_up`).
//!
//! And one makes the broker's refusal of a forward happen where the broker would not refuse it
//! (a broker that does not enforce `max.message.bytes`): `JURYSTREAM_REFUSE_FORWARD=TEXT`
//! treats the forward of every input record whose payload contains `TEXT` as refused for good
//! (message too large), as a delivery report would say, instead of producing it.
//!
//! And one makes commits fail as a broker in the middle of a rebalance makes them fail:
//! `JURYSTREAM_FAIL_COMMITS=N` fails each stage's first `N` offset commits with
//! `REBALANCE_IN_PROGRESS`, without sending them.
//!
//! And one steps the wall clock the ticks' clock reads (see [`super::wall_clock`]), as a
//! virtual machine resumed or an NTP correction steps it: `JURYSTREAM_STEP_CLOCK_MS=N` (signed)
//! moves it `N` ms from the processor's third tick on, so that a session can go idle by the
//! true clock first.
//!
//! And one sets the wall clock the processors read behind the clock librdkafka stamps records
//! with, as if the forwards they apply came from an instance whose clock is ahead:
//! `JURYSTREAM_CLOCK_BEHIND_MS=N`.
//!
//! Without the feature [`Faults::from_env`] is always empty and nothing here ever aborts.

use std::time::Duration;

use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

use crate::changelog;

/// Which crash the environment asked for.
#[derive(Debug, Default)]
pub(super) struct Faults {
    after_changelog: bool,
    /// `v` or `j`: see [`flush_cut`].
    mid_changelog: Option<String>,
    /// Forwards whose payload contains this are refused.
    refuse_forward: Option<String>,
    /// A restore's read takes every partition's end as reached before reading a record.
    pub restore_stops_short: bool,
    /// Offset commits still to fail.
    failing_commits: u32,
    /// How far the wall clock the ticks read is stepped, in milliseconds, and the ticks' clock's
    /// readings so far.
    clock_step: (i64, u32),
    /// How far behind the processors read the wall clock, in milliseconds.
    pub clock_behind_ms: i64,
}

/// The number the environment variable `name` holds; 0 if it holds none.
fn number<T: std::str::FromStr + Default>(name: &str) -> T {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_default()
}

impl Faults {
    /// The crashes the environment asks for; none without the `fault-injection` feature.
    pub fn from_env() -> Faults {
        if !cfg!(feature = "fault-injection") {
            return Faults::default();
        }
        Faults {
            after_changelog: std::env::var_os("JURYSTREAM_CRASH_AFTER_CHANGELOG").is_some(),
            mid_changelog: std::env::var("JURYSTREAM_CRASH_MID_CHANGELOG").ok(),
            refuse_forward: std::env::var("JURYSTREAM_REFUSE_FORWARD").ok(),
            restore_stops_short: std::env::var_os("JURYSTREAM_RESTORE_STOPS_SHORT").is_some(),
            failing_commits: number("JURYSTREAM_FAIL_COMMITS"),
            clock_step: (number("JURYSTREAM_STEP_CLOCK_MS"), 0),
            clock_behind_ms: number("JURYSTREAM_CLOCK_BEHIND_MS"),
        }
    }

    /// How far this reading of the ticks' clock is to step the wall clock (counting it).
    pub fn clock_step_ms(&mut self) -> i64 {
        let (step, reads) = &mut self.clock_step;
        *reads = reads.saturating_add(1);
        if *reads > 2 { *step } else { 0 }
    }

    /// Whether this offset commit is to fail as the broker would refuse it (counting it).
    pub fn fails_commit(&mut self) -> bool {
        let fails = self.failing_commits > 0;
        self.failing_commits = self.failing_commits.saturating_sub(1);
        fails
    }

    /// Whether the forward of `payload` is to be refused as the broker would refuse it.
    pub fn refuses_forward(&self, payload: &[u8]) -> bool {
        self.refuse_forward.as_ref().is_some_and(|text| {
            payload
                .windows(text.len().max(1))
                .any(|w| w == text.as_bytes())
        })
    }

    /// Where to abort while writing an epoch's changelog `records`, if anywhere.
    pub fn changelog_cut(&self, records: &changelog::Records) -> Option<usize> {
        self.mid_changelog
            .as_deref()
            .and_then(|tag| flush_cut(records, tag))
    }

    /// Dies with a partition's flush written in part: the records before the cut (`written`)
    /// acknowledged, the rest never sent.
    pub fn abort_mid_changelog<C: ProducerContext>(
        &self,
        producer: &BaseProducer<C>,
        written: usize,
    ) -> ! {
        let flushed = producer.flush(Duration::from_secs(30));
        tracing::warn!(
            records = written,
            ?flushed,
            "JURYSTREAM_CRASH_MID_CHANGELOG: aborting inside a changelog write"
        );
        std::process::abort();
    }

    /// Dies, if asked to, in the window where an epoch's changelog is acknowledged and its
    /// `commits` offsets are not committed yet.
    pub fn before_commit(&self, commits: usize) {
        if self.after_changelog && commits > 0 {
            tracing::warn!("JURYSTREAM_CRASH_AFTER_CHANGELOG: aborting before the commit");
            std::process::abort();
        }
    }
}

/// Where to cut an epoch's changelog for `JURYSTREAM_CRASH_MID_CHANGELOG`: in the middle of the
/// first flush of a `tag` unit (`p` projects, `v` votes, `j` judge scores) that has at least
/// four records (state records, a redo record among them, its offset record last), so that the
/// flush is written in part and its offset record is not.
fn flush_cut(records: &changelog::Records, tag: &str) -> Option<usize> {
    let prefix = format!("[\"{tag}\",");
    let mut start = 0;
    for (i, key) in records.iter().map(|r| r.key).enumerate() {
        if !key.ends_with(b"\"offset\"]") {
            continue;
        }
        // The flush of one unit ends with its offset record and starts after the one before.
        let end = i + 1;
        if key.starts_with(prefix.as_bytes()) && end - start >= 4 {
            return Some(start + (end - start) / 2);
        }
        start = end;
    }
    None
}
