//! The embedder against the Python `model2vec` 0.10 references in the fixtures (`reference/`)
//! (pooled ids and vectors of every corpus text), and against hostile inputs.

use super::*;
use crate::json::Reader;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use std::vec::Vec as StdVec;

use crate::testutil::read_fixture as read;

/// The three files of a model directory.
struct ModelFiles {
    safetensors: StdVec<u8>,
    tokenizer: StdVec<u8>,
    config: StdVec<u8>,
}

fn model_files(name: &str) -> ModelFiles {
    let dir = format!("models/{name}");
    ModelFiles {
        safetensors: read(&format!("{dir}/model.safetensors")),
        tokenizer: read(&format!("{dir}/tokenizer.json")),
        config: read(&format!("{dir}/config.json")),
    }
}

struct RefRow {
    text: String,
    ids: StdVec<u32>,
    embedding: StdVec<f32>,
}

struct Reference {
    median: usize,
    rows: StdVec<RefRow>,
}

/// Reads `reference/m2v-NAME.json` (written by `reference/gen/m2v_ref.py`).
fn reference(name: &str) -> Reference {
    let bytes = read(&format!("reference/{name}.json"));
    let mut r = Reader::new(&bytes).unwrap();
    let mut out = Reference {
        median: 0,
        rows: StdVec::new(),
    };
    r.begin_object().unwrap();
    while let Some(k) = r.next_key().unwrap() {
        if k.eq_str("median_token_length") {
            out.median = r.read_u64().unwrap() as usize;
        } else if k.eq_str("rows") {
            r.begin_array().unwrap();
            while r.next_item().unwrap() {
                let mut row = RefRow {
                    text: String::new(),
                    ids: StdVec::new(),
                    embedding: StdVec::new(),
                };
                r.begin_object().unwrap();
                while let Some(k) = r.next_key().unwrap() {
                    if k.eq_str("text") {
                        r.read_str().unwrap().decode_into(&mut row.text).unwrap();
                    } else if k.eq_str("ids") {
                        r.begin_array().unwrap();
                        while r.next_item().unwrap() {
                            row.ids.push(r.read_u64().unwrap() as u32);
                        }
                    } else if k.eq_str("embedding") {
                        r.begin_array().unwrap();
                        while r.next_item().unwrap() {
                            row.embedding.push(r.read_f64().unwrap() as f32);
                        }
                    } else {
                        r.skip_value().unwrap();
                    }
                }
                out.rows.push(row);
            }
        } else {
            r.skip_value().unwrap();
        }
    }
    out
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (na * nb)
}

const MIN_COSINE: f64 = 0.99999;

