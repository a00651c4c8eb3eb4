//! Cache prefetch hints.
//!
//! The processing thread applies records that another thread polled and parsed, to state spread
//! over megabytes, so most of what it touches first is a cache miss: the message, its payload,
//! and the project's dedupe window. Asking for those lines a few records ahead lets the misses
//! overlap other records' work instead of stalling one after another. A prefetch is only a hint:
//! it changes no state and no result, and where the target has no stable prefetch instruction
//! these functions do nothing.

/// The size of a cache line on the machines the service runs on (x86_64 and aarch64 alike).
const LINE: usize = 64;

/// Starts loading the cache line at `ptr` without waiting for it. The pointer is never read
/// through, so any address will do, even a dangling one.
#[cfg(target_arch = "x86_64")]
pub fn address<T>(ptr: *const T) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is in the target's
    // baseline). A prefetch never faults, whatever the address, and reads nothing into the
    // program.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.cast()) }
}

/// Elsewhere a prefetch is only an optimisation, and skipping it changes nothing.
#[cfg(not(target_arch = "x86_64"))]
pub fn address<T>(_: *const T) {}

/// Starts loading the cache line holding `value`.
pub fn value<T>(value: &T) {
    address(std::ptr::from_ref(value));
}

/// Starts loading every cache line that `bytes` overlaps.
pub fn bytes(bytes: &[u8]) {
    for line in lines(bytes) {
        address(line);
    }
}

/// An address in each cache line that `bytes` overlaps, in order (none for no bytes).
fn lines(bytes: &[u8]) -> impl Iterator<Item = *const u8> + '_ {
    let skew = bytes.as_ptr() as usize % LINE;
    let span = if bytes.is_empty() {
        0
    } else {
        skew + bytes.len()
    };
    (0..span)
        .step_by(LINE)
        .map(move |offset| bytes.as_ptr().wrapping_add(offset).wrapping_sub(skew))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line the bytes touch gets exactly one prefetch, whatever the alignment: a payload
    /// of 211 bytes starting 60 bytes into a line spans five lines, not the four that chunks
    /// of 64 from its start would name.
    #[test]
    fn every_overlapped_line_once() {
        let buffer = [0u8; 1024];
        let base = buffer.as_ptr() as usize;
        let first_line = (base / LINE + 1) * LINE - base;
        for (start, len, expected) in [(60, 211, 5), (0, 211, 4), (0, 64, 1), (63, 2, 2), (5, 0, 0)]
        {
            let at = first_line + start;
            let slice = &buffer[at..at + len];
            let got: Vec<usize> = lines(slice).map(|p| p as usize / LINE).collect();
            let want: Vec<usize> =
                (0..len)
                    .map(|i| (base + at + i) / LINE)
                    .fold(Vec::new(), |mut v, l| {
                        if v.last() != Some(&l) {
                            v.push(l);
                        }
                        v
                    });
            assert_eq!(got, want, "start {start}, length {len}");
            assert_eq!(got.len(), expected, "start {start}, length {len}");
            bytes(slice);
        }
        value(&buffer[0]);
        address(std::ptr::null::<u8>());
    }
}
