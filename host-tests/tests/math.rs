//! The hand-written math inside the real modules, against `libm`, over 10^6 arguments each.
//! (The same functions are tested natively and under wasip1 by the crate's unit tests; this
//! checks the code as it runs in the shipped .wasm.)

mod common;

use common::XorShift64;
use wasmind_host::Wasmind;

const SAMPLES: usize = 1_000_000;
const MAX_ULP: u64 = 2;

fn ulp_diff64(a: f64, b: f64) -> u64 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    if a == b {
        return 0;
    }
    let key = |x: f64| {
        let i = x.to_bits() as i64;
        if i < 0 { i64::MIN - i } else { i }
    };
    key(a).abs_diff(key(b))
}

fn ulp_diff32(a: f32, b: f32) -> u64 {
    if a.is_nan() && b.is_nan() || a == b {
        return 0;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32 as i64;
        if i < 0 { i32::MIN as i64 - i } else { i }
    };
    key(a).abs_diff(key(b))
}

fn apply64(w: &mut Wasmind, which: u32, xs: &[f64]) -> Vec<f64> {
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let ptr = w.put(&bytes).unwrap();
    let n = w
        .call::<(u32, u32, u32, u32), i32>("math_apply", (which, ptr, ptr, xs.len() as u32))
        .unwrap();
    assert_eq!(n as usize, xs.len());
    let out = w.read(ptr, bytes.len());
    w.call::<(u32, u32), ()>("free", (ptr, bytes.len() as u32))
        .unwrap();
    out.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn check64(w: &mut Wasmind, which: u32, name: &str, xs: &[f64], reference: fn(f64) -> f64) {
    let ys = apply64(w, which, xs);
    let mut worst = (0u64, 0.0f64);
    for (&x, &y) in xs.iter().zip(&ys) {
        let d = ulp_diff64(y, reference(x));
        if d > worst.0 {
            worst = (d, x);
        }
    }
    println!(
        "{name}: {} arguments, max {} ulp (at {:e})",
        xs.len(),
        worst.0,
        worst.1
    );
    assert!(
        worst.0 <= MAX_ULP,
        "{name}({:e}) is {} ulp from libm",
        worst.1,
        worst.0
    );
}

fn modules() -> Vec<(&'static str, Wasmind)> {
    vec![
        ("wasmind.wasm", Wasmind::single_threaded().unwrap()),
        ("wasmind-mt.wasm", Wasmind::threaded(1).unwrap()),
    ]
}

#[test]
fn exp_log_sin_cos_match_libm_inside_the_module() {
    let mut rng = XorShift64(0x1234_5678_9abc_def1);
    let exp_args: Vec<f64> = (0..SAMPLES).map(|_| rng.uniform(-708.0, 709.0)).collect();
    // log over (0, 1e308]: log-uniform exponents, subnormals included.
    let log_args: Vec<f64> = (0..SAMPLES)
        .map(|i| {
            if i % 50 == 0 {
                f64::from_bits(1 + rng.next() % ((1u64 << 52) - 1))
            } else {
                10f64.powf(rng.uniform(-307.0, 308.0))
            }
        })
        .collect();
    let trig_args: Vec<f64> = (0..SAMPLES)
        .map(|i| match i % 4 {
            0 => rng.uniform(-1e5, 1e5),
            1 => rng.uniform(-10.0, 10.0),
            // near multiples of pi/2
            2 => {
                (rng.next() % 127_324) as f64
                    * core::f64::consts::FRAC_PI_2
                    * if i % 8 == 2 { 1.0 } else { -1.0 }
            }
            _ => (rng.next() % 100_000) as f64, // integers (RoPE positions)
        })
        .collect();
    for (name, mut w) in modules() {
        println!("-- {name}");
        check64(&mut w, 0, "exp", &exp_args, libm::exp);
        check64(&mut w, 1, "log", &log_args, libm::log);
        check64(&mut w, 2, "sin", &trig_args, libm::sin);
        check64(&mut w, 3, "cos", &trig_args, libm::cos);
    }
}

#[test]
fn special_values_inside_the_module() {
    for (_, mut w) in modules() {
        let xs = [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            5e-324,
            1e-310,
            710.0,
            -746.0,
            -1.0,
        ];
        let functions = [
            (0, "exp", libm::exp as fn(f64) -> f64),
            (1, "log", libm::log),
            (2, "sin", libm::sin),
            (3, "cos", libm::cos),
        ];
        for (which, name, reference) in functions {
            let got = apply64(&mut w, which, &xs);
            for (&x, &y) in xs.iter().zip(&got) {
                assert!(
                    ulp_diff64(y, reference(x)) <= MAX_ULP,
                    "{name}({x:e}) = {y:e}"
                );
            }
            if name == "sin" {
                assert!(
                    got[1].is_sign_negative() && got[1] == 0.0,
                    "sin(-0) must be -0"
                );
            }
        }
    }
}

#[test]
fn simd_expf_matches_libm_inside_the_module() {
    let mut rng = XorShift64(0xfeed_beef_cafe_f00d);
    let xs: Vec<f32> = (0..SAMPLES)
        .map(|_| rng.uniform(-87.0, 88.0) as f32)
        .collect();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    for (name, mut w) in modules() {
        let ptr = w.put(&bytes).unwrap();
        w.call::<(u32, u32, u32, u32), i32>("math_apply", (4, ptr, ptr, xs.len() as u32))
            .unwrap();
        let out = w.read(ptr, bytes.len());
        let mut worst = (0u64, 0.0f32);
        for (c, &x) in out.chunks_exact(4).zip(&xs) {
            let y = f32::from_le_bytes(c.try_into().unwrap());
            let d = ulp_diff32(y, libm::expf(x));
            if d > worst.0 {
                worst = (d, x);
            }
        }
        println!("{name} expf x4: max {} ulp (at {:e})", worst.0, worst.1);
        assert!(
            worst.0 <= MAX_ULP,
            "expf({:e}) is {} ulp from libm",
            worst.1,
            worst.0
        );
    }
}
