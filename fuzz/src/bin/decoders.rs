//! AFL++ entry point: `cargo afl build --release --features afl`, then
//! `cargo afl fuzz -i corpus/decoders -o out target/release/decoders` (see `scripts/fuzz.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        jurystream_fuzz::decoders(data);
    });
}
