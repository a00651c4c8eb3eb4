//! The time the service's ticks carry (see [`crate::engine::TICK_TOPIC`]): the wall clock read
//! once, when the processor starts, moved on by the monotonic clock. A session completes `idle`
//! when the ticks' times say `sessions.idle_timeout_secs` passed, so a wall clock stepped while
//! the service runs (a virtual machine resumed, NTP correcting a clock that was far off) must
//! not move them: stepped forward an hour, every idle session would complete at the next tick,
//! early; stepped back, every one would wait that hour more. The monotonic clock measures the
//! time that passed, which is what idleness is.
//!
//! A step is still said (a warning and `jurystream_clock_steps_total`): it is a fault of the
//! host's time synchronisation, which the publication latency reads, and the ticks of any
//! instance started on the host after it. The ticks keep the start's wall clock until the
//! instance restarts; the engine bounds what a later owner's different clock can do (see
//! [`crate::engine::model::session::SessionBook::tick`]).

use std::time::Instant;

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
}
