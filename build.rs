//! Build script for the `wasmind` crate.
//!
//! 1. Linker arguments for the two wasm builds (they live here, with the crate, not in a shell
//!    recipe). The threaded build is recognised by the `atomics` target feature.
//! 2. Unicode tables for the tokenizers and the embedder, generated into `OUT_DIR` from
//!    well-kept crates (see `generate_unicode_tables`).

use std::env;

/// Largest memory a threaded host may give us: the wasm32 limit, 65,536 pages of 64 KiB.
/// Hosts size their own (smaller) maximum from the model; an import may declare less.
const MAX_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Stack of the driver instance (helpers get their own stacks from the host).
const STACK_BYTES: u64 = 1024 * 1024;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    link_arguments();
    generate_unicode_tables();
}

fn link_arguments() {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch != "wasm32" || os != "unknown" {
        return;
    }
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let threaded = features.split(',').any(|f| f == "atomics");
    let mut args: Vec<String> = vec![
        format!("-zstack-size={STACK_BYTES}"),
        // Every instance gets its own stack: the host sets this global per instance.
        "--export=__stack_pointer".into(),
        // Relocated immediates (call targets, addresses of statics) as short LEB128s, not
        // padded to 5 bytes each: the same code, 33-34 KB (~5 %) smaller modules.
        "--compress-relocations".into(),
    ];
    if threaded {
        args.extend([
            "--import-memory".into(),
            "--shared-memory".into(),
            format!("--max-memory={MAX_MEMORY_BYTES}"),
        ]);
    } else {
        args.push(format!("--max-memory={MAX_MEMORY_BYTES}"));
    }
    for a in args {
        println!("cargo:rustc-link-arg-cdylib={a}");
    }
}

/// The Unicode version of llama.cpp's `unicode-data.cpp` (llama-cpp-python 0.3.36, the
/// references' version): a letter that a later version added (Tulu-Tigalari U+113B5 in 16.0) is
/// unassigned there, so `\p{L}` does not match it and the split patterns cut elsewhere. (Probed
/// through llama.cpp: CJK extension I, new in 15.1, is a letter there; nothing of 16.0 is.)
const ASSIGNED_VERSION: (u8, u8, u8) = (15, 1, 0);

/// The code points assigned by Unicode `version` (Age <= version), as sorted inclusive ranges.
fn assigned_by(version: (u8, u8, u8)) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    let (a, b, _) = version;
    let hir = regex_syntax::Parser::new()
        .parse(&format!("\\p{{Age=V{a}_{b}}}"))
        .expect("regex-syntax knows the Unicode Age property");
    let HirKind::Class(Class::Unicode(class)) = hir.kind() else {
        panic!("\\p{{Age}} is not a class of code points");
    };
    class
        .ranges()
        .iter()
        .map(|r| (r.start() as u32, r.end() as u32))
        .collect()
}

