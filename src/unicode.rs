//! Unicode data for the tokenizers and the embedder: general category, White_Space, full
//! lowercase, canonical decomposition (NFD) and the character classes of the BERT normalizer.
//!
//! Nothing here is hand-maintained: `build.rs` (`generate_unicode_tables`) asks each source
//! about every code point and writes compact run tables into `$OUT_DIR/unicode_tables.rs`.
//! Lookups below 0x800 index a direct table; above it they binary-search the runs (each
//! `start << 8 | value` in one `u32`). Lowercase is a list of ranges with one delta each, NFD
//! two tables (u16 for the Basic Multilingual Plane, u32 past it).
//!
//! Sources and their Unicode versions (each stated as a constant below):
//! - [`category`]: the `unicode-general-category` crate ([`UNICODE_VERSION`]), cut to the code
//!   points that Unicode [`ASSIGNED_UNICODE_VERSION`] had assigned (later ones are `Cn`): it
//!   serves the BPE pre-tokenizers, which must class text as llama.cpp's tables do, and those
//!   are generated from that older version.
//! - [`is_white_space`], [`to_lowercase`]: Rust's own `char::is_whitespace` / `char::to_lowercase`
//!   ([`STD_UNICODE_VERSION`]) — the same functions Hugging Face `tokenizers` calls.
//! - [`nfd`], [`canonical_combining_class`], [`bert`]: the very crates `tokenizers` uses in its
//!   BERT normalizer and pre-tokenizer (`unicode-normalization-alignments`, Unicode
//!   [`NFD_UNICODE_VERSION`]; `unicode_categories`), so the embedder matches it exactly, old
//!   data included.

#[allow(clippy::all)]
mod tables {
    include!(concat!(env!("OUT_DIR"), "/unicode_tables.rs"));
}

/// Unicode version of the general category data ([`category`]).
pub const UNICODE_VERSION: (u8, u8, u8) = tables::CATEGORY_UNICODE_VERSION;
/// The code points that this Unicode version had not assigned are `Cn` in [`category`]
/// (llama.cpp's `unicode-data.cpp`).
pub const ASSIGNED_UNICODE_VERSION: (u8, u8, u8) = tables::ASSIGNED_UNICODE_VERSION;
/// Unicode version of White_Space and lowercase (Rust's `char`, as compiled into build.rs).
pub const STD_UNICODE_VERSION: (u8, u8, u8) = tables::STD_UNICODE_VERSION;
/// Unicode version of the decompositions and combining classes (as Hugging Face tokenizers).
pub const NFD_UNICODE_VERSION: (u8, u8, u8) = tables::NFD_UNICODE_VERSION;

/// Below this, run tables have a direct per-code-point copy.
const DIRECT: u32 = 0x800;

/// Looks a code point (at most U+10FFFF) up in a run table (direct below [`DIRECT`]).
#[inline(always)]
fn run_lookup(cp: u32, direct: &[u8; DIRECT as usize], runs: &[u32]) -> u8 {
    if cp < DIRECT {
        return direct[cp as usize];
    }
    // The first run starts at or below DIRECT <= cp, so the index is at least 1.
    let i = runs.partition_point(|&r| r >> 8 <= cp);
    runs.get(i.wrapping_sub(1)).map_or(0, |&r| r as u8)
}

/// General category, in the order of Unicode's table (UAX #44).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    Lu,
    Ll,
    Lt,
    Lm,
    Lo,
    Mn,
    Mc,
    Me,
    Nd,
    Nl,
    No,
    Pc,
    Pd,
    Ps,
    Pe,
    Pi,
    Pf,
    Po,
    Sm,
    Sc,
    Sk,
    So,
    Zs,
    Zl,
    Zp,
    Cc,
    Cf,
    Cs,
    Co,
    Cn,
}

impl Category {
    const ALL: [Category; 30] = {
        use Category::*;
        [
            Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po, Sm, Sc, Sk, So,
            Zs, Zl, Zp, Cc, Cf, Cs, Co, Cn,
        ]
    };

