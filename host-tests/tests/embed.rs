//! Model2Vec inside the real module against the Python `model2vec` package: pooled ids and
//! vectors for every corpus text, both shared models; bad inputs are errors.

mod common;
use common::*;
use host_tests::Wasmind;

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
        .load_embedder_dir(&shared(&format!("models/{name}")))
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
fn minilm_256_matches_model2vec() {
    parity("m2v-minilm-256", 0);
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