/// Writes `$OUT_DIR/unicode_tables.rs`, included by `src/unicode.rs`.
///
/// Every table is made by asking its source about each of the 0x110000 code points and
/// compressing the answers into runs, so nothing here is transcribed by hand:
/// - general category group (L, M, N, P, S, Z or C): `unicode-general-category` (its
///   `UNICODE_VERSION`), surrogates and every code point that Unicode [`ASSIGNED_VERSION`] had
///   not assigned yet (Age from `regex-syntax`) in C: the groups serve the BPE pre-tokenizers,
///   which must see text as llama.cpp's tables (`unicode-data.cpp`, generated from that
///   version) do;
/// - White_Space and the full lowercase mapping: Rust's own `char::is_whitespace` and
///   `char::to_lowercase` (`char::UNICODE_VERSION` of the compiler that runs this script);
/// - the BERT classes, NFD and canonical combining classes: exactly the crates that Hugging
///   Face `tokenizers` calls in its BERT normalizer and pre-tokenizer (`unicode_categories`,
///   `unicode-normalization-alignments`), so the embedder matches it code point for code point.
fn generate_unicode_tables() {
    use std::fmt::Write as _;
    use unicode_categories::UnicodeCategories;
    use unicode_general_category::{GeneralCategory as G, get_general_category};

    const END: u32 = 0x11_0000;
    const LATIN: u32 = 0x800; // code points below this get direct tables
    let chars = || (0..END).filter_map(char::from_u32);
    let mut out = String::new();
    let w = &mut out;
    let (a, b, c) = unicode_general_category::UNICODE_VERSION;
    writeln!(
        w,
        "pub const GROUP_UNICODE_VERSION: (u8, u8, u8) = ({a}, {b}, {c});"
    )
    .unwrap();
    let (a, b, c) = ASSIGNED_VERSION;
    writeln!(
        w,
        "pub const ASSIGNED_UNICODE_VERSION: (u8, u8, u8) = ({a}, {b}, {c});"
    )
    .unwrap();
    let (a, b, c) = char::UNICODE_VERSION;
    writeln!(
        w,
        "pub const STD_UNICODE_VERSION: (u8, u8, u8) = ({a}, {b}, {c});"
    )
    .unwrap();
    let (a, b, c) = unicode_normalization_alignments::UNICODE_VERSION;
    writeln!(
        w,
        "pub const NFD_UNICODE_VERSION: (u8, u8, u8) = ({a}, {b}, {c});"
    )
    .unwrap();

    // Runs: (first code point, value) pairs, a new run wherever the value changes.
    fn runs(values: &dyn Fn(u32) -> u8) -> Vec<(u32, u8)> {
        let mut r: Vec<(u32, u8)> = Vec::new();
        for cp in 0..END {
            let v = values(cp);
            if r.last().map(|l| l.1) != Some(v) {
                r.push((cp, v));
            }
        }
        r
    }
    fn emit_runs(w: &mut String, name: &str, r: &[(u32, u8)], latin: &dyn Fn(u32) -> u8) {
        let direct: Vec<String> = (0..LATIN).map(|cp| latin(cp).to_string()).collect();
        writeln!(
            w,
            "pub static {name}_DIRECT: [u8; {LATIN}] = [{}];",
            direct.join(",")
        )
        .unwrap();
        // Only the runs that cover LATIN and above, split at every plane's start (so each plane
        // has a run from its first code point), as the low 16 bits of each start, the values,
        // and where each plane's runs begin (`unicode::Runs`).
        let first = r.iter().rposition(|&(s, _)| s <= LATIN).unwrap();
        let mut split: Vec<(u32, u8)> = Vec::new();
        for (i, &(start, v)) in r.iter().enumerate().skip(first) {
            let end = r.get(i + 1).map_or(END, |n| n.0);
            split.push((start.max(LATIN), v));
            let mut plane = (start >> 16) + 1;
            while plane << 16 < end {
                split.push((plane << 16, v));
                plane += 1;
            }
        }
        let starts: Vec<u16> = split.iter().map(|&(s, _)| s as u16).collect();
        let values: Vec<u8> = split.iter().map(|&(_, v)| v).collect();
        let planes: Vec<u16> = (0..=END >> 16)
            .map(|p| split.partition_point(|&(s, _)| s >> 16 < p) as u16)
            .collect();
        writeln!(
            w,
            "pub static {name}_RUNS: super::Runs<{}> = super::Runs {{ starts: [{}], values: [{}], planes: [{}] }};",
            split.len(),
            list(&starts),
            list(&values),
            list(&planes)
        )
        .unwrap();
    }
    fn list<T: ToString>(v: &[T]) -> String {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
    fn emit<T: ToString>(w: &mut String, name: &str, ty: &str, v: &[T]) {
        writeln!(w, "pub static {name}: [{ty}; {}] = [{}];", v.len(), list(v)).unwrap();
    }

    // 1. General category group (its first letter), numbered in the order of `unicode::Group`;
    //    7 (read as Other, told apart by `unicode::is_control`) where ASSIGNED_VERSION had
    //    nothing yet.
    let assigned = assigned_by(ASSIGNED_VERSION);
    let group = |cp: u32| -> u8 {
        const OTHER: u8 = 6;
        const UNASSIGNED: u8 = 7;
        let Some(ch) = char::from_u32(cp) else {
            return OTHER; // Cs
        };
        let i = assigned.partition_point(|r| r.1 < cp);
        if assigned.get(i).is_none_or(|r| r.0 > cp) {
            return UNASSIGNED; // Cn
        }
        match get_general_category(ch) {
            G::UppercaseLetter
            | G::LowercaseLetter
            | G::TitlecaseLetter
            | G::ModifierLetter
            | G::OtherLetter => 0,
            G::NonspacingMark | G::SpacingMark | G::EnclosingMark => 1,
            G::DecimalNumber | G::LetterNumber | G::OtherNumber => 2,
            G::ConnectorPunctuation
            | G::DashPunctuation
            | G::OpenPunctuation
            | G::ClosePunctuation
            | G::InitialPunctuation
            | G::FinalPunctuation
            | G::OtherPunctuation => 3,
            G::MathSymbol | G::CurrencySymbol | G::ModifierSymbol | G::OtherSymbol => 4,
            G::SpaceSeparator | G::LineSeparator | G::ParagraphSeparator => 5,
            G::Control | G::Format | G::Surrogate | G::PrivateUse => OTHER,
            G::Unassigned => UNASSIGNED,
            other => panic!("general category {other:?} is new: extend unicode::Group"),
        }
    };
    emit_runs(w, "GROUP", &runs(&group), &group);

    // 2. White_Space: a short list.
    let ws: Vec<String> = chars()
        .filter(|c| c.is_whitespace())
        .map(|c| (c as u32).to_string())
        .collect();
    writeln!(
        w,
        "pub static WHITE_SPACE: [u32; {}] = [{}];",
        ws.len(),
        ws.join(",")
    )
    .unwrap();

    // 3. Full lowercase. Single mappings come in ranges with one delta (A-Z +32; Latin
    //    Extended's upper/lower pairs, every second code point +1): LOWER_RANGES holds
    //    `start << 11 | (count - 1) << 1 | (stride - 1)`, LOWER_DELTA the delta of each. The
    //    1->many mappings are listed apart: LOWER_MULTI_FROM, and LOWER_MULTI_AT (`offset << 8
    //    | len` into LOWER_MULTI).
    let (mut ranges, mut deltas) = (Vec::<(u32, u32, u32)>::new(), Vec::<i32>::new());
    let (mut multi_from, mut multi_at, mut multi) = (Vec::new(), Vec::new(), Vec::<u32>::new());
    for ch in chars() {
        let l: Vec<u32> = ch.to_lowercase().map(|c| c as u32).collect();
        let f = ch as u32;
        if l == [f] {
            continue;
        }
        if l.len() > 1 {
            assert!(l.len() <= 3 && multi.len() < 1 << 16);
            multi_from.push(f);
            multi_at.push((multi.len() as u32) << 8 | l.len() as u32);
            multi.extend(&l);
            continue;
        }
        let d = l[0] as i32 - f as i32;
        if let (Some(r), Some(&rd)) = (ranges.last_mut(), deltas.last())
            && rd == d
            && r.1 < 1024
        {
            if r.1 == 1 && f - r.0 <= 2 {
                (r.1, r.2) = (2, f - r.0);
                continue;
            }
            if f == r.0 + r.1 * r.2 {
                r.1 += 1;
                continue;
            }
        }
        ranges.push((f, 1, 1));
        deltas.push(d);
    }
    let packed: Vec<u32> = ranges
        .iter()
        .map(|&(s, n, stride)| s << 11 | (n - 1) << 1 | (stride - 1))
        .collect();
    emit(w, "LOWER_RANGES", "u32", &packed);
    emit(w, "LOWER_DELTA", "i32", &deltas);
    emit(w, "LOWER_MULTI_FROM", "u32", &multi_from);
    emit(w, "LOWER_MULTI_AT", "u32", &multi_at);
    emit(w, "LOWER_MULTI", "u32", &multi);

    // 4. NFD (canonical, full) without the Hangul syllables, which are algorithmic, in two
    //    tables: code points below U+10000 (whose decompositions stay below it) in u16 arrays,
    //    the rest in u32 ones. `{NFD,NFD_SUPP}_AT`: `offset << 4 | plane2 << 3 | len` into the
    //    pool.
    let mut nfd: [(Vec<u32>, Vec<u32>, Vec<u32>); 2] = Default::default();
    for ch in chars() {
        if (0xAC00..0xAC00 + 11172).contains(&(ch as u32)) {
            continue;
        }
        let mut d = Vec::new();
        unicode_normalization_alignments::char::decompose_canonical(ch, |x| d.push(x as u32));
        if d == [ch as u32] {
            continue;
        }
        let supp = ch as u32 > 0xFFFF;
        // The few BMP code points whose decomposition leaves the BMP (CJK compatibility
        // ideographs) decompose into plane 2: their pool entries drop 0x20000, flagged in AT.
        let plane2 = !supp && d.iter().any(|&c| c > 0xFFFF);
        assert!(!plane2 || d.iter().all(|&c| c >> 16 == 2));
        let (from, at, pool) = &mut nfd[supp as usize];
        assert!(!d.is_empty() && d.len() < 8 && pool.len() < 1 << 12);
        from.push(ch as u32);
        at.push((pool.len() as u32) << 4 | (plane2 as u32) << 3 | d.len() as u32);
        pool.extend(d.iter().map(|&c| if plane2 { c - 0x20000 } else { c }));
    }
    for ((from, at, pool), (name, ty)) in nfd.iter().zip([("NFD", "u16"), ("NFD_SUPP", "u32")]) {
        emit(w, &format!("{name}_FROM"), ty, from);
        emit(w, &format!("{name}_AT"), "u16", at);
        emit(w, &format!("{name}_POOL"), ty, pool);
    }
    let ccc = |cp: u32| {
        char::from_u32(cp).map_or(
            0,
            unicode_normalization_alignments::char::canonical_combining_class,
        )
    };
    emit_runs(w, "CCC", &runs(&ccc), &ccc);

    // 5. The BERT classes as Hugging Face tokenizers computes them (bits of `unicode::bert`).
    let bert = |cp: u32| -> u8 {
        let Some(ch) = char::from_u32(cp) else {
            return 0;
        };
        let tab_nl_cr = matches!(ch, '\t' | '\n' | '\r');
        let mut f = 0u8;
        if cp == 0 || cp == 0xFFFD || (!tab_nl_cr && ch.is_other()) {
            f |= 1; // DROP (clean_text)
        }
        if tab_nl_cr || ch.is_whitespace() {
            f |= 2; // SPACE
        }
        if matches!(cp, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
        {
            f |= 4; // CJK
        }
        if ch.is_ascii_punctuation() || ch.is_punctuation() {
            f |= 8; // PUNCT
        }
        if ch.is_mark_nonspacing() {
            f |= 16; // MN
        }
        let mut d = 0;
        unicode_normalization_alignments::char::decompose_canonical(ch, |x| {
            d += if x == ch { 0 } else { 1 }
        });
        if d != 0 {
            f |= 32; // DECOMPOSES
        }
        if ch.to_lowercase().ne([ch]) {
            f |= 64; // LOWER
        }
        f
    };
    emit_runs(w, "BERT", &runs(&bert), &bert);

    let path = std::path::Path::new(&env::var("OUT_DIR").unwrap()).join("unicode_tables.rs");
    std::fs::write(path, out).unwrap();
}
