//! `embed_batch` in the real module: every vector bit-identical to a single `embed` call on the
//! same text, in the single-threaded module and with 1..4 threads (the thread count also changed
//! between calls on one instance); bad texts and offsets are errors that name what is wrong.

mod common;
use common::*;
use wasmind_host::{Wasmind, pack_texts};

const MODELS: [&str; 3] = ["potion-base-8M", "potion-base-8M-f16", "m2v-minilm-128-vq"];

/// The 631 corpus texts, plus an empty text and repeats (so chunks differ in cost).
fn texts() -> Vec<String> {
    let corpus = json("reference/corpus.json");
    let mut t: Vec<String> = corpus
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(t.len(), 631, "corpus.json should hold 631 texts");
    t.push(String::new());
    t.extend(t[..40].to_vec());
    t
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn batch_equals_single_embed_for_any_thread_count() {
    let texts = texts();
    let refs: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
    for name in MODELS {
        let dir = fixture(&format!("models/{name}"));
        // The reference: one `embed` call per text, single-threaded module.
        let mut st = Wasmind::single_threaded().unwrap();
        let dim = st.load_embedder_dir(&dir).unwrap();
        let single: Vec<Vec<u32>> = refs
            .iter()
            .map(|t| bits(&st.embed(t, dim).unwrap()))
            .collect();
        assert!(single.iter().any(|v| v.iter().any(|&b| b != 0)));

        let batch = st.embed_batch(&refs, dim).unwrap();
        for (i, v) in batch.iter().enumerate() {
            assert_eq!(
                bits(v),
                single[i],
                "{name}, single-threaded module: text {i} {:?}",
                texts[i]
            );
        }
        for threads in 1..=4u32 {
            let mut w = Wasmind::with_threads(threads).unwrap();
            assert_eq!(w.load_embedder_dir(&dir).unwrap(), dim);
            // Fewer threads than the pool has, then all of them, on the same instance.
            for use_threads in [threads, 1, threads] {
                w.call::<u32, i32>("pool_set_threads", use_threads).unwrap();
                let batch = w.embed_batch(&refs, dim).unwrap();
                assert_eq!(batch.len(), refs.len());
                for (i, v) in batch.iter().enumerate() {
                    assert_eq!(
                        bits(v),
                        single[i],
                        "{name}, {threads} threads (using {use_threads}): text {i} {:?}",
                        texts[i]
                    );
                }
            }
            // Small batches: fewer texts than threads, one text, none.
            for n in [0usize, 1, 3] {
                let batch = w.embed_batch(&refs[..n], dim).unwrap();
                assert_eq!(batch.len(), n);
                for (i, v) in batch.iter().enumerate() {
                    assert_eq!(
                        bits(v),
                        single[i],
                        "{name}, {threads} threads, batch of {n}"
                    );
                }
            }
        }
        println!(
            "{name}: {} texts, embed_batch = embed bit for bit (single-threaded module, 1..4 threads)",
            refs.len()
        );
    }
}

/// Calls `embed_batch` with raw offsets; returns the status and the vectors.
fn raw_batch(w: &mut Wasmind, joined: &[u8], offsets: &[u32], dim: usize) -> (i32, Vec<f32>) {
    let n = offsets.len() - 1;
    let t = w.put(joined).unwrap();
    let offs: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    let o = w.put(&offs).unwrap();
    let out = w.put(&vec![0u8; (n * dim * 4).max(4)]).unwrap();
    let r = w
        .call::<(u32, u32, u32, u32), i32>("embed_batch", (t, o, n as u32, out))
        .unwrap();
    let bytes = w.read(out, n * dim * 4);
    (
        r,
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

/// Both kinds of embedder: a Model2Vec directory and a BERT sentence encoder.
#[test]
fn bad_batches_are_errors() {
    let dir = fixture("models/m2v-minilm-128-vq");
    let bert =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bert/tiny-bert-F16.gguf");
    for (threads, encoder) in [(0u32, false), (2, false), (0, true), (2, true)] {
        let mut w = Wasmind::with_threads(threads).unwrap();
        // No embedder yet.
        let (r, _) = raw_batch(&mut w, b"abc", &[0, 3], 4);
        assert!(r < 0, "embed_batch without an embedder must fail");
        let dim = match encoder {
            false => w.load_embedder_dir(&dir).unwrap(),
            true => w.load_embedder_gguf(&bert).unwrap(),
        };

        // Invalid UTF-8 in texts 1 and 3: an error naming text 1, zero vectors there, the
        // others as `embed` gives them.
        let texts: [&[u8]; 5] = [
            b"hello world",
            b"bad \xff byte",
            b"fine text",
            b"\xc3",
            b"last one",
        ];
        let (joined, offsets) = pack_texts(&texts);
        let (r, out) = raw_batch(&mut w, &joined, &offsets, dim);
        assert_eq!(r, -7, "invalid UTF-8 is WASMIND_E_INVALID_UTF8");
        let msg = w.last_error().unwrap();
        assert!(
            msg.contains("text 1"),
            "the error names the first bad text: {msg}"
        );
        for (i, t) in texts.iter().enumerate() {
            let row = &out[i * dim..(i + 1) * dim];
            if i == 1 || i == 3 {
                assert!(
                    row.iter().all(|&x| x == 0.0),
                    "bad text {i} gets a zero vector"
                );
            } else {
                assert_eq!(
                    bits(row),
                    bits(&w.embed(t, dim).unwrap()),
                    "good text {i} is still embedded"
                );
            }
        }

        // Offsets that go backwards.
        let (r, _) = raw_batch(&mut w, b"abcdef", &[0, 4, 2, 6], dim);
        assert_eq!(r, -1, "decreasing offsets are WASMIND_E_INVALID_ARGUMENT");
        assert!(
            w.last_error().unwrap().contains("offsets"),
            "{}",
            w.last_error().unwrap()
        );
        // A null output buffer.
        let t = w.put(b"abc").unwrap();
        let o = w.put(&[0, 0, 0, 0, 3, 0, 0, 0]).unwrap();
        let r = w
            .call::<(u32, u32, u32, u32), i32>("embed_batch", (t, o, 1, 0))
            .unwrap();
        assert_eq!(r, -1, "a null output is WASMIND_E_INVALID_ARGUMENT");
        // A count so large that n * dim overflows.
        let r = w
            .call::<(u32, u32, u32, u32), i32>("embed_batch", (t, o, u32::MAX, 16))
            .unwrap();
        assert!(r < 0, "n = u32::MAX must fail, got {r}");
        // The module still works.
        assert_eq!(w.embed_batch(&[b"still fine"], dim).unwrap().len(), 1);
    }
}