    /// L*: Lu, Ll, Lt, Lm, Lo.
    pub const fn is_letter(self) -> bool {
        (self as u8) <= Category::Lo as u8
    }
    /// M*: Mn, Mc, Me.
    pub const fn is_mark(self) -> bool {
        matches!(self, Category::Mn | Category::Mc | Category::Me)
    }
    /// N*: Nd, Nl, No.
    pub const fn is_number(self) -> bool {
        matches!(self, Category::Nd | Category::Nl | Category::No)
    }
    /// P*: Pc, Pd, Ps, Pe, Pi, Pf, Po.
    pub const fn is_punctuation(self) -> bool {
        let v = self as u8;
        v >= Category::Pc as u8 && v <= Category::Po as u8
    }
    /// S*: Sm, Sc, Sk, So.
    pub const fn is_symbol(self) -> bool {
        let v = self as u8;
        v >= Category::Sm as u8 && v <= Category::So as u8
    }
    /// Z*: Zs, Zl, Zp.
    pub const fn is_separator(self) -> bool {
        matches!(self, Category::Zs | Category::Zl | Category::Zp)
    }
    /// C*: Cc, Cf, Cs, Co, Cn.
    pub const fn is_other(self) -> bool {
        (self as u8) >= Category::Cc as u8
    }
    /// The two-letter abbreviation, e.g. "Lu".
    pub const fn abbreviation(self) -> &'static str {
        const NAMES: [&str; 30] = [
            "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
            "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs",
            "Co", "Cn",
        ];
        NAMES[self as usize]
    }
}

/// General category of a code point; `Cs` for surrogates, `Cn` past U+10FFFF.
#[inline]
pub fn category(cp: u32) -> Category {
    if cp >= 0x11_0000 {
        return Category::Cn;
    }
    let v = run_lookup(cp, &tables::CATEGORY_DIRECT, &tables::CATEGORY_RUNS);
    Category::ALL
        .get(v as usize)
        .copied()
        .unwrap_or(Category::Cn)
}

/// The White_Space property (as Rust's `char::is_whitespace`).
#[inline]
pub fn is_white_space(cp: u32) -> bool {
    match cp {
        0x09..=0x0D | 0x20 => true,
        _ if cp < 0x85 => false,
        _ => tables::WHITE_SPACE.binary_search(&cp).is_ok(),
    }
}

/// The full lowercase mapping of one code point: one to three code points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lowercase {
    cps: [u32; 3],
    len: u8,
}

impl Lowercase {
    pub fn as_slice(&self) -> &[u32] {
        &self.cps[..self.len as usize]
    }
}

/// Full lowercase mapping (as `char::to_lowercase`, context-free: Σ always gives σ).
/// A code point without a mapping maps to itself.
#[inline]
pub fn to_lowercase(cp: u32) -> Lowercase {
    let single = |c| Lowercase {
        cps: [c, 0, 0],
        len: 1,
    };
    if cp < 0x80 {
        return single(if cp.wrapping_sub(b'A' as u32) < 26 {
            cp + 32
        } else {
            cp
        });
    }
    let Some(k) = tables::LOWER_MULTI_FROM.iter().position(|&f| f == cp) else {
        // The range that starts last at or before cp: `start << 11 | (count - 1) << 1 |
        // (stride - 1)`; cp maps if it is one of the range's `count` code points.
        let i = tables::LOWER_RANGES.partition_point(|&r| r >> 11 <= cp);
        let (Some(&r), Some(&delta)) = (
            tables::LOWER_RANGES.get(i.wrapping_sub(1)),
            tables::LOWER_DELTA.get(i.wrapping_sub(1)),
        ) else {
            return single(cp);
        };
        let (offset, stride) = (cp - (r >> 11), (r & 1) + 1);
        if !offset.is_multiple_of(stride) || offset / stride > (r >> 1) & 0x3FF {
            return single(cp);
        }
        return single(cp.wrapping_add_signed(delta));
    };
    let to = tables::LOWER_MULTI_AT[k];
    let (at, len) = (((to >> 8) & 0xFFFF) as usize, (to & 0xFF) as usize);
    let mut m = Lowercase {
        cps: [0; 3],
        len: 0,
    };
    for (slot, &c) in m
        .cps
        .iter_mut()
        .zip(tables::LOWER_MULTI.iter().skip(at).take(len))
    {
        *slot = c;
        m.len += 1;
    }
    m
}

/// Hangul syllables decompose by formula (Unicode §3.12), not by table.
mod hangul {
    // The syllable block, then the leading, vowel and trailing jamo it is made of.
    pub const S_BASE: u32 = 0xAC00;
    pub const S_COUNT: u32 = 19 * V_COUNT * T_COUNT;
    pub const L_BASE: u32 = 0x1100;
    pub const V_BASE: u32 = 0x1161;
    pub const T_BASE: u32 = 0x11A7;
    pub const V_COUNT: u32 = 21;
    pub const T_COUNT: u32 = 28;
}

