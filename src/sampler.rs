//! The sampler: logits -> the next token id.
//!
//! One draw, in the order the steps run (`n` = vocabulary, `m` = candidates left):
//! ```text
//! logits (n,) -> candidates (id, logit) (n,)         NaN logits become -inf
//! repetition penalty: each distinct id among the last `repeat_window` tokens of the history
//!     has its logit divided by `repeat_penalty` (multiplied when negative)
//! temperature <= 0: greedy, the largest logit (lowest id on ties) -> done
//! top-k:  partial selection (select_nth, O(n)) of the k largest               (k,)
//! p_i = exp(l_i - l_max)                                                      (unnormalised, T = 1)
//! min-p:  keep p_i >= min_p (p_max = 1)                                       O(m)
//! top-p:  the fewest largest candidates whose mass reaches top_p, sorted in growing
//!         chunks (32, 128, 512, ...) so the usual small nucleus never sorts the whole set
//! temperature: w_i = exp((l_i - l_max) / T)
//! draw:   u = rng() * sum(w); the first candidate whose running sum exceeds u
//! ```
//! Top-p and min-p see the temperature-1 distribution and temperature shapes only the draw
//! among the survivors (llama.cpp's order). Every step is deterministic: the same logits,
//! history and RNG state give the same id on any engine and thread count (the logits already
//! are bit-identical across thread counts), so a seed reproduces a reply exactly.

use alloc::vec::Vec;

use crate::decimal::Shortest;
use crate::error::{Result, Status};
use crate::math::expf;
use crate::sort::{quicksort_by, select_nth_by};
use crate::{bail, err};

/// Largest repetition window (tokens of history looked at).
pub const MAX_REPEAT_WINDOW: u32 = 8192;
/// First chunk of the incremental sort behind top-p.
const TOP_P_FIRST_CHUNK: usize = 32;

/// What the sampler does; `Settings::default()` is the chat default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// 0 (or below): greedy. Otherwise divides the logits before the draw.
    pub temperature: f32,
    /// Keep the `top_k` largest logits; 0 = all.
    pub top_k: u32,
    /// Keep the smallest set of largest candidates whose probability reaches `top_p`; 1 = all.
    pub top_p: f32,
    /// Drop candidates less likely than `min_p` times the most likely one; 0 = none.
    pub min_p: f32,
    /// > 1 makes recently seen tokens less likely; 1 = off.
    pub repeat_penalty: f32,
    /// How many of the last tokens (prompt included) the penalty looks at.
    pub repeat_window: u32,
    pub seed: u64,
}

impl Default for Settings {
    /// Conservative settings that suit small chat models.
    fn default() -> Settings {
        Settings {
            temperature: 0.2,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.1,
            repeat_window: 64,
            seed: 0,
        }
    }
}

impl Settings {
    /// These settings as a JSON object appended to `out` (the `sampler_defaults` export).
    pub fn write_json(&self, out: &mut alloc::vec::Vec<u8>) {
        crate::json::ObjectWriter::new(out)
            .float32("temperature", self.temperature)
            .uint("top_k", self.top_k as u64)
            .float32("top_p", self.top_p)
            .float32("min_p", self.min_p)
            .float32("repeat_penalty", self.repeat_penalty)
            .uint("repeat_window", self.repeat_window as u64)
            .uint("seed", self.seed);
    }

    /// Greedy decoding with no penalty (the llama.cpp reference runs).
    pub const GREEDY: Settings = Settings {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        repeat_window: 0,
        seed: 0,
    };

    /// Rejects values that are out of range or NaN, naming the field.
    pub fn check(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature <= 100.0) {
            bail!(
                Status::InvalidArgument,
                "sampler: temperature {} is not a finite number <= 100",
                Shortest::from(self.temperature)
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            bail!(
                Status::InvalidArgument,
                "sampler: top_p {} is outside (0, 1]",
                Shortest::from(self.top_p)
            );
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            bail!(
                Status::InvalidArgument,
                "sampler: min_p {} is outside [0, 1]",
                Shortest::from(self.min_p)
            );
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty <= 100.0) {
            bail!(
                Status::InvalidArgument,
                "sampler: repeat_penalty {} is outside (0, 100]",
                Shortest::from(self.repeat_penalty)
            );
        }
        if self.repeat_window > MAX_REPEAT_WINDOW {
            bail!(
                Status::InvalidArgument,
                "sampler: repeat_window {} > {}",
                self.repeat_window,
                MAX_REPEAT_WINDOW
            );
        }
        Ok(())
    }
}

