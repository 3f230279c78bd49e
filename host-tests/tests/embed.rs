//! Model2Vec inside the real module against the Python `model2vec` package: pooled ids and
//! vectors for every corpus text, both shared models; bad inputs are errors.

mod common;
use common::*;
use wasmind_host::Wasmind;

const MIN_COSINE: f64 = 0.99999;

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn parity(name: &str, threads: u32) {
    let r = json(&format!("reference/{name}.json"));
    let mut w = Wasmind::with_threads(threads).unwrap();
    let dim = w
        .load_embedder_dir(&fixture(&format!("models/{name}")))
        .unwrap();
    assert_eq!(dim as u64, r["dim"].as_u64().unwrap());
    let mut worst = 1.0f64;
    for row in r["rows"].as_array().unwrap() {
        let text = row["text"].as_str().unwrap();
        assert_eq!(
            w.embed_ids(text.as_bytes()).unwrap(),
            u32s(&row["ids"]),
            "{name}: ids of {text:?}"
        );
        let v = w.embed(text.as_bytes(), dim).unwrap();
        let want: Vec<f64> = row["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        if want.iter().all(|&x| x == 0.0) {
            assert!(
                v.iter().all(|&x| x == 0.0),
                "{name}: {text:?} must embed to zeros"
            );
            continue;
        }
        let c = cosine(&v, &want);
        worst = worst.min(c);
        assert!(c >= MIN_COSINE, "{name}: cosine {c} for {text:?}");
    }
    println!("{name}: 631 texts, ids identical, worst cosine {worst:.7}");
}

#[test]
fn potion_base_8m_matches_model2vec() {
    parity("potion-base-8M", 0);
}

#[test]
fn potion_base_8m_f16_matches_model2vec() {
    parity("potion-base-8M-f16", 2);
}

#[test]
fn minilm_128_vq_matches_model2vec() {
    parity("m2v-minilm-128-vq", 2);
}

#[test]
fn bad_embedder_inputs_are_errors() {
    let dir = "models/m2v-minilm-128-vq";
    let st = read(&format!("{dir}/model.safetensors"));
    let tok = read(&format!("{dir}/tokenizer.json"));
    let cfg = read(&format!("{dir}/config.json"));
    let mut w = Wasmind::single_threaded().unwrap();
    assert!(w.embed(b"hello", 128).is_err(), "embed without a model");
    for cut in [0, 1, 7, 8, 100, st.len() / 2, st.len() - 1] {
        assert!(
            w.load_embedder_bytes(&st[..cut], &tok, &cfg).is_err(),
            "safetensors cut at {cut}"
        );
    }
    let mut huge = st.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(
        w.load_embedder_bytes(&huge, &tok, &cfg).is_err(),
        "header length u64::MAX"
    );
    assert!(
        w.load_embedder_bytes(&st, &tok[..tok.len() / 2], &cfg)
            .is_err(),
        "truncated tokenizer.json"
    );
    assert!(
        w.load_embedder_bytes(&st, b"{\"model\": 5}", &cfg).is_err(),
        "malformed tokenizer.json"
    );
    assert!(
        w.load_embedder_bytes(&st, &tok, b"{").is_err(),
        "malformed config.json"
    );
    let dim = w.load_embedder_bytes(&st, &tok, &cfg).unwrap();
    let e = w.embed(b"\xff\xfe", dim).unwrap_err().to_string();
    assert!(e.contains("(-7)"), "{e}");
    assert!(w.embed(b"", dim).unwrap().iter().all(|&x| x == 0.0));
}

/// BERT sentence encoders (`testdata/bert/`, made by `gen_bert.py`) inside the real modules
/// against llama.cpp: the ids `embed` runs ([CLS] ... [SEP]) and its unit vectors, mean and
/// CLS pooling; the same bits on 1 and 2 threads and from `embed_batch`; what
/// `embedder_info` says.
#[test]
fn bert_encoders_match_llama_cpp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bert");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let models = r["models"].as_object().unwrap();
    assert_eq!(models.len(), 2);
    for (file, entry) in models {
        let texts = strs(&entry["texts"]);
        let mut vectors: Vec<Vec<Vec<f32>>> = vec![];
        for threads in [1, 2] {
            let mut w = Wasmind::with_threads(threads).unwrap();
            let dim = w.load_embedder_gguf(&dir.join(file)).unwrap();
            assert_eq!(dim, 32);
            let info: serde_json::Value =
                serde_json::from_str(&w.embedder_info().unwrap()).unwrap();
            assert_eq!(info["kind"], "bert");
            let pooling = ["", "mean", "cls"][entry["pooling"].as_u64().unwrap() as usize];
            assert_eq!(info["pooling"], pooling, "{info}");
            let mut worst = 1.0f64;
            let mut got = vec![];
            for (text, want) in texts.iter().zip(entry["F16"].as_array().unwrap()) {
                assert_eq!(w.embed_ids(text.as_bytes()).unwrap(), u32s(&want["ids"]));
                let v = w.embed(text.as_bytes(), dim).unwrap();
                let want: Vec<f64> = want["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect();
                let norm: f64 = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                assert!((norm - 1.0).abs() < 1e-5, "{file} {text:?}: |v| = {norm}");
                worst = worst.min(cosine(&v, &want));
                // (the tiny models' vectors share a large part: compare each value too)
                let unit = want.iter().map(|y| y * y).sum::<f64>().sqrt();
                let off = v
                    .iter()
                    .zip(&want)
                    .map(|(&x, &y)| (x as f64 - y / unit).abs())
                    .fold(0.0, f64::max);
                assert!(off < 5e-4, "{file} {text:?}: a value {off} off llama.cpp's");
                got.push(v);
            }
            println!("{file}, {threads} thread(s): worst cosine {worst:.7}");
            assert!(worst >= MIN_COSINE, "{file}: cosine {worst}");
            let bytes: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
            assert_eq!(
                w.embed_batch(&bytes, dim).unwrap(),
                got,
                "{file}: embed_batch"
            );
            vectors.push(got);
        }
        assert_eq!(vectors[0], vectors[1], "{file}: 1 and 2 threads differ");
    }
}

