//! Replays the committed corpus (`corpus/decoders`, grown by the fuzzer) through the harness:
//! the fuzzer's findings stay fixed, and CI runs every decoder on every input in it.

#[test]
fn every_corpus_input_keeps_the_invariants() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/decoders");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 20, "{} inputs in {dir:?}", inputs.len());
    for path in inputs {
        let data = std::fs::read(&path).expect("corpus input");
        jurystream_fuzz::decoders(&data);
    }
}
