//! Event time: parsed from RFC 3339 or epoch milliseconds, kept to the nanosecond.
//!
//! Event time drives every formula (decay, session timeouts, windows), so it is a value type with
//! total order and exact arithmetic; there is no wall clock anywhere in the engine.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant on the UTC time line with nanosecond precision, between the years 0000 and 9999 so
/// that it always has an RFC 3339 spelling.
///
/// Its serialized form is the state's (the changelog's), not the outputs' (they spell it in
/// RFC 3339, [`rfc3339`]): whole epoch milliseconds as one integer, which every time read from
/// epoch milliseconds or a record timestamp is, else `[secs, nanos]`. Event times are in most
/// state records, so the short form keeps the changelog small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventTime {
    secs: i64,
    nanos: u32,
}

/// -62167219200 = 0000-01-01T00:00:00Z.
const MIN_SECS: i64 = -62_167_219_200;
/// 253402300799 = 9999-12-31T23:59:59Z.
const MAX_SECS: i64 = 253_402_300_799;

/// Why a timestamp could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("is not an RFC 3339 timestamp such as `2026-11-20T10:00:07Z` ({0})")]
    Syntax(String),
    /// A date and time with no offset (Python's `datetime.utcnow().isoformat()`): local time
    /// or UTC, no one can tell.
    #[error("has no UTC offset: add `Z` for UTC, or the offset it was taken in, such as `+02:00`")]
    NoOffset,
    #[error("is outside the years 0000..=9999")]
    OutOfRange,
    /// An integer that, read as epoch milliseconds, is a date no event has, and in `unit` a
    /// date within the plausible years: sent in the wrong unit.
    #[error(
        "looks like epoch {unit} ({meant}), not milliseconds: send epoch milliseconds ({millis}) or an RFC 3339 string"
    )]
    Unit {
        unit: &'static str,
        meant: String,
        millis: i64,
    },
}

/// Epoch times in other units that are dates within 2001-09-09..2286-11-20 (10^9 to 10^10
/// seconds), each with what gives its milliseconds: an integer `occurred_at` in one of these
/// ranges is in that unit. Read as milliseconds, seconds in that range are dates within the
/// first four months of 1970, and microseconds and nanoseconds dates after the year 9999.
type OtherUnit = (&'static str, std::ops::Range<i64>, fn(i64) -> i64);
const OTHER_UNITS: [OtherUnit; 3] = [
    ("seconds", 1_000_000_000..10_000_000_000, |n| n * 1000),
    (
        "microseconds",
        1_000_000_000_000_000..10_000_000_000_000_000,
        |n| n / 1000,
    ),
    ("nanoseconds", 1_000_000_000_000_000_000..i64::MAX, |n| {
        n / 1_000_000
    }),
];

impl EventTime {
    /// The earliest representable instant.
    pub const MIN: EventTime = EventTime {
        secs: MIN_SECS,
        nanos: 0,
    };

    /// 2000-01-01T00:00:00Z. An `occurred_at` before it on a record stamped after it is a time
    /// left unset (0 is 1970-01-01) or counted from another epoch, not an event's: read as
    /// given, a producer that always sends it would hold its project's score at one instant
    /// (every batch after the first moving it by nothing), and one that sends it now and then
    /// would have those batches counted `late`; so it is refused. Without a record timestamp (a
    /// replay file that gives none) nothing tells it from an old event, and it is read as given.
    pub const EARLIEST_STATED: EventTime = EventTime {
        secs: 946_684_800,
        nanos: 0,
    };

    /// An instant as long as state records write one (`[-62167219200,999999999]`): what the
    /// bounds on records' sizes count a time as.
    pub const LONGEST: EventTime = EventTime {
        secs: MIN_SECS,
        nanos: 999_999_999,
    };

    /// Builds a time from seconds and nanoseconds since the Unix epoch.
    pub fn new(secs: i64, nanos: u32) -> Result<Self, TimeError> {
        if nanos >= 1_000_000_000 || !(MIN_SECS..=MAX_SECS).contains(&secs) {
            return Err(TimeError::OutOfRange);
        }
        Ok(EventTime { secs, nanos })
    }

    /// Milliseconds since the Unix epoch (Kafka's record timestamp and the integer `occurred_at`).
    pub fn from_epoch_millis(ms: i64) -> Result<Self, TimeError> {
        let nanos = (ms.rem_euclid(1000) as u32) * 1_000_000;
        EventTime::new(ms.div_euclid(1000), nanos)
    }

    /// An integer `occurred_at`: epoch milliseconds, unless the number is a plausible date only
    /// in another unit (see `OTHER_UNITS`), which is refused with the unit it looks like and
    /// the milliseconds to send instead. Numbers below 10^9 are read as milliseconds (times
    /// near the epoch are what tests and examples use).
    pub fn from_contract_millis(n: i64) -> Result<Self, TimeError> {
        let Some((unit, _, to_millis)) = OTHER_UNITS.iter().find(|(_, r, _)| r.contains(&n)) else {
            return EventTime::from_epoch_millis(n);
        };
        let millis = to_millis(n);
        Err(TimeError::Unit {
            unit,
            meant: EventTime::from_epoch_millis(millis)
                .map_or_else(|_| "?".to_owned(), |t| t.to_string()),
            millis,
        })
    }

    /// RFC 3339 with any offset and any number of fraction digits. Digits beyond the ninth are
    /// below a nanosecond and are dropped; everything up to the nanosecond is kept.
    ///
    /// A leap second (`23:59:60`, legal RFC 3339) is the last nanosecond of the second before
    /// it, `23:59:59.999999999`, whatever its fraction: the time line has no room for it, and
    /// this keeps it after every instant before it and before every one after it.
    pub fn parse_rfc3339(text: &str) -> Result<Self, TimeError> {
        let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| {
            if naive(text) {
                TimeError::NoOffset
            } else {
                TimeError::Syntax(e.to_string())
            }
        })?;
        // chrono gives a leap second as the second before it with 1e9 or more nanoseconds.
        let nanos = parsed.timestamp_subsec_nanos().min(999_999_999);
        EventTime::new(parsed.timestamp(), nanos)
    }

    /// Seconds from `earlier` to `self` (negative when `self` is earlier). Exact for any gap a
    /// decay can notice: both parts are subtracted as integers before converting.
    pub fn seconds_since(self, earlier: EventTime) -> f64 {
        (self.secs - earlier.secs) as f64
            + (f64::from(self.nanos) - f64::from(earlier.nanos)) * 1e-9
    }

    /// Whole milliseconds since the epoch, rounded down (for latency metrics and watermarks).
    pub fn epoch_millis(self) -> i64 {
        self.secs * 1000 + i64::from(self.nanos / 1_000_000)
    }

    /// This instant moved by a whole number of seconds, saturating at the representable range.
    pub fn plus_seconds(self, secs: i64) -> EventTime {
        EventTime {
            secs: self.secs.saturating_add(secs).clamp(MIN_SECS, MAX_SECS),
            nanos: self.nanos,
        }
    }
}