#[test]
fn bad_gguf_embedders_are_errors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bert");
    let bert = std::fs::read(dir.join("tiny-bert-F16.gguf")).unwrap();
    let mut w = Wasmind::single_threaded().unwrap();
    let e = w
        .load_embedder_bytes(&bert, b"{}", b"{}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("GGUF embedder is one file"), "{e}");
    // a chat model is no sentence encoder
    let e = w
        .load_embedder_bytes(&read("models/tiny/tiny-llama-F16.gguf"), &[], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a sentence encoder"), "{e}");
    // a vocabulary without weights
    let vocab = std::fs::read(dir.join("vocab-wpm-uncased.gguf")).unwrap();
    let e = w
        .load_embedder_bytes(&vocab, &[], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
    // cut short
    let e = w
        .load_embedder_bytes(&bert[..bert.len() / 2], &[], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("(-"), "{e}");
    // nothing loaded after the failures
    let e = w.embed(b"hello", 32).unwrap_err().to_string();
    assert!(e.contains("no embedder"), "{e}");
    // and a good load after them works
    assert_eq!(w.load_embedder_bytes(&bert, &[], &[]).unwrap(), 32);
    assert_eq!(w.embed(b"hello", 32).unwrap().len(), 32);
    let e = w.embed(b"caf\xc3", 32).unwrap_err().to_string();
    assert!(e.contains("UTF-8"), "{e}");
}

/// The all-MiniLM-L6-v2 file: `$WASMIND_MINILM`, else the fixture (`cargo xtask fixtures`
/// converts it into `models/` with `python3 models/fetch.py --model all-minilm-l6-v2`).
fn minilm_file() -> std::path::PathBuf {
    std::env::var_os("WASMIND_MINILM")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| fixture("models/all-MiniLM-L6-v2-F16.gguf"))
}

/// The real all-MiniLM-L6-v2 against llama.cpp (`testdata/bert/minilm-reference.json`, made by
/// `gen_minilm.py`): the ids of 70 texts (one cut at 512 tokens, [SEP] kept) and their unit
/// vectors, on 2 threads; and the paraphrase pair that sentence-transformers' documentation
/// scores 0.7553.
#[test]
fn all_minilm_l6_v2_matches_llama_cpp() {
    let path = minilm_file();
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask fixtures`",
        path.display()
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bert");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("minilm-reference.json")).unwrap()).unwrap();
    let mut w = Wasmind::with_threads(2).unwrap();
    assert_eq!(w.load_embedder_gguf(&path).unwrap(), 384);
    let info: serde_json::Value = serde_json::from_str(&w.embedder_info().unwrap()).unwrap();
    println!("{}: {info}", path.display());
    assert_eq!(
        (&info["pooling"], &info["n_layers"], &info["max_tokens"]),
        (
            &serde_json::json!("mean"),
            &serde_json::json!(6),
            &serde_json::json!(512)
        )
    );
    let texts = strs(&r["texts"]);
    let (mut worst_cos, mut worst_off) = (1.0f64, 0.0f64);
    let mut got = vec![];
    for (text, row) in texts.iter().zip(r["rows"].as_array().unwrap()) {
        assert_eq!(
            w.embed_ids(text.as_bytes()).unwrap(),
            u32s(&row["ids"]),
            "ids of {:?}",
            &text[..text.len().min(60)]
        );
        let v = w.embed(text.as_bytes(), 384).unwrap();
        let want: Vec<f64> = row["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        worst_cos = worst_cos.min(cosine(&v, &want));
        let off = v
            .iter()
            .zip(&want)
            .map(|(&x, &y)| (x as f64 - y).abs())
            .fold(0.0, f64::max);
        worst_off = worst_off.max(off);
        got.push(v);
    }
    let dot =
        |a: &[f32], b: &[f32]| -> f64 { a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum() };
    let (n, para, other) = (texts.len(), &got[64], &got[65]);
    let (similar, unrelated) = (dot(para, other), dot(para, &got[66]));
    println!(
        "all-MiniLM-L6-v2: {n} texts, ids identical, worst cosine {worst_cos:.7}, largest |diff| \
         {worst_off:.2e}; paraphrase {similar:.4}, unrelated {unrelated:.4}"
    );
    assert!(worst_cos >= MIN_COSINE, "cosine {worst_cos}");
    assert!(worst_off < 2e-3, "a value {worst_off} off llama.cpp's");
    assert!((similar - 0.7553).abs() < 2e-3, "paraphrase {similar}");
}
