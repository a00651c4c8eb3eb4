//! What the service does with the wall clock, which can step (a virtual machine resumed, NTP
//! correcting a clock that was far off) and differ between instances: the time its ticks carry
//! ([`TickClock`]), and the watch for another instance's clock ahead of this one's
//! ([`ClockWatch`]).
//!
//! The ticks (see [`crate::engine::TICK_TOPIC`]) carry the wall clock read once, when the
//! processor starts, moved on by the monotonic clock. A session completes `idle` when the ticks'
//! times say `sessions.idle_timeout_secs` passed, so a wall clock stepped while the service runs
//! must not move them: stepped forward an hour, every idle session would complete at the next
//! tick, early; stepped back, every one would wait that hour more. The monotonic clock measures
//! the time that passed, which is what idleness is.
//!
//! A step is still said (a warning and `jurystream_clock_steps_total`): it is a fault of the
//! host's time synchronisation, which the publication latency reads, and the ticks of any
//! instance started on the host after it. The ticks keep the start's wall clock until the
//! instance restarts; the engine bounds what a later owner's different clock can do (see
//! [`crate::engine::model::session::SessionBook::tick`]), and [`ClockWatch`] says when two
//! instances' clocks disagree.

use std::time::{Duration, Instant};

/// A change of the wall clock against the monotonic one between two readings that is this
/// large or larger is a step. NTP's slewing moves the two apart by at most half a millisecond a
/// second, and readings are at most a minute apart (ticks come every tenth of the idle timeout,
/// within 1–60 s): a step is thirty times anything slewing does between two of them.
pub(super) const STEP_MS: i64 = 1_000;

/// The ticks' clock of one processor.
#[derive(Debug)]
pub(super) struct TickClock {
    /// The wall clock (milliseconds since the epoch) when the processor started, and the
    /// monotonic instant read with it.
    start: (i64, Instant),
    /// How far the wall clock was ahead of the ticks' clock at the last reading.
    ahead_ms: i64,
}

/// A reading of a [`TickClock`].
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TickTime {
    /// The tick's time, in milliseconds since the epoch.
    pub ms: i64,
    /// How far the wall clock stepped since the last reading (forward positive), if it did.
    pub stepped_ms: Option<i64>,
}

impl TickClock {
    /// A clock that reads `wall_ms` at `at`.
    pub fn start(wall_ms: i64, at: Instant) -> TickClock {
        TickClock {
            start: (wall_ms, at),
            ahead_ms: 0,
        }
    }

    /// The ticks' time at `at`, when the wall clock reads `wall_ms`: the start's wall clock and
    /// the monotonic time since, never the wall clock itself.
    pub fn read(&mut self, wall_ms: i64, at: Instant) -> TickTime {
        let since = at.saturating_duration_since(self.start.1).as_millis();
        let ms = self
            .start
            .0
            .saturating_add(i64::try_from(since).unwrap_or(i64::MAX));
        let ahead = wall_ms.saturating_sub(ms);
        let step = ahead.saturating_sub(self.ahead_ms);
        self.ahead_ms = ahead;
        TickTime {
            ms,
            stepped_ms: (step.saturating_abs() >= STEP_MS).then_some(step),
        }
    }
}

/// How often, at most, one processor says that another instance's clock is ahead of its own.
const SAY_DISAGREEMENT_EVERY: Duration = Duration::from_secs(60);

/// Watches the forwards a processor applies for a clock ahead of its own. A forward's timestamp
/// is the forwarding instance's clock when it read the input record, before this processor
/// polled it: on one clock it is never ahead of the pass that applies it, so a forward stamped a
/// second or more after that pass began was stamped by a clock that far ahead. Instances whose
/// clocks disagree decide idle sessions differently when a partition moves between them (see
/// [`crate::engine::model::session::SessionBook::tick`]), so it is said, once a minute at most.
#[derive(Debug, Default)]
pub(super) struct ClockWatch {
    /// When it was last said.
    said: Option<Instant>,
}