/// Full canonical decomposition of one code point, emitted in order (not yet canonically
/// reordered across neighbouring characters: see [`canonical_combining_class`]). A code point
/// without one is emitted as is.
#[inline]
pub fn nfd(cp: u32, mut emit: impl FnMut(u32)) {
    use hangul::*;
    let s = cp.wrapping_sub(S_BASE);
    if s < S_COUNT {
        emit(L_BASE + s / (V_COUNT * T_COUNT));
        emit(V_BASE + (s % (V_COUNT * T_COUNT)) / T_COUNT);
        if !s.is_multiple_of(T_COUNT) {
            emit(T_BASE + s % T_COUNT);
        }
        return;
    }
    if cp < 0xC0 {
        return emit(cp);
    }
    if let Ok(bmp) = u16::try_from(cp) {
        nfd_in(
            bmp,
            &tables::NFD_FROM,
            &tables::NFD_AT,
            &tables::NFD_POOL,
            emit,
        );
    } else {
        nfd_in(
            cp,
            &tables::NFD_SUPP_FROM,
            &tables::NFD_SUPP_AT,
            &tables::NFD_SUPP_POOL,
            emit,
        );
    }
}

/// [`nfd`] in one of its two tables (`at`: `offset << 4 | plane2 << 3 | len` into `pool`; with
/// `plane2` the pool holds the code points less 0x20000).
#[inline(always)]
fn nfd_in<C: Copy + Ord + Into<u32>>(
    cp: C,
    from: &[C],
    at: &[u16],
    pool: &[C],
    mut emit: impl FnMut(u32),
) {
    let Some(&at) = from.binary_search(&cp).ok().and_then(|i| at.get(i)) else {
        return emit(cp.into());
    };
    let (start, len) = ((at >> 4) as usize, (at & 7) as usize);
    let plane = if at & 8 != 0 { 0x2_0000 } else { 0 };
    for &c in pool.iter().skip(start).take(len) {
        emit(c.into() + plane);
    }
}

/// Canonical combining class (0 for starters), for canonical ordering after [`nfd`].
#[inline]
pub fn canonical_combining_class(cp: u32) -> u8 {
    if cp >= 0x11_0000 {
        return 0;
    }
    run_lookup(cp, &tables::CCC_DIRECT, &tables::CCC_RUNS)
}

/// Character classes of Hugging Face's BERT normalizer and pre-tokenizer, one byte of flags
/// per code point. A code point whose class is 0 passes normalization unchanged and is part of
/// a word.
pub mod bert {
    use super::{run_lookup, tables};

    /// Removed by `clean_text`: U+0000, U+FFFD, and Cc/Cf/Co (of `unicode_categories`) other
    /// than tab, newline and carriage return.
    pub const DROP: u8 = 1;
    /// White space (`char::is_whitespace`, plus tab/newline/CR): becomes ' ' in `clean_text`,
    /// splits words in the pre-tokenizer.
    pub const SPACE: u8 = 2;
    /// In the CJK ideograph blocks: surrounded by spaces by `handle_chinese_chars`.
    pub const CJK: u8 = 4;
    /// ASCII punctuation or P* (of `unicode_categories`): a word of its own.
    pub const PUNCT: u8 = 8;
    /// Mn (of `unicode_categories`): removed after NFD by `strip_accents`.
    pub const MN: u8 = 16;
    /// Has a canonical decomposition ([`super::nfd`] changes it).
    pub const DECOMPOSES: u8 = 32;
    /// Lowercase changes it ([`super::to_lowercase`]).
    pub const LOWER: u8 = 64;

    /// The flags of one code point.
    #[inline(always)]
    pub fn class(cp: u32) -> u8 {
        if cp >= 0x11_0000 {
            return 0;
        }
        run_lookup(cp, &tables::BERT_DIRECT, &tables::BERT_RUNS)
    }
}