impl fmt::Display for EventTime {
    /// UTC with `Z`, and 0, 3, 6 or 9 fraction digits as the value needs (chrono's
    /// `SecondsFormat::AutoSi`): one spelling per instant, so outputs are byte-deterministic.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match DateTime::<Utc>::from_timestamp(self.secs, self.nanos) {
            Some(dt) => f.write_str(&dt.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            // Only a changelog written by something else can hold such a value.
            None => write!(f, "{}.{:09}", self.secs, self.nanos),
        }
    }
}

impl EventTime {
    /// Seconds and nanoseconds since the Unix epoch.
    pub fn parts(self) -> (i64, u32) {
        (self.secs, self.nanos)
    }
}

impl Serialize for EventTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.nanos.is_multiple_of(1_000_000) {
            s.serialize_i64(self.epoch_millis())
        } else {
            (self.secs, self.nanos).serialize(s)
        }
    }
}

/// An [`EventTime`] as a state record holds it: as written now, or as `{"secs":S,"nanos":N}`
/// (a changelog written before).
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredTime {
    Millis(i64),
    Parts(i64, u32),
    Fields { secs: i64, nanos: u32 },
}

impl<'de> Deserialize<'de> for EventTime {
    /// Refuses an instant outside the years 0000..=9999, as every other way in does.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let time = match StoredTime::deserialize(d)? {
            StoredTime::Millis(ms) => EventTime::from_epoch_millis(ms),
            StoredTime::Parts(secs, nanos) | StoredTime::Fields { secs, nanos } => {
                EventTime::new(secs, nanos)
            }
        };
        time.map_err(D::Error::custom)
    }
}

/// Whether `text` is a date and time without an offset, as ISO 8601 allows and RFC 3339 does
/// not (`2026-11-20T10:00:07`, with any fraction, `T` or a space).
fn naive(text: &str) -> bool {
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .any(|format| chrono::NaiveDateTime::parse_from_str(text, format).is_ok())
}

