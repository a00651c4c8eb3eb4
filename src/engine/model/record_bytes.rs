//! What state takes in its changelog record, counted: the bounds that keep every record within
//! the largest one the producer sends, however long and odd the ids (a record the producer
//! refused would stop the service, and stop it again at every restart as the same input came
//! back), count with this.

use serde::Serialize;

/// Bytes of a changelog record that the bounds leave to what is not the state they bound: the
/// fixed part of its key, a bucket's own fields, the redo chunk around it and the broker's
/// record batch.
pub const ENVELOPE: usize = 512;

/// A float as long as JSON writes one (seventeen digits, a sign and a three-digit exponent):
/// what the bounds count a float as.
pub const LONGEST_F64: f64 = -2.225_073_858_507_201_4e-308;

/// The most bytes a string of `bytes` bytes takes in JSON: its quotes, and each byte as JSON
/// may spell it, in six (`\u0001`). What the bounds count an id from before, or instead of,
/// writing it out.
pub fn json_str_at_most(bytes: usize) -> usize {
    bytes.saturating_mul(6).saturating_add(2)
}

/// The bytes serde_json writes for `value`: what a changelog record written as JSON takes for
/// it. `usize::MAX` for a value JSON cannot hold (none the engine keeps).
pub fn json_bytes(value: &impl Serialize) -> usize {
    /// Counts what is written, and keeps none of it.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-checked: a string's quotes and escapes are counted as written.
    #[test]
    fn counts_what_serde_json_writes() {
        assert_eq!(json_bytes(&("ab", 1.5)), r#"["ab",1.5]"#.len());
        // A control character is written in six bytes, a quote in two.
        assert_eq!(json_bytes(&"\u{1}\""), 2 + 6 + 2);
        assert_eq!(json_bytes(&f64::NAN), 4); // null
        // A string of control characters is the longest a string of its bytes can be written.
        let controls = "\u{1}".repeat(5);
        assert_eq!(json_bytes(&controls), json_str_at_most(5));
        assert!(json_bytes(&"abcde") < json_str_at_most(5));
    }
}