/// Length of the UTF-8 sequence that starts with `lead`: 2, 3 or 4 by its high bits, and 1 for
/// ASCII and for a byte that cannot start a sequence (a continuation byte), as llama.cpp's
/// `unicode_len_utf8` counts it. On valid UTF-8 every lead byte gets its sequence's length.
#[inline(always)]
pub fn utf8_len(lead: u8) -> usize {
    match lead >> 4 {
        0xC | 0xD => 2,
        0xE => 3,
        0xF => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    //! Every code point against the generator crates and std (the sources of the tables).
    use super::*;
    use std::vec::Vec;

    #[test]
    fn category_matches_the_crate_everywhere() {
        use regex_syntax::hir::{Class, HirKind};
        use unicode_general_category::{GeneralCategory as G, get_general_category};
        let hir = regex_syntax::Parser::new().parse(r"\p{Age=V15_1}").unwrap();
        let HirKind::Class(Class::Unicode(assigned)) = hir.kind() else {
            panic!("{hir:?}")
        };
        let assigned = |cp: u32| {
            assigned
                .ranges()
                .iter()
                .any(|r| (r.start() as u32..=r.end() as u32).contains(&cp))
        };
        let mut cut = 0;
        for cp in 0..0x11_0000u32 {
            let want = match char::from_u32(cp).map(get_general_category) {
                None => "Cs",
                Some(G::Unassigned) => "Cn",
                Some(_) if !assigned(cp) => {
                    cut += 1;
                    "Cn"
                }
                Some(g) => g.abbreviation(),
            };
            assert_eq!(category(cp).abbreviation(), want, "U+{cp:04X}");
        }
        // Unicode 16.0 assigned 5,185 code points.
        assert_eq!(cut, 5185);
        assert_eq!(
            category(0x113B5),
            Category::Cn,
            "Tulu-Tigalari, new in 16.0"
        );
        assert_eq!(
            category(0x2EBF0),
            Category::Lo,
            "CJK extension I, new in 15.1"
        );
        assert_eq!(category(0x11_0000), Category::Cn);
        assert_eq!(category(u32::MAX), Category::Cn);
        assert_eq!(UNICODE_VERSION, (16, 0, 0));
        assert_eq!(ASSIGNED_UNICODE_VERSION, (15, 1, 0));
        assert!(category('a' as u32).is_letter() && category('!' as u32).is_punctuation());
    }

    #[test]
    fn white_space_and_lowercase_match_std_everywhere() {
        for cp in 0..0x11_0000u32 {
            let Some(ch) = char::from_u32(cp) else {
                assert!(!is_white_space(cp));
                assert_eq!(to_lowercase(cp).as_slice(), &[cp]);
                continue;
            };
            assert_eq!(is_white_space(cp), ch.is_whitespace(), "U+{cp:04X}");
            let want: Vec<u32> = ch.to_lowercase().map(|c| c as u32).collect();
            assert_eq!(to_lowercase(cp).as_slice(), &want[..], "U+{cp:04X}");
        }
        assert_eq!(to_lowercase(0x130).as_slice(), &[0x69, 0x307]);
    }

    #[test]
    fn nfd_and_ccc_match_the_crate_everywhere() {
        use unicode_normalization_alignments::char as un;
        for cp in 0..0x11_0000u32 {
            let Some(ch) = char::from_u32(cp) else {
                continue;
            };
            let mut want = Vec::new();
            un::decompose_canonical(ch, |c| want.push(c as u32));
            let mut got = Vec::new();
            nfd(cp, |c| got.push(c));
            assert_eq!(got, want, "U+{cp:04X}");
            assert_eq!(
                canonical_combining_class(cp),
                un::canonical_combining_class(ch)
            );
        }
    }

    #[test]
    fn bert_classes_match_the_crates_everywhere() {
        use unicode_categories::UnicodeCategories;
        for cp in 0..0x11_0000u32 {
            let f = bert::class(cp);
            let Some(ch) = char::from_u32(cp) else {
                assert_eq!(f, 0);
                continue;
            };
            let special = matches!(ch, '\t' | '\n' | '\r');
            let drop = cp == 0 || cp == 0xFFFD || (!special && ch.is_other());
            assert_eq!(f & bert::DROP != 0, drop, "U+{cp:04X}");
            assert_eq!(
                f & bert::SPACE != 0,
                special || ch.is_whitespace(),
                "U+{cp:04X}"
            );
            let punct = ch.is_ascii_punctuation() || ch.is_punctuation();
            assert_eq!(f & bert::PUNCT != 0, punct, "U+{cp:04X}");
            assert_eq!(f & bert::MN != 0, ch.is_mark_nonspacing(), "U+{cp:04X}");
            let mut d = Vec::new();
            nfd(cp, |c| d.push(c));
            assert_eq!(f & bert::DECOMPOSES != 0, d != [cp], "U+{cp:04X}");
            assert_eq!(
                f & bert::LOWER != 0,
                to_lowercase(cp).as_slice() != [cp],
                "U+{cp:04X}"
            );
        }
        assert_eq!(bert::class(0x4E00) & bert::CJK, bert::CJK);
        assert_eq!(bert::class(0x3000) & bert::CJK, 0);
    }
}