/// Serializes an [`EventTime`] as its RFC 3339 spelling (see its `Display`), for output records.
pub fn rfc3339<S: serde::Serializer>(at: &EventTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> EventTime {
        EventTime::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn parses_offsets_and_fractions() {
        assert_eq!(
            t("2026-11-20T10:00:07.250Z"),
            t("2026-11-20T11:00:07.25+01:00")
        );
        assert_eq!(t("2026-11-20T10:00:07Z").epoch_millis(), 1_795_168_807_000);
        assert_eq!(
            t("2026-11-20T10:00:07.250Z").epoch_millis(),
            1_795_168_807_250
        );
        assert_eq!(
            t("2026-11-20T10:00:07.123456789Z").to_string(),
            "2026-11-20T10:00:07.123456789Z"
        );
        // Sub-nanosecond digits are accepted and dropped.
        assert_eq!(
            t("2026-11-20T10:00:07.123456789999Z").to_string(),
            "2026-11-20T10:00:07.123456789Z"
        );
        assert_eq!(t("2026-11-20t10:00:07z"), t("2026-11-20T10:00:07Z"));
        assert_eq!(
            t("2026-11-20T05:30:00-04:30").to_string(),
            "2026-11-20T10:00:00Z"
        );
        assert_eq!(
            t("2026-11-20T10:00:07.100Z").to_string(),
            "2026-11-20T10:00:07.100Z"
        );
    }

    #[test]
    fn epoch_millis_matches_rfc3339() {
        assert_eq!(
            EventTime::from_epoch_millis(1_795_168_807_250).unwrap(),
            t("2026-11-20T10:00:07.250Z")
        );
        assert_eq!(
            EventTime::from_epoch_millis(-1).unwrap(),
            t("1969-12-31T23:59:59.999Z")
        );
        assert_eq!(
            EventTime::from_epoch_millis(i64::MAX),
            Err(TimeError::OutOfRange)
        );
    }

    #[test]
    fn spells_like_rfc3339_with_the_digits_the_value_needs() {
        let cases = [
            (0, 0, "1970-01-01T00:00:00Z"),
            (1_795_168_807, 250_000_000, "2026-11-20T10:00:07.250Z"),
            (951_782_400, 1000, "2000-02-29T00:00:00.000001Z"),
            (-1, 999_999_999, "1969-12-31T23:59:59.999999999Z"),
            (MIN_SECS, 0, "0000-01-01T00:00:00Z"),
            (MAX_SECS, 5, "9999-12-31T23:59:59.000000005Z"),
        ];
        for (secs, nanos, text) in cases {
            let at = EventTime::new(secs, nanos).unwrap();
            assert_eq!(at.to_string(), text);
            assert_eq!(EventTime::parse_rfc3339(text), Ok(at));
        }
        // Outside the type's range (a value deserialized from elsewhere): chrono's spelling.
        let far = EventTime {
            secs: MAX_SECS + 1,
            nanos: 0,
        };
        assert_eq!(far.to_string(), "+10000-01-01T00:00:00Z");
    }

    proptest! {
        /// Every instant in the range has one spelling, with the fraction digits it needs, and
        /// the spelling reads back as the same instant.
        #[test]
        fn spelling_reads_back(
            secs in MIN_SECS..=MAX_SECS,
            nanos in prop_oneof![
                Just(0u32),
                (0u32..1000).prop_map(|m| m * 1_000_000),
                (0u32..1_000_000).prop_map(|u| u * 1000),
                0u32..1_000_000_000,
            ],
        ) {
            let at = EventTime::new(secs, nanos).unwrap();
            let text = at.to_string();
            prop_assert!(text.ends_with('Z'));
            let fraction = text.split_once('.').map_or(0, |(_, f)| f.len() - 1);
            let needed = match nanos {
                0 => 0,
                n if n % 1_000_000 == 0 => 3,
                n if n % 1000 == 0 => 6,
                _ => 9,
            };
            prop_assert_eq!(fraction, needed);
            prop_assert_eq!(EventTime::parse_rfc3339(&text), Ok(at));
        }

        /// The state form reads back as the same instant, whichever of its two spellings.
        #[test]
        fn state_form_reads_back(
            secs in MIN_SECS..=MAX_SECS,
            nanos in prop_oneof![(0u32..1000).prop_map(|m| m * 1_000_000), 0u32..1_000_000_000],
        ) {
            let at = EventTime::new(secs, nanos).unwrap();
            let text = serde_json::to_string(&at).unwrap();
            prop_assert_eq!(text.starts_with('['), nanos % 1_000_000 != 0);
            prop_assert_eq!(serde_json::from_str::<EventTime>(&text).ok(), Some(at));
        }
    }

    #[test]
    fn state_form_is_epoch_millis_or_parts_and_reads_the_old_form() {
        let json = |t: EventTime| serde_json::to_string(&t).unwrap();
        let read = |s: &str| serde_json::from_str::<EventTime>(s).map_err(|e| e.to_string());
        assert_eq!(json(t("2026-11-20T04:20:00.250Z")), "1795148400250");
        assert_eq!(json(t("1969-12-31T23:59:59.5Z")), "-500");
        assert_eq!(
            json(t("2026-11-20T04:20:00.000000250Z")),
            "[1795148400,250]"
        );
        assert_eq!(read("1795148400250"), Ok(t("2026-11-20T04:20:00.250Z")));
        assert_eq!(read("-500"), Ok(t("1969-12-31T23:59:59.5Z")));
        assert_eq!(
            read("[1795148400,250]"),
            Ok(t("2026-11-20T04:20:00.000000250Z"))
        );
        assert_eq!(
            read(r#"{"secs":1795148400,"nanos":250}"#),
            Ok(t("2026-11-20T04:20:00.000000250Z"))
        );
        // Out of range, however spelled: refused, never read as another instant.
        assert!(read("[1795148400,1000000000]").is_err());
        assert!(read(&format!("{}", (MAX_SECS + 1) * 1000)).is_err());
        assert!(read(r#"{"secs":-62167219201,"nanos":0}"#).is_err());
        assert!(read(r#""2026-11-20T04:20:00Z""#).is_err());
    }

    #[test]
    fn a_leap_second_is_the_last_nanosecond_of_the_second_before() {
        let last = t("2016-12-31T23:59:59.999999999Z");
        assert_eq!(t("2016-12-31T23:59:60Z"), last);
        assert_eq!(t("2016-12-31T23:59:60.5Z"), last);
        assert_eq!(t("2017-01-01T00:59:60+01:00"), last);
        assert!(t("2016-12-31T23:59:59Z") < last && last < t("2017-01-01T00:00:00Z"));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "yesterday", "2026-11-20", "2026-13-01T00:00:00Z"] {
            assert!(
                matches!(EventTime::parse_rfc3339(bad), Err(TimeError::Syntax(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_time_without_an_offset_says_so() {
        for naive in [
            "2026-11-20T10:00:07",
            "2026-11-20T10:00:07.123456",
            "2026-11-20 10:00:07",
        ] {
            assert_eq!(
                EventTime::parse_rfc3339(naive),
                Err(TimeError::NoOffset),
                "{naive}"
            );
        }
        let message = TimeError::NoOffset.to_string();
        assert!(
            message.contains("no UTC offset") && message.contains('Z'),
            "{message}"
        );
    }

    #[test]
    fn an_integer_in_another_unit_is_refused_with_the_unit_and_what_to_send() {
        let meant = "2026-11-26T13:33:20Z";
        for (n, unit) in [
            (1_795_700_000, "seconds"),
            (1_795_700_000_000_000, "microseconds"),
            (1_795_700_000_000_000_000, "nanoseconds"),
        ] {
            assert_eq!(
                EventTime::from_contract_millis(n),
                Err(TimeError::Unit {
                    unit,
                    meant: meant.to_owned(),
                    millis: 1_795_700_000_000
                })
            );
        }
        let message = EventTime::from_contract_millis(1_795_700_000)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "looks like epoch seconds (2026-11-26T13:33:20Z), not milliseconds: send epoch milliseconds (1795700000000) or an RFC 3339 string"
        );
        // Milliseconds, and the small numbers near the epoch that tests use, read as before;
        // the edges of each range are exact.
        for ms in [0, 1_000, 999_999_999, 10_000_000_000, 1_795_700_000_000, -5] {
            assert_eq!(
                EventTime::from_contract_millis(ms),
                EventTime::from_epoch_millis(ms),
                "{ms}"
            );
        }
        assert!(EventTime::from_contract_millis(1_000_000_000).is_err());
        assert!(EventTime::from_contract_millis(9_999_999_999).is_err());
        assert_eq!(
            EventTime::from_contract_millis(999_999_999_999_999),
            Err(TimeError::OutOfRange)
        );
    }

    #[test]
    fn differences_are_exact() {
        let a = t("2026-11-20T10:00:07.250Z");
        let b = t("2026-11-20T10:00:14.250Z");
        assert_eq!(b.seconds_since(a), 7.0);
        assert_eq!(a.seconds_since(b), -7.0);
        assert!(
            (t("2026-11-20T10:00:00.000000001Z").seconds_since(t("2026-11-20T10:00:00Z")) - 1e-9)
                .abs()
                < 1e-18
        );
    }
}
