//! The native peer of the embedding bench: `model2vec-rs`'s `StaticModel::encode` over a JSON
//! array of texts, as many passes as fit in `--min-secs` (at least 3, after one warm-up), one
//! JSON line of throughput on stdout. Run with `RAYON_NUM_THREADS=1` for the single-thread
//! figure (`cargo xtask bench` does).
//!
//! `m2v-rs-peer --model DIR --texts T.json --set NAME [--min-secs 1]`

use std::time::Instant;

use model2vec_rs::model::StaticModel;

fn value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(model), Some(texts_path)) = (value(&args, "--model"), value(&args, "--texts")) else {
        eprintln!("usage: m2v-rs-peer --model DIR --texts T.json --set NAME [--min-secs 1]");
        std::process::exit(2);
    };
    let set = value(&args, "--set").unwrap_or_else(|| "texts".into());
    let min_secs: f64 = value(&args, "--min-secs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let texts: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(&texts_path).expect("texts file"))
            .expect("a JSON array of strings");
    let m = StaticModel::from_pretrained(&model, None, None, None).expect("model directory");
    let dim = m.encode(&texts[..1])[0].len();
    let warm = m.encode(&texts);
    assert_eq!(warm.len(), texts.len());
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed().as_secs_f64() < min_secs {
        let t = Instant::now();
        let v = m.encode(&texts);
        times.push(t.elapsed().as_secs_f64());
        std::hint::black_box(v);
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    let bytes: usize = texts.iter().map(String::len).sum();
    let n = texts.len() as f64;
    println!(
        "{}",
        serde_json::json!({
            "engine": "model2vec-rs", "bench": "embed", "api": "encode", "set": set, "dim": dim,
            "module": "model2vec-rs 0.4.0 (native)",
            "threads": std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.parse::<u32>().ok()),
            "texts": texts.len(), "bytes": bytes, "passes": times.len(),
            "texts_per_s": n / best, "mb_per_s": bytes as f64 / best / 1e6,
            "texts_per_s_median": n / med, "mb_per_s_median": bytes as f64 / med / 1e6,
        })
    );
}