/// SplitMix64: a 64-bit counter through a mixing function. Small, fast, and the same
/// sequence everywhere.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    logit: f32,
    /// exp(logit - max) at the current step's temperature.
    weight: f32,
    id: u32,
}

/// Larger logit first; the lower id first on ties, so the order is total and deterministic.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> core::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// `a` comes before `b` in [`by_logit_desc`]'s order.
fn before(a: &Candidate, b: &Candidate) -> bool {
    by_logit_desc(a, b).is_lt()
}

pub struct Sampler {
    pub settings: Settings,
    rng: Rng,
    /// (n,) then fewer: the candidates of the current draw.
    candidates: Vec<Candidate>,
    /// Distinct ids of the penalty window, sorted.
    recent: Vec<u32>,
}

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler::new(Settings::default())
    }
}

impl Sampler {
    pub fn new(settings: Settings) -> Sampler {
        Sampler {
            settings,
            rng: Rng::new(settings.seed),
            candidates: Vec::new(),
            recent: Vec::new(),
        }
    }

    /// New settings; the RNG restarts from their seed.
    pub fn configure(&mut self, settings: Settings) -> Result<()> {
        settings.check()?;
        self.settings = settings;
        self.rng = Rng::new(settings.seed);
        Ok(())
    }

    /// Frees the buffers sized by the last vocabulary (0.6 MB for SmolLM2's 49,152 ids, 3 MB
    /// for Gemma 3's 262,144); the settings and the RNG stay.
    pub fn free_buffers(&mut self) {
        self.candidates = Vec::new();
        self.recent = Vec::new();
    }

    /// Restarts the RNG from the current seed (the same seed then gives the same reply).
    pub fn reseed(&mut self) {
        self.rng = Rng::new(self.settings.seed);
    }

    /// The next token given `logits` (vocab,) and the tokens so far (`history`, oldest first).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        let s = self.settings;
        if logits.is_empty() {
            bail!(Status::InvalidArgument, "sampler: no logits");
        }
        self.collect_recent(history)?;
        self.candidates.clear();
        self.candidates
            .try_reserve(logits.len())
            .map_err(|_| err!(Status::OutOfMemory, "sampler: {} candidates", logits.len()))?;
        let penalty = s.repeat_penalty;
        for (id, &l) in logits.iter().enumerate() {
            let mut logit = if l.is_nan() { f32::NEG_INFINITY } else { l };
            if penalty != 1.0 && self.recent.binary_search(&(id as u32)).is_ok() {
                logit = if logit > 0.0 {
                    logit / penalty
                } else {
                    logit * penalty
                };
            }
            self.candidates.push(Candidate {
                logit,
                weight: 0.0,
                id: id as u32,
            });
        }
        let c = &mut self.candidates;

        if s.temperature <= 0.0 {
            let best = c.iter().min_by(|a, b| by_logit_desc(a, b)).map(|c| c.id);
            return best.ok_or_else(|| err!(Status::InvalidArgument, "sampler: no logits"));
        }

        // top-k: the k largest, in no particular order.
        let k = s.top_k as usize;
        if k > 0 && k < c.len() {
            select_nth_by(c, k - 1, before);
            c.truncate(k);
        }

