//! Tests of the GGUF reader: every fixture model file parses; hostile variants (truncated,
//! corrupted, absurd) fail with an error and never panic.

use super::*;
use crate::testutil::{Rng, fixture, missing, read_fixture};
use alloc::string::String;
use alloc::vec;
use std::fs;

fn read(rel: &str) -> Vec<u8> {
    read_fixture(&std::format!("models/{rel}"))
}

fn gguf_files() -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["tiny", "vocab"] {
        let path = fixture(&std::format!("models/{dir}"));
        let entries = fs::read_dir(&path).unwrap_or_else(|e| panic!("{}", missing(&path, &e)));
        for e in entries {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".gguf") {
                out.push(std::format!("{dir}/{name}"));
            }
        }
    }
    out.sort();
    out.push("SmolLM2-135M-Instruct.Q4_1.gguf".into());
    // At least the tiny llama/qwen2 files of every tensor type, the vocabulary files and the
    // SmolLM2 file (the fixtures gain files over time: more architectures).
    let count = |prefix: &str| out.iter().filter(|f| f.starts_with(prefix)).count();
    assert!(
        count("tiny/tiny-llama-") >= 11 && count("tiny/tiny-qwen2-") >= 2 && count("vocab/") >= 6,
        "expected 11 tiny llama, 2 tiny qwen2 and 6 vocab files: {out:?}"
    );
    out
}

#[test]
fn parses_every_shared_model() {
    for rel in gguf_files() {
        let bytes = read(&rel);
        let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(g.version(), 3, "{rel}");
        assert_eq!(g.data_offset() % g.alignment(), 0, "{rel}");
        let arch = g.get_str("general.architecture").unwrap();
        assert!(
            ["llama", "qwen2", "qwen3", "gemma3", "phi3"].contains(&arch),
            "{rel}: {arch}"
        );
        for t in g.tensors() {
            assert_eq!(
                t.data.len() as u64,
                t.rows() * t.ty.row_bytes(t.dims[0]).unwrap(),
                "{rel} {}",
                t.name
            );
            assert_eq!(t.file_offset % g.alignment(), 0);
            assert!(core::ptr::eq(g.tensor(t.name).unwrap(), t));
        }
        if rel.starts_with("vocab/") {
            assert!(g.tensors().is_empty(), "{rel}");
            let tokens = g.get_array("tokenizer.ggml.tokens").unwrap();
            let n = tokens.strings().unwrap().count();
            assert_eq!(n, tokens.len());
            assert!(n == 49152 || n == 262144, "{rel}: {n}");
        }
    }
}

/// Facts checked with the `gguf` PyPI package's GGUFReader.
#[test]
fn smollm2_metadata_and_tensors() {
    let bytes = read("SmolLM2-135M-Instruct.Q4_1.gguf");
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.metadata().len(), 36 - 3); // GGUFReader adds GGUF.version/tensor_count/kv_count
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.data_offset(), 1785664);
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 100000.0);
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(
        g.get_bool_opt("tokenizer.ggml.add_bos_token").unwrap(),
        Some(false)
    );
    assert_eq!(g.get_u32_opt("no.such.key").unwrap(), None);
    assert_eq!(
        g.get_u32("no.such.key").unwrap_err().status,
        Status::BadFormat
    );
    // Wrong type is an error naming the key.
    let e = g.get_u32("general.architecture").unwrap_err();
    assert!(e.message.as_str().contains("general.architecture"), "{e}");

    let merges = g.get_array("tokenizer.ggml.merges").unwrap();
    assert_eq!(merges.len(), 48900);
    let types = g.get_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(types.i32s().unwrap().len(), 49152);
    assert!(types.f32s().is_none());
    let tokens: Vec<&[u8]> = g
        .get_array("tokenizer.ggml.tokens")
        .unwrap()
        .strings()
        .unwrap()
        .collect();
    assert_eq!(tokens[0], b"<|endoftext|>");
    assert_eq!(tokens[1], b"<|im_start|>");

    let emb = g.tensor("token_embd.weight").unwrap();
    assert_eq!((emb.n_dims, emb.dims), (2, [576, 49152, 1, 1]));
    assert_eq!(emb.ty, GgmlType::Q8_0);
    assert_eq!(emb.data.len(), 49152 * 576 / 32 * 34);
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!((q.dims, q.ty), ([576, 576, 1, 1], GgmlType::Q4_1));
    assert!(g.tensor("output.weight").is_none());
}

