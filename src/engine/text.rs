//! JSON written straight into byte buffers, for the records the service writes per event (score
//! records, changelog records): serde's and `fmt`'s machinery cost more than the values take to
//! spell. Each function spells its value as serde_json does, so either way of writing a record
//! gives the same bytes.

use serde_json::ser::{CompactFormatter, Formatter};

/// Appends the decimal digits of `n`.
pub fn push_u64(b: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    b.extend_from_slice(&digits[at..]);
}

/// Appends the decimal digits of `n`, signed.
pub fn push_i64(b: &mut Vec<u8>, n: i64) {
    if n < 0 {
        b.push(b'-');
    }
    push_u64(b, n.unsigned_abs());
}

/// Appends `s` as a JSON string: as it is between quotes when nothing in it needs escaping
/// (the ids jurystream sees), else through serde_json.
pub fn push_str(b: &mut Vec<u8>, s: &str) {
    if s.bytes()
        .all(|c| c >= 0x20 && c != b'"' && c != b'\\' && c < 0x7f)
    {
        b.push(b'"');
        b.extend_from_slice(s.as_bytes());
        b.push(b'"');
    } else {
        // Writing a string into a vector cannot fail.
        serde_json::to_writer(b, s).ok();
    }
}

/// Appends `x` as serde_json spells an `f64`: the shortest digits that read back as `x`, and
/// `null` for NaN and the infinities.
pub fn push_f64(b: &mut Vec<u8>, x: f64) {
    if x.is_finite() {
        // Writing into a vector cannot fail.
        CompactFormatter.write_f64(b, x).ok();
    } else {
        b.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spelled(push: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut b = Vec::new();
        push(&mut b);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn hand_checked_spellings() {
        assert_eq!(spelled(|b| push_u64(b, 0)), "0");
        assert_eq!(spelled(|b| push_u64(b, u64::MAX)), "18446744073709551615");
        assert_eq!(spelled(|b| push_i64(b, i64::MIN)), "-9223372036854775808");
        assert_eq!(spelled(|b| push_str(b, "proj-1")), r#""proj-1""#);
        assert_eq!(spelled(|b| push_str(b, "a\"b\n")), r#""a\"b\n""#);
        assert_eq!(spelled(|b| push_f64(b, 0.5)), "0.5");
        assert_eq!(spelled(|b| push_f64(b, 1.0)), "1.0");
        assert_eq!(spelled(|b| push_f64(b, f64::NAN)), "null");
    }

    proptest! {
        /// Each spelling is serde_json's, to the byte.
        #[test]
        fn spellings_match_serde_json(n in any::<u64>(), i in any::<i64>(), s in ".{0,12}", x in any::<f64>()) {
            prop_assert_eq!(spelled(|b| push_u64(b, n)), serde_json::to_string(&n).unwrap());
            prop_assert_eq!(spelled(|b| push_i64(b, i)), serde_json::to_string(&i).unwrap());
            prop_assert_eq!(spelled(|b| push_str(b, &s)), serde_json::to_string(&s).unwrap());
            prop_assert_eq!(spelled(|b| push_f64(b, x)), serde_json::to_string(&x).unwrap());
        }
    }
}