fn parity(name: &str) {
    let files = model_files(name);
    let reference = reference(name);
    assert_eq!(reference.rows.len(), 631, "corpus size");
    let e = Embedder::load(&files.safetensors, &files.tokenizer, &files.config).unwrap();
    assert_eq!(
        e.median_token_length(),
        reference.median,
        "median token length"
    );
    let mut scratch = EmbedScratch::new();
    let mut ids = Vec::new();
    let mut out = vec![0f32; e.dim()];
    let mut failures = StdVec::new();
    let mut worst = 1.0f64;
    for (i, row) in reference.rows.iter().enumerate() {
        e.encode_ids(&row.text, &mut scratch, &mut ids).unwrap();
        if ids[..] != row.ids[..] {
            failures.push(format!(
                "text {i} {:?}: ids\n  ours {:?}\n  want {:?}",
                row.text, ids, row.ids
            ));
            continue;
        }
        e.embed(&row.text, &mut scratch, &mut out).unwrap();
        if row.embedding.iter().all(|&x| x == 0.0) {
            if out.iter().any(|&x| x != 0.0) {
                failures.push(format!("text {i}: reference is zero, ours is not"));
            }
            continue;
        }
        let c = cosine(&out, &row.embedding);
        worst = worst.min(c);
        // NaN fails too.
        if c.partial_cmp(&MIN_COSINE) == Some(core::cmp::Ordering::Less) || c.is_nan() {
            failures.push(format!("text {i} {:?}: cosine {c}", row.text));
        }
    }
    std::eprintln!(
        "{name}: {} texts, worst cosine {worst:.9}, zero-copy {}",
        reference.rows.len(),
        e.is_zero_copy()
    );
    assert!(
        failures.is_empty(),
        "{} of 631 texts differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn parity_potion_base_8m() {
    parity("potion-base-8M");
}

/// The same model with F16 rows (converted to f32 at load; the F32 rows above are used in place).
#[test]
fn parity_potion_base_8m_f16() {
    parity("potion-base-8M-f16");
}

#[test]
fn parity_m2v_minilm_128_vq() {
    parity("m2v-minilm-128-vq");
}

#[test]
fn config_defaults() {
    assert_eq!(
        EmbedConfig::from_json(b"{}").unwrap(),
        EmbedConfig {
            normalize: false,
            max_length: Some(512)
        }
    );
    assert_eq!(
        EmbedConfig::from_json(br#"{"normalize": null, "max_length": null}"#).unwrap(),
        EmbedConfig {
            normalize: false,
            max_length: None
        }
    );
    assert!(EmbedConfig::from_json(br#"{"max_length": -1}"#).is_err());
    assert!(EmbedConfig::from_json(br#"{"normalize": "yes"}"#).is_err());
    assert!(EmbedConfig::from_json(b"[]").is_err());
}

/// A small valid model: a 6-piece vocabulary, 2-D F32 rows (row r is [r, 1]).
fn tiny_model() -> (StdVec<u8>, String, String) {
    tiny_model_with(core::array::from_fn(|r| [r as f32, 1.0]), false)
}

/// The tiny model's vocabulary with the given rows.
fn tiny_model_with(rows: [[f32; 2]; 6], normalize: bool) -> (StdVec<u8>, String, String) {
    let tokenizer = r###"{"added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
      "normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
      "pre_tokenizer":{"type":"BertPreTokenizer"},
      "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
        "vocab":{"[UNK]":0,"ba":1,"##na":2,"!":3,"cafe":4,"\u4e2d":5}}}"###;
    let header = r#"{"embeddings":{"dtype":"F32","shape":[6,2],"data_offsets":[0,48]}}"#;
    let mut st = safetensors::tests::file(header, 0);
    for v in rows.as_flattened() {
        st.extend_from_slice(&v.to_le_bytes());
    }
    (
        st,
        tokenizer.into(),
        format!(r#"{{"normalize": {normalize}}}"#),
    )
}

/// Found by the `embed` fuzz target: a table holding NaN or infinity gave a vector of NaN.
/// Now that is an error; finite values whose squares overflow still normalize.
#[test]
fn non_finite_rows_are_errors_and_large_ones_normalize() {
    let big = 3.0e38;
    let rows = [
        [0.0, 1.0],
        [f32::NAN, 1.0],
        [f32::INFINITY, 0.0],
        [big, 1.0],
        [1.0e30, 1.0e30],
        [0.0, 1.0],
    ];
    let (st, tok, cfg) = tiny_model_with(rows, true);
    let e = Embedder::load(&st, tok.as_bytes(), cfg.as_bytes()).unwrap();
    let mut s = EmbedScratch::new();
    let mut out = [0f32; 2];
    // "ba": the NaN row; "bana": NaN and infinity; "! !": twice 3e38 overflows when summed.
    for text in ["ba", "bana", "! !", "ba 中"] {
        let err = e.embed(text, &mut s, &mut out).unwrap_err();
        assert_eq!(err.status, Status::BadFormat, "{text:?}");
        assert!(err.message.as_str().contains("NaN or infinity"), "{text:?}");
    }
    e.embed("!", &mut s, &mut out).unwrap();
    assert_eq!(out, [1.0, 1.0 / big]);
    e.embed("cafe", &mut s, &mut out).unwrap();
    let h = core::f32::consts::FRAC_1_SQRT_2;
    assert!(
        (out[0] - h).abs() < 1e-6 && (out[1] - h).abs() < 1e-6,
        "{out:?}"
    );
    e.embed("中", &mut s, &mut out).unwrap();
    assert_eq!(out, [0.0, 1.0]);
}

/// Non-ASCII characters go through the scratch's memo of stage 2 (recorded the first time a
/// character is seen, replayed after): accents in canonical-order cases (Mn and non-Mn marks),
/// CJK, Hangul, multi-character lowercase, a ligature, white space and dropped characters, each
/// twice in the text, give Hugging Face tokenizers' ids (0.23.3, the unknown token dropped),
/// also when the memo is already warm.
#[test]
fn remembered_characters_tokenize_as_the_first_time() {
    // all-MiniLM-L6-v2's WordPiece vocabulary (as Model2Vec trimmed it), whose ids these are.
    let files = model_files("m2v-minilm-128-vq");
    let e = Embedder::load(&files.safetensors, &files.tokenizer, &files.config).unwrap();
    let once = "e\u{301}\u{316} \u{1E0A}\u{323}x \u{E4}\u{F71}\u{F72} a\u{323}\u{1D165}\u{300}b \
                \u{C9}COLE \u{E9}cole \u{4E2D}\u{6587} \u{D55C}\u{AD6D} \u{1C4} \u{130}stanbul \
                \u{FB01}n \u{AB}\u{BB} \u{391}\u{386}\u{3AC} \u{2163} \u{A0}\u{3000}x\u{200B}\u{AD}";
    let text = std::format!("{once} {once}");
    let half: [u32; 23] = [
        44, 43, 1598, 40, 11434, 11434, 749, 864, 472, 29009, 29024, 28994, 29017, 29023, 8963,
        987, 1081, 80, 93, 158, 13611, 13611, 63,
    ];
    let want: StdVec<u32> = half.iter().chain(&half).copied().collect();
    let mut s = EmbedScratch::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        e.encode_ids(&text, &mut s, &mut ids).unwrap();
        assert_eq!(&ids[..], &want[..]);
    }
}

#[test]
fn tiny_model_tokenizes_like_wordpiece() {
    let (st, tok, cfg) = tiny_model();
    let e = Embedder::load(&st, tok.as_bytes(), cfg.as_bytes()).unwrap();
    let mut s = EmbedScratch::new();
    let mut ids = Vec::new();
    let cases: [(&str, &[u32]); 7] = [
        ("banana!", &[1, 2, 2, 3]),
        ("BANANA", &[1, 2, 2]),
        ("nanana ba", &[1]),
        ("Café中ba", &[4, 5, 1]),
        ("[UNK]ba", &[1]),
        ("\u{0}\u{FFFD}\u{200B}", &[]),
        ("", &[]),
    ];
    for (text, want) in cases {
        e.encode_ids(text, &mut s, &mut ids).unwrap();
        assert_eq!(&ids[..], want, "{text:?}");
    }
    let mut out = [0f32; 2];
    e.embed("ba !", &mut s, &mut out).unwrap();
    assert_eq!(out, [2.0, 1.0]);
    e.embed("zzz", &mut s, &mut out).unwrap();
    assert_eq!(out, [0.0, 0.0]);
    assert!(e.embed("ba", &mut s, &mut [0f32; 3]).is_err());
    let err = e.embed_bytes(b"ba\xFF", &mut s, &mut out).unwrap_err();
    assert_eq!(err.status, Status::InvalidUtf8);
}

#[test]
fn bad_inputs_are_errors() {
    let files = model_files("m2v-minilm-128-vq");
    let (st, tok, cfg) = (
        &files.safetensors[..],
        &files.tokenizer[..],
        &files.config[..],
    );
    assert!(Embedder::load(st, tok, cfg).is_ok());

    // Truncated safetensors: inside the length, the header, and the data.
    let header_end = 8 + u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let cuts = (0..header_end + 16).chain([st.len() / 2, st.len() - 1]);
    for cut in cuts {
        assert!(
            Embedder::load(&st[..cut], tok, cfg).is_err(),
            "safetensors cut at {cut} accepted"
        );
    }
    // A header claiming huge tensors.
    let huge =
        r#"{"embeddings":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,64]}}"#;
    assert!(Embedder::load(&safetensors::tests::file(huge, 64), tok, cfg).is_err());
    let huge =
        r#"{"embeddings":{"dtype":"I8","shape":[100000000,128],"data_offsets":[0,12800000000]}}"#;
    assert!(Embedder::load(&safetensors::tests::file(huge, 64), tok, cfg).is_err());
    // A header length near u64::MAX.
    let mut bad = st.to_vec();
    bad[..8].copy_from_slice(&(u64::MAX - 4).to_le_bytes());
    assert!(Embedder::load(&bad, tok, cfg).is_err());
    // A mapping that points outside the rows.
    let mut bad = st.to_vec();
    let text = core::str::from_utf8(&st[8..header_end]).unwrap();
    let map_at = text.find("\"mapping\"").unwrap();
    let begin: usize = {
        let t = &text[map_at..];
        let o = t.find("data_offsets\":[").unwrap() + 15;
        t[o..].split(',').next().unwrap().parse().unwrap()
    };
    bad[header_end + begin..header_end + begin + 4].copy_from_slice(&5000i32.to_le_bytes());
    assert!(Embedder::load(&bad, tok, cfg).is_err());

    // Malformed tokenizer.json: truncations and byte mutations.
    let step = (tok.len() / 64).max(1);
    for cut in (0..tok.len()).step_by(step) {
        assert!(
            Embedder::load(st, &tok[..cut], cfg).is_err(),
            "tokenizer.json cut at {cut} accepted"
        );
        let mut m = tok.to_vec();
        m[cut] = b'{';
        let _ = Embedder::load(st, &m, cfg);
        m[cut] = 0xFF;
        let _ = Embedder::load(st, &m, cfg);
    }
    let wrong = [
        r#"{"model": {"type": "BPE", "vocab": {}}}"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}}"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 99999999999}}}"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}}, "normalizer": {"type": "NFKC"}}"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}}, "normalizer": 5}"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}, "max_input_chars_per_word": 1e99}}"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}}} x"#,
        r#"{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 40000}}}"#,
        "{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"vocab\": {\"\\ud800\": 0}}}",
    ];
    for w in wrong {
        assert!(
            Embedder::load(st, w.as_bytes(), cfg).is_err(),
            "accepted {w}"
        );
    }
    // Bad config.json.
    for c in [
        "",
        "{",
        "{\"max_length\": 1e3}",
        "{\"max_length\": 99999999999999999999}",
    ] {
        assert!(
            Embedder::load(st, tok, c.as_bytes()).is_err(),
            "accepted config {c}"
        );
    }

    // Invalid UTF-8 text.
    let e = Embedder::load(st, tok, cfg).unwrap();
    let mut s = EmbedScratch::new();
    let mut out = vec![0f32; e.dim()];
    for bad in [
        &b"\xFF"[..],
        b"abc\xC3",
        b"\xED\xA0\x80",
        b"\xF4\x90\x80\x80",
        b"\xC0\xAF",
    ] {
        let err = e.embed_bytes(bad, &mut s, &mut out).unwrap_err();
        assert_eq!(err.status, Status::InvalidUtf8);
    }
}

use crate::testutil::cpu_seconds;

/// Throughput on the corpus and on short sentences, per CPU second of this thread (not a test:
/// `cargo test --release -p wasmind --lib bench_corpus -- --ignored --nocapture`).
#[test]
#[ignore]
fn bench_corpus() {
    let corpus: StdVec<String> = reference("potion-base-8M")
        .rows
        .into_iter()
        .map(|r| r.text)
        .collect();
    let corpus: StdVec<&str> = corpus.iter().map(|t| t.as_str()).collect();
    let short: StdVec<&str> = [
        "the cat sat on the mat",
        "a feline rested upon the rug",
        "Hello, world!",
        "What powers the sun and stars?",
    ]
    .into();
    // M2V_BENCH=substring picks the lines to run, e.g. "256 corpus ids".
    let only = std::env::var("M2V_BENCH").unwrap_or_default();
    for name in ["potion-base-8M", "m2v-minilm-128-vq"] {
        let files = model_files(name);
        let e = Embedder::load(&files.safetensors, &files.tokenizer, &files.config).unwrap();
        let mut s = EmbedScratch::new();
        let mut out = vec![0f32; e.dim()];
        let mut ids = Vec::new();
        for (label, texts) in [("corpus", &corpus), ("short", &short)] {
            let nbytes: usize = texts.iter().map(|t| t.len()).sum();
            for mode in ["ids", "embed"] {
                if !format!("{name} {label} {mode}").contains(&only) {
                    continue;
                }
                let t0 = cpu_seconds();
                let mut n = 0usize;
                // M2V_PASSES=k: a fixed amount of work (for instruction counts), else 1 s.
                let passes: Option<usize> = std::env::var("M2V_PASSES")
                    .ok()
                    .and_then(|p| p.parse().ok());
                while passes.map_or(cpu_seconds() - t0 < 1.0, |p| n < p) {
                    for _ in 0..(2000 / texts.len()).max(1) {
                        for t in texts.iter() {
                            if mode == "ids" {
                                e.encode_ids(t, &mut s, &mut ids).unwrap();
                            } else {
                                e.embed(t, &mut s, &mut out).unwrap();
                            }
                        }
                        n += 1;
                    }
                }
                let secs = cpu_seconds() - t0;
                std::eprintln!(
                    "{name} {label} {mode}: {:.0} texts/s, {:.1} MB/s",
                    (n * texts.len()) as f64 / secs,
                    (n * nbytes) as f64 / secs / 1e6
                );
            }
        }
    }
}

/// The Unicode sweep of `testdata/sweep.py` (Hugging Face tokenizers as the oracle): every code
/// point in context, canonical-ordering cases, fuzz. Not a CI test (the file is 60 MB):
/// `M2V_SWEEP=/tmp/sweep.jsonl cargo test --release -p wasmind --lib sweep -- --ignored`.
#[test]
#[ignore]
fn sweep() {
    let path = std::env::var("M2V_SWEEP").expect("M2V_SWEEP=path of sweep.py's output");
    let text = std::fs::read_to_string(&path).unwrap();
    let files = model_files("m2v-minilm-128-vq");
    let e = Embedder::load(&files.safetensors, &files.tokenizer, &files.config).unwrap();
    let mut s = EmbedScratch::new();
    let mut ids = Vec::new();
    let (mut n, mut bad) = (0usize, StdVec::new());
    for line in text.lines() {
        let mut r = Reader::new(line.as_bytes()).unwrap();
        r.begin_array().unwrap();
        r.next_item().unwrap();
        let mut t = String::new();
        r.read_str().unwrap().decode_into(&mut t).unwrap();
        r.next_item().unwrap();
        let mut want = StdVec::new();
        r.begin_array().unwrap();
        while r.next_item().unwrap() {
            want.push(r.read_u64().unwrap() as u32);
        }
        e.encode_ids(&t, &mut s, &mut ids).unwrap();
        if ids[..] != want[..] {
            bad.push(format!("{t:?}: ours {ids:?} want {want:?}"));
        }
        n += 1;
    }
    std::eprintln!("sweep: {n} texts, {} differ", bad.len());
    for b in bad.iter().take(40) {
        std::eprintln!("  {b}");
    }
    assert!(bad.is_empty());
}