#[test]
fn nested_arrays_and_every_value_type() {
    let mut b = Builder::new(3, 0);
    b.kv("a.u8", 0, &[7]);
    b.kv("a.i8", 1, &[0xff]);
    b.kv("a.u16", 2, &300u16.to_le_bytes());
    b.kv("a.i16", 3, &(-300i16).to_le_bytes());
    b.kv("a.u32", 4, &70000u32.to_le_bytes());
    b.kv("a.i32", 5, &(-70000i32).to_le_bytes());
    b.kv("a.f32", 6, &1.5f32.to_le_bytes());
    b.kv("a.bool", 7, &[1]);
    b.kv("a.str", 8, &gstr("héllo"));
    b.kv("a.u64", 10, &(1u64 << 40).to_le_bytes());
    b.kv("a.i64", 11, &(-1i64).to_le_bytes());
    b.kv("a.f64", 12, &2.25f64.to_le_bytes());
    // [[1, 2], [], [3]] as an array of u32 arrays.
    let mut nested = arr_head(9, 3);
    for inner in [&[1u32, 2][..], &[], &[3]] {
        nested.extend(arr_head(4, inner.len() as u64));
        for v in inner {
            nested.extend(v.to_le_bytes());
        }
    }
    b.kv("a.nested", 9, &nested);
    let mut strs = arr_head(8, 2);
    strs.extend(gstr("x"));
    strs.extend(gstr(""));
    b.kv("a.strs", 9, &strs);
    let file = b.finish();
    let g = Gguf::parse(&file).unwrap();
    assert_eq!(g.get("a.u8"), Some(&Value::U8(7)));
    assert_eq!(g.get("a.i8"), Some(&Value::I8(-1)));
    assert_eq!(g.get("a.i16"), Some(&Value::I16(-300)));
    assert_eq!(g.get_u32("a.u16").unwrap(), 300);
    assert_eq!(g.get_i64("a.i32").unwrap(), -70000);
    assert!(g.get_u32("a.i32").is_err());
    assert_eq!(g.get_u32("a.u64").unwrap_err().status, Status::BadFormat);
    assert_eq!(g.get_i64("a.u64").unwrap(), 1 << 40);
    assert_eq!(g.get_f32("a.f32").unwrap(), 1.5);
    assert_eq!(g.get_f32("a.f64").unwrap(), 2.25);
    assert!(g.get_bool("a.bool").unwrap());
    assert_eq!(g.get_str("a.str").unwrap(), "héllo");
    let outer = g.get_array("a.nested").unwrap();
    let got: Vec<Vec<u32>> = outer
        .values()
        .map(|v| match v {
            Value::Array(a) => a.u32s().unwrap().collect(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, vec![vec![1, 2], vec![], vec![3]]);
    let s: Vec<&[u8]> = g.get_array("a.strs").unwrap().strings().unwrap().collect();
    assert_eq!(s, vec![&b"x"[..], b""]);
    assert!(g.data().is_empty());
}

// ---- hostile files ------------------------------------------------------------------------

/// Every prefix that ends at a 1 KiB boundary inside the header (everything before the data
/// section), and a few inside the data, must fail.
#[test]
fn truncated_files_fail() {
    let mut checked = 0;
    for rel in gguf_files() {
        let bytes = read(&rel);
        let data_offset = Gguf::parse(&bytes).unwrap().data_offset();
        // The full sweep on the real model and the tiny files; every 7th KiB on the vocab
        // files (same writer, same structure; a full sweep of all of them takes minutes in a
        // debug build).
        let stride = if rel.starts_with("vocab/") {
            7 * 1024
        } else {
            1024
        };
        let mut cuts: Vec<usize> = (0..data_offset).step_by(stride).collect();
        cuts.extend([1, 3, 7, 23, data_offset.saturating_sub(1)]);
        if data_offset < bytes.len() {
            cuts.extend([data_offset + 1, bytes.len() - 1]);
        }
        for cut in cuts {
            let r = Gguf::parse(&bytes[..cut]);
            assert!(r.is_err(), "{rel} cut at {cut} of {} parsed", bytes.len());
            checked += 1;
        }
    }
    assert!(checked > 3000, "{checked}");
}

/// A small deterministic generator (xorshift64*), enough to scatter corruptions.
/// Random bytes flipped or set anywhere in the header never panic. (A flipped byte inside a
/// token's text or a float is still a valid file, so here success is allowed; the structural
/// fields are covered one by one below.)
#[test]
fn corrupted_headers_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut errors = 0;
    let mut total = 0;
    for rel in [
        "tiny/tiny-llama-Q4_K.gguf",
        "tiny/tiny-qwen2-F32.gguf",
        "vocab/vocab-bpe-smollm.gguf",
    ] {
        let original = read(rel);
        let header = Gguf::parse(&original).unwrap().data_offset();
        let rounds = if header > 100_000 { 300 } else { 3000 };
        // For big headers, corrupt near the structure-dense start and the end of the metadata.
        for _ in 0..rounds {
            let mut bytes = original.clone();
            let span = header.min(4096);
            for _ in 0..1 + rng.below(8) {
                let at = if rng.below(2) == 0 {
                    rng.below(span)
                } else {
                    header - 1 - rng.below(span)
                };
                match rng.below(4) {
                    0 => bytes[at] ^= 1 << rng.below(8),
                    1 => bytes[at] = rng.next() as u8,
                    2 => bytes[at] = 0xff,
                    _ => bytes[at] = 0,
                }
            }
            total += 1;
            if Gguf::parse(&bytes).is_err() {
                errors += 1;
            }
        }
    }
    assert!(
        errors > total / 4,
        "only {errors} of {total} corruptions were noticed"
    );
}

/// A GGUF file built field by field, to state absurd values exactly.
struct Builder {
    kvs: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    version: u32,
    data: Vec<u8>,
    alignment: usize,
}

fn gstr(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend(s.as_bytes());
    v
}
fn arr_head(elem: u32, n: u64) -> Vec<u8> {
    let mut v = elem.to_le_bytes().to_vec();
    v.extend(n.to_le_bytes());
    v
}

impl Builder {
    fn new(version: u32, data_bytes: usize) -> Builder {
        Builder {
            kvs: vec![],
            n_kv: 0,
            infos: vec![],
            n_tensors: 0,
            version,
            data: vec![0; data_bytes],
            alignment: 32,
        }
    }
    fn kv(&mut self, key: &str, ty: u32, value: &[u8]) -> &mut Self {
        self.kvs.extend(gstr(key));
        self.kvs.extend(ty.to_le_bytes());
        self.kvs.extend(value);
        self.n_kv += 1;
        self
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.infos.extend(gstr(name));
        self.infos.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend(offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }
    fn finish(&self) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend(self.version.to_le_bytes());
        f.extend(self.n_tensors.to_le_bytes());
        f.extend(self.n_kv.to_le_bytes());
        f.extend(&self.kvs);
        f.extend(&self.infos);
        while !f.len().is_multiple_of(self.alignment) {
            f.push(0);
        }
        f.extend(&self.data);
        f
    }
}

/// One tensor of 64 F32 values at offset 0, 256 bytes of data.
fn one_tensor() -> Builder {
    let mut b = Builder::new(3, 256);
    b.kv("general.architecture", 8, &gstr("llama"));
    b.tensor("w", &[64], 0, 0);
    b
}

#[test]
fn builder_file_is_valid() {
    let f = one_tensor().finish();
    let g = Gguf::parse(&f).unwrap();
    assert_eq!(g.tensor("w").unwrap().data.len(), 256);
    let mut b = one_tensor();
    b.version = 2;
    assert!(Gguf::parse(&b.finish()).is_ok());
}

fn expect_err(f: &[u8], status: Status, needle: &str) {
    match Gguf::parse(f) {
        Ok(_) => panic!("parsed, expected an error mentioning {needle:?}"),
        Err(e) => {
            assert_eq!(e.status, status, "{e}");
            assert!(
                e.message.as_str().contains(needle),
                "{e} does not mention {needle:?}"
            );
        }
    }
}

#[test]
fn absurd_fields_fail_with_named_errors() {
    // Header.
    let mut f = one_tensor().finish();
    f[0] = b'g';
    expect_err(&f, Status::BadFormat, "magic");
    let mut b = one_tensor();
    b.version = 1;
    expect_err(&b.finish(), Status::Unsupported, "version 1");
    b.version = 3u32.swap_bytes();
    expect_err(&b.finish(), Status::Unsupported, "big-endian");
    b.version = 4;
    expect_err(&b.finish(), Status::BadFormat, "version 4");
    for (field, at) in [("tensor_count", 8), ("kv_count", 16)] {
        for v in [u64::MAX, 1 << 40, MAX_TENSOR_COUNT + 1, 1000] {
            let mut f = one_tensor().finish();
            f[at..at + 8].copy_from_slice(&v.to_le_bytes());
            expect_err(&f, Status::BadFormat, field);
        }
    }

    // Metadata.
    let mut b = one_tensor();
    b.kv("k", 8, &u64::MAX.to_le_bytes());
    expect_err(&b.finish(), Status::BadFormat, "string length");
    let mut b = one_tensor();
    b.kv("k", 8, &(1u64 << 20).to_le_bytes());
    expect_err(&b.finish(), Status::BadFormat, "runs past the end");
    let mut b = one_tensor();
    b.kv("k", 13, &[]);
    expect_err(&b.finish(), Status::BadFormat, "unknown value type 13");
    let mut b = one_tensor();
    b.kv("k", 7, &[2]);
    expect_err(&b.finish(), Status::BadFormat, "bool");
    let mut b = one_tensor();
    b.kv("k", 9, &arr_head(4, u64::MAX));
    expect_err(&b.finish(), Status::BadFormat, "array length");
    let mut b = one_tensor();
    b.kv("k", 9, &arr_head(4, 1 << 20));
    expect_err(&b.finish(), Status::BadFormat, "runs past the end");
    let mut b = one_tensor();
    b.kv("k", 9, &arr_head(77, 0));
    expect_err(&b.finish(), Status::BadFormat, "element type 77");
    let mut b = one_tensor();
    let mut deep = Vec::new();
    for _ in 0..MAX_ARRAY_DEPTH + 1 {
        deep.extend(arr_head(9, 1));
    }
    b.kv("k", 9, &deep);
    expect_err(&b.finish(), Status::BadFormat, "nested deeper");
    let mut b = one_tensor();
    let mut strs = arr_head(8, 2);
    strs.extend(gstr("ok"));
    strs.extend(u64::MAX.to_le_bytes());
    b.kv("k", 9, &strs);
    expect_err(&b.finish(), Status::BadFormat, "'k'[1]");
    let mut b = one_tensor();
    b.kv("general.architecture", 8, &gstr("qwen2"));
    expect_err(
        &b.finish(),
        Status::BadFormat,
        "'general.architecture' appears more than once",
    );
    let mut b = one_tensor();
    b.kvs.extend(gstr("\u{ff}"));
    let n = b.kvs.len();
    b.kvs[n - 1] = 0xff; // "\xc3\xff": not UTF-8
    b.kvs.extend(4u32.to_le_bytes());
    b.kvs.extend(0u32.to_le_bytes());
    b.n_kv += 1;
    expect_err(&b.finish(), Status::BadFormat, "not UTF-8");
    for (v, needle) in [(0u32, "power of two"), (3, "power of two")] {
        let mut b = one_tensor();
        b.kv("general.alignment", 4, &v.to_le_bytes());
        expect_err(&b.finish(), Status::BadFormat, needle);
    }
    let mut b = one_tensor();
    b.kv("general.alignment", 5, &64i32.to_le_bytes());
    expect_err(
        &b.finish(),
        Status::BadFormat,
        "general.alignment has type i32",
    );

    // Tensor infos.
    let tensor_case = |dims: &[u64], ty: u32, offset: u64, status: Status, needle: &str| {
        let mut b = Builder::new(3, 256);
        b.tensor("t", dims, ty, offset);
        expect_err(&b.finish(), status, needle);
    };
    tensor_case(&[1, 1, 1, 1, 1], 0, 0, Status::BadFormat, "n_dims 5");
    tensor_case(&[], 0, 0, Status::BadFormat, "n_dims 0");
    tensor_case(&[u64::MAX], 0, 0, Status::BadFormat, "dim 0");
    tensor_case(&[1 << 40, 1 << 40], 0, 0, Status::BadFormat, "overflows");
    tensor_case(&[1 << 62], 0, 0, Status::BadFormat, "overflows"); // bytes = 2^64
    tensor_case(&[1 << 32, 1 << 20], 0, 0, Status::BadFormat, "runs past");
    tensor_case(&[65], 0, 0, Status::BadFormat, "runs past");
    tensor_case(&[64], 0, 32, Status::BadFormat, "runs past");
    tensor_case(&[64], 0, u64::MAX - 31, Status::BadFormat, "runs past");
    tensor_case(&[64], 0, 4, Status::BadFormat, "alignment");
    tensor_case(&[33], 8, 0, Status::BadFormat, "block size");
    tensor_case(
        &[32],
        16,
        0,
        Status::Unsupported,
        "'t' has type IQ2_XXS (id 16)",
    );
    tensor_case(&[32], 1234, 0, Status::Unsupported, "id 1234");
    let mut b = Builder::new(3, 256);
    b.tensor("a", &[32], 0, 0).tensor("a", &[32], 0, 128);
    expect_err(&b.finish(), Status::BadFormat, "'a' appears more than once");
    let mut b = Builder::new(3, 256);
    b.tensor("a", &[32], 0, 0).tensor("b", &[32], 0, 96);
    expect_err(&b.finish(), Status::BadFormat, "overlap");
    let mut b = Builder::new(3, 256);
    b.tensor("a", &[32], 0, 0).tensor("b", &[32], 0, 128);
    assert!(Gguf::parse(&b.finish()).is_ok());
    let mut b = Builder::new(3, 0);
    b.tensor(&"n".repeat(300), &[1], 0, 0);
    expect_err(&b.finish(), Status::BadFormat, "string length 300");
}

/// A file with no tensors may end unpadded right after its header; any other shortfall fails.
#[test]
fn vocab_only_padding() {
    let mut b = Builder::new(3, 0);
    b.kv("k", 4, &1u32.to_le_bytes());
    let mut f = b.finish();
    let unpadded = 4 + 4 + 8 + 8 + 8 + 1 + 4 + 4;
    assert_eq!(f.len(), 64);
    assert!(Gguf::parse(&f).is_ok());
    f.truncate(unpadded);
    assert!(Gguf::parse(&f).is_ok());
    f.push(0);
    expect_err(&f, Status::BadFormat, "data section");
}

#[test]
fn a_wrong_magic_is_named_in_hex() {
    let e = Gguf::parse(b"PK\x03\x04 and the rest of a zip file").unwrap_err();
    assert_eq!(e.status, Status::BadFormat);
    assert!(
        e.message.as_str().contains("0x504b0304") && e.message.as_str().contains("0x47475546"),
        "{e}"
    );
}
