//! wasmind: small language models and sentence embeddings on the user's own CPU, in one
//! freestanding WebAssembly module.
//!
//! The pipeline, in the order data flows (and the order of the modules below):
//!
//! 1. [`wasm_alloc`]: the host copies a model file into a block from `alloc`; the module owns
//!    it from then on ([`wasm_alloc::Block`]).
//! 2. [`gguf`] reads it (hostile input, checked); [`json`] reads Model2Vec's JSON files and
//!    writes what the module reports, its numbers through [`decimal`] (exact float text).
//! 3. [`tokenizer`] turns text into the ids the model was trained on, and back.
//! 4. [`quant`] holds the weight block layouts and the matrix-vector kernels over them.
//! 5. [`model`] runs the forward pass over a KV cache and returns logits.
//! 6. [`sampler`] picks the next token from the logits, [`grammar`] (GBNF grammars and JSON
//!    schemas) masks the tokens that cannot continue a constrained reply; [`chat`] renders
//!    conversations with their templates, prefills only what is new and streams the reply.
//! 7. [`embed`] is the Model2Vec path: safetensors + tokenizer.json -> sentence vectors.
//! 8. [`engine`] owns what the driver has loaded: the language model (file, tokenizer, model,
//!    conversation, sampler) and the embedder, each with its own file and scratch.
//!
//! Under all of it: [`error`] (status codes and messages), [`state`] (the shared block at a
//! fixed address: pool words, stop flag, last error), [`math`] (hand-written `exp`/`log`/
//! `sin`/`cos`), [`pool`] (every kernel split across helper instances on this memory),
//! [`probe`] (streaming read bandwidth, for the bench).
//! [`abi`] (wasm only) is the thin `extern "C"` shell over [`engine`].
//!
//! The same crate compiles for the host (`cargo test`), where everything but `abi` and the
//! global allocator is exercised natively, and for `wasm32-wasip1`, where the same unit tests
//! run inside a wasm engine with SIMD128 (the wasm-only kernels against their references).
//! The product is `wasm32-unknown-unknown`: freestanding, no imports but its memory.
#![no_std]
#![cfg_attr(
    all(target_arch = "wasm32", target_feature = "atomics"),
    feature(stdarch_wasm_atomic_wait)
)]

extern crate alloc;
// On the host the crate links std for its panic handler and allocator (a cdylib needs both),
// and for the test harness. The engine code itself uses only `core` and `alloc`.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
extern crate std;

/// The one way a kernel picks its implementation: `simd128_or!(simd, scalar)` evaluates the
/// SIMD128 expression in wasm builds with `simd128` (the shipped modules, the wasip1 tests) and
/// the scalar reference everywhere else. Each SIMD kernel sits in a `simd128` module beside the
/// scalar `_ref` it is tested against. (The weight types of `quant` dispatch the same way inside
/// their `Kernels::dot`.)
macro_rules! simd128_or {
    ($simd:expr, $scalar:expr $(,)?) => {{
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        let chosen = $simd;
        // Never called: keeps the reference compiled (and so type-checked and "used") here too.
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        let _ = || $scalar;
        #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
        let chosen = $scalar;
        chosen
    }};
}

pub mod error;
pub mod state;
pub mod math;
pub mod pool;
pub mod probe;

pub mod wasm_alloc;
pub mod gguf;
pub mod decimal;
pub mod json;
pub mod unicode;
pub mod tokenizer;
pub mod quant;
pub mod model;
pub mod grammar;
pub mod sampler;
pub mod sort;
pub mod template;
pub mod chat;
pub mod embed;
pub mod engine;

#[cfg(test)]
mod testutil;

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod abi;

/// In wasm a panic cannot unwind; it becomes `unreachable`. Every fallible path returns a
/// status instead, so reaching this is a bug.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}