impl ClockWatch {
    /// A forward stamped `forwarded_ms`, applied in a pass that began at wall-clock `now_ms`
    /// (at `at`): how far its clock is ahead, if that is [`STEP_MS`] or more and was not said in
    /// the last minute.
    pub fn forwarded(&mut self, forwarded_ms: i64, now_ms: i64, at: Instant) -> Option<i64> {
        let ahead = forwarded_ms.saturating_sub(now_ms);
        let recent = self
            .said
            .is_some_and(|said| at.saturating_duration_since(said) < SAY_DISAGREEMENT_EVERY);
        if ahead < STEP_MS || recent {
            return None;
        }
        self.said = Some(at);
        Some(ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000;

    /// The ticks follow the monotonic clock: a wall clock stepped an hour forward, then two
    /// back, moves them not at all, and each step is said once, by its size.
    #[test]
    fn a_stepped_wall_clock_moves_no_tick_and_is_said_once() {
        let at = Instant::now();
        let mut clock = TickClock::start(T0, at);
        let secs = |s: u64| at + Duration::from_secs(s);
        let hour = 3_600_000;
        assert_eq!(
            clock.read(T0 + 60_000, secs(60)),
            TickTime {
                ms: T0 + 60_000,
                stepped_ms: None
            }
        );
        assert_eq!(
            clock.read(T0 + 120_000 + hour, secs(120)),
            TickTime {
                ms: T0 + 120_000,
                stepped_ms: Some(hour)
            }
        );
        // Still an hour ahead: no step more.
        assert_eq!(clock.read(T0 + 180_000 + hour, secs(180)).stepped_ms, None);
        assert_eq!(
            clock.read(T0 + 240_000 - hour, secs(240)),
            TickTime {
                ms: T0 + 240_000,
                stepped_ms: Some(-2 * hour)
            }
        );
    }

    /// Slewing, the wall clock moving apart from the monotonic one by a few milliseconds a
    /// minute, is no step, however long it goes on; a change of a second between two readings
    /// is one.
    #[test]
    fn slewing_is_no_step() {
        let at = Instant::now();
        let mut clock = TickClock::start(T0, at);
        for minute in 1..=1_000u64 {
            let wall = T0 + 60_000 * minute as i64 + 30 * minute as i64;
            let read = clock.read(wall, at + Duration::from_secs(60 * minute));
            assert_eq!(read.stepped_ms, None, "minute {minute}");
        }
        let mut clock = TickClock::start(T0, at);
        let read = clock.read(T0 + 1_000 - STEP_MS, at + Duration::from_secs(1));
        assert_eq!(read.stepped_ms, Some(-STEP_MS));
    }

    /// A reading before the start (an instant from before it) or at the far end of time stays
    /// a time, never a wrap.
    #[test]
    fn readings_saturate() {
        let at = Instant::now();
        let mut clock = TickClock::start(i64::MAX - 5, at + Duration::from_secs(10));
        assert_eq!(clock.read(i64::MAX, at).ms, i64::MAX - 5);
        assert_eq!(
            clock.read(i64::MIN, at + Duration::from_secs(20)).ms,
            i64::MAX
        );
    }

    /// A forward stamped by a clock a second or more ahead of the pass that applies it is said,
    /// once a minute at most; one stamped before the pass began (the same clock, or one behind)
    /// never is.
    #[test]
    fn a_forward_from_a_clock_ahead_is_said_once_a_minute() {
        let at = Instant::now();
        let mut watch = ClockWatch::default();
        assert_eq!(watch.forwarded(T0 - 5, T0, at), None);
        assert_eq!(watch.forwarded(T0 + STEP_MS - 1, T0, at), None);
        assert_eq!(watch.forwarded(T0 + 3_600_000, T0, at), Some(3_600_000));
        let later = |s: u64| at + Duration::from_secs(s);
        assert_eq!(watch.forwarded(T0 + 3_600_000, T0, later(59)), None);
        assert_eq!(watch.forwarded(T0 + 2_000, T0, later(60)), Some(2_000));
        assert_eq!(
            watch.forwarded(i64::MAX, i64::MIN, later(200)),
            Some(i64::MAX)
        );
    }
}