        // Weights at temperature 1, relative to the largest logit (so the max weighs 1).
        let max = c.iter().map(|x| x.logit).fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            bail!(
                Status::InvalidArgument,
                "sampler: every logit is -inf or NaN"
            );
        }
        for x in c.iter_mut() {
            x.weight = expf(x.logit - max);
        }

        // min-p: relative to the most likely candidate, whose weight is 1.
        if s.min_p > 0.0 {
            let keep = s.min_p;
            c.retain(|x| x.weight >= keep || x.logit == max);
        }

        // top-p: sort only as far as the nucleus reaches.
        if s.top_p < 1.0 {
            let total: f64 = c.iter().map(|x| x.weight as f64).sum();
            let target = s.top_p as f64 * total;
            let (mut sorted, mut chunk, mut mass) = (0usize, TOP_P_FIRST_CHUNK, 0.0f64);
            let mut keep = c.len();
            'grow: while sorted < c.len() {
                let (len, end) = (c.len(), (sorted + chunk).min(c.len()));
                let rest = &mut c[sorted..];
                if end < len {
                    select_nth_by(rest, end - sorted - 1, before);
                }
                quicksort_by(&mut rest[..end - sorted], before);
                for (i, x) in c.iter().enumerate().take(end).skip(sorted) {
                    mass += x.weight as f64;
                    if mass >= target {
                        keep = i + 1;
                        break 'grow;
                    }
                }
                sorted = end;
                chunk = chunk.saturating_mul(4);
            }
            c.truncate(keep);
        }

        // Temperature shapes the draw among the survivors.
        if s.temperature != 1.0 {
            let inv_t = 1.0 / s.temperature;
            for x in c.iter_mut() {
                x.weight = expf((x.logit - max) * inv_t);
            }
        }
        let total: f64 = c.iter().map(|x| x.weight as f64).sum();
        let u = self.rng.next_f64() * total;
        let mut run = 0.0f64;
        for x in c.iter() {
            run += x.weight as f64;
            if run > u {
                return Ok(x.id);
            }
        }
        // Rounding left u at the very top: the last candidate with any weight.
        c.iter()
            .rev()
            .find(|x| x.weight > 0.0)
            .or(c.first())
            .map(|x| x.id)
            .ok_or_else(|| err!(Status::InvalidArgument, "sampler: no candidate left"))
    }

    /// The distinct ids among the last `repeat_window` tokens of `history`, sorted.
    fn collect_recent(&mut self, history: &[u32]) -> Result<()> {
        self.recent.clear();
        if self.settings.repeat_penalty == 1.0 || self.settings.repeat_window == 0 {
            return Ok(());
        }
        let from = history
            .len()
            .saturating_sub(self.settings.repeat_window as usize);
        let window = &history[from..];
        self.recent
            .try_reserve(window.len())
            .map_err(|_| err!(Status::OutOfMemory, "sampler: repetition window"))?;
        self.recent.extend_from_slice(window);
        quicksort_by(&mut self.recent, |a, b| a < b);
        self.recent.dedup();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n)
            .map(|_| (r.next_f64() * 20.0 - 10.0) as f32)
            .collect()
    }

    fn argmax(xs: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &x) in xs.iter().enumerate() {
            if x > xs[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn greedy_is_argmax_lowest_id_on_ties_and_ignores_nan() {
        let mut s = Sampler::new(Settings::GREEDY);
        let l = logits(49152, 1);
        assert_eq!(s.sample(&l, &[]).unwrap(), argmax(&l));
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, 0.5, f32::NAN], &[]).unwrap(), 1);
        assert!(s.sample(&[], &[]).is_err());
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
        let mut s = Sampler::new(Settings {
            repeat_penalty: 2.0,
            repeat_window: 4,
            ..Settings::GREEDY
        });
        // Token 0 (logit 3) is recent: 1.5 < 2.0, so token 1 wins.
        assert_eq!(s.sample(&[3.0, 2.0, -1.0], &[0, 0]).unwrap(), 1);
        // Outside the window of 4 the penalty does not apply.
        assert_eq!(s.sample(&[3.0, 2.0, -1.0], &[0, 2, 2, 2, 2]).unwrap(), 0);
        // A negative logit gets more negative: -1 -> -2 loses to -1.5.
        assert_eq!(s.sample(&[-1.0, -1.5], &[0]).unwrap(), 1);
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        let l = logits(5000, 7);
        let want = argmax(&l);
        // Hot sampling, every filter off, then each filter at its tightest.
        let hot = Settings {
            temperature: 1.5,
            seed: 3,
            ..Settings::GREEDY
        };
        for settings in [
            Settings { top_k: 1, ..hot },
            Settings { top_p: 1e-6, ..hot },
            Settings { min_p: 1.0, ..hot },
        ] {
            let mut s = Sampler::new(settings);
            for _ in 0..20 {
                assert_eq!(s.sample(&l, &[]).unwrap(), want, "{settings:?}");
            }
        }
    }

    /// Brute force: sort everything, apply each filter literally; the sampled ids must lie in
    /// the set it keeps, and every kept id must come up.
    fn allowed(l: &[f32], s: &Settings) -> Vec<u32> {
        let mut c: Vec<(f32, u32)> = l.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
        c.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        if s.top_k > 0 {
            c.truncate(s.top_k as usize);
        }
        let max = c[0].0;
        let w: Vec<f64> = c.iter().map(|x| expf(x.0 - max) as f64).collect();
        let mut keep: Vec<(f32, u32, f64)> = c
            .iter()
            .zip(&w)
            .filter(|&(_, &w)| w >= s.min_p as f64)
            .map(|(x, &w)| (x.0, x.1, w))
            .collect();
        let total: f64 = keep.iter().map(|x| x.2).sum();
        let mut mass = 0.0;
        for i in 0..keep.len() {
            mass += keep[i].2;
            if mass >= s.top_p as f64 * total {
                keep.truncate(i + 1);
                break;
            }
        }
        let mut ids: Vec<u32> = keep.iter().map(|x| x.1).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn filters_keep_exactly_the_brute_force_set() {
        // Peaked logits so the sets are small enough to see every member.
        let l: Vec<f32> = logits(2000, 11).iter().map(|x| x * 3.0).collect();
        for settings in [
            Settings {
                temperature: 1.0,
                top_k: 8,
                top_p: 1.0,
                min_p: 0.0,
                repeat_penalty: 1.0,
                repeat_window: 0,
                seed: 1,
            },
            Settings {
                temperature: 2.0,
                top_k: 0,
                top_p: 0.5,
                min_p: 0.0,
                repeat_penalty: 1.0,
                repeat_window: 0,
                seed: 2,
            },
            Settings {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.2,
                repeat_penalty: 1.0,
                repeat_window: 0,
                seed: 3,
            },
            Settings {
                temperature: 0.7,
                top_k: 40,
                top_p: 0.9,
                min_p: 0.05,
                repeat_penalty: 1.0,
                repeat_window: 0,
                seed: 4,
            },
        ] {
            let want = allowed(&l, &settings);
            assert!(
                !want.is_empty() && want.len() < 60,
                "{settings:?}: {} kept",
                want.len()
            );
            let mut s = Sampler::new(settings);
            let mut seen = vec![];
            for _ in 0..4000 {
                let id = s.sample(&l, &[]).unwrap();
                assert!(
                    want.binary_search(&id).is_ok(),
                    "{settings:?}: drew {id} outside {want:?}"
                );
                seen.push(id);
            }
            seen.sort_unstable();
            seen.dedup();
            // Every member with a fair weight shows up in 4000 draws.
            assert!(
                seen.len() * 2 >= want.len(),
                "{settings:?}: saw {} of {}",
                seen.len(),
                want.len()
            );
        }
    }

    #[test]
    fn top_p_sorts_past_the_first_chunks() {
        // Flat logits: the nucleus is most of the vocabulary, reached only after several
        // chunks of the incremental sort.
        let l: Vec<f32> = (0..3000).map(|i| 1.0 - i as f32 * 1e-4).collect();
        let settings = Settings {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.8,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_window: 0,
            seed: 9,
        };
        let want = allowed(&l, &settings);
        let mut s = Sampler::new(settings);
        for _ in 0..2000 {
            let id = s.sample(&l, &[]).unwrap();
            assert!(
                want.binary_search(&id).is_ok(),
                "{id} outside the nucleus of {}",
                want.len()
            );
        }
    }

    #[test]
    fn temperature_follows_the_softmax() {
        // Two tokens with logits 1 and 0 at T = 0.5: p = 1 / (1 + e^-2) = 0.8808.
        let mut s = Sampler::new(Settings {
            temperature: 0.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_window: 0,
            seed: 5,
        });
        let n = 20000;
        let ones = (0..n)
            .filter(|_| s.sample(&[1.0, 0.0], &[]).unwrap() == 0)
            .count();
        let p = ones as f64 / n as f64;
        assert!((p - 0.8808).abs() < 0.01, "p = {p}");
    }

    #[test]
    fn same_seed_same_draws_different_seed_differs() {
        let l = logits(49152, 2).iter().map(|x| x * 0.3).collect::<Vec<_>>();
        let draws = |seed: u64| {
            let mut s = Sampler::new(Settings {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                repeat_penalty: 1.0,
                repeat_window: 0,
                seed,
            });
            (0..64)
                .map(|_| s.sample(&l, &[]).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(42), draws(42));
        assert_ne!(draws(42), draws(43));
        let mut s = Sampler::new(Settings {
            seed: 42,
            ..Settings::default()
        });
        let a: Vec<u32> = (0..8).map(|_| s.sample(&l, &[]).unwrap()).collect();
        s.reseed();
        let b: Vec<u32> = (0..8).map(|_| s.sample(&l, &[]).unwrap()).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_settings_are_rejected() {
        let ok = Settings::default();
        for bad in [
            Settings {
                temperature: f32::NAN,
                ..ok
            },
            Settings { top_p: 0.0, ..ok },
            Settings { top_p: 1.5, ..ok },
            Settings { min_p: -0.1, ..ok },
            Settings {
                repeat_penalty: 0.0,
                ..ok
            },
            Settings {
                repeat_window: MAX_REPEAT_WINDOW + 1,
                ..ok
            },
        ] {
            assert!(Sampler::default().configure(bad).is_err(), "{bad:?}");
        }
        assert!(Sampler::default().configure(ok).is_ok());
    }

    #[test]
    fn all_neg_inf_is_an_error_not_a_panic() {
        let mut s = Sampler::new(Settings {
            temperature: 1.0,
            ..Settings::default()
        });
        assert!(s.sample(&[f32::NEG_INFINITY, f32::NAN], &[]).is_err());
    }
}
