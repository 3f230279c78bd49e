//! wasmind: small language models and sentence embeddings on the user's own CPU, in one
//! freestanding WebAssembly module.
//!
//! The pipeline, in the order data flows:
//!
//! 1. [`gguf`] reads a model file already copied into linear memory (hostile input, checked).
//! 2. [`tokenizer`] turns text into the ids the model was trained on, and back.
//! 3. [`quant`] holds the weight block layouts and the matrix-vector kernels over them.
//! 4. [`model`] runs the llama/qwen2 forward pass over a KV cache and returns logits.
//! 5. [`pool`] splits every kernel across helper instances that share this memory.
//! 6. [`embed`] is the Model2Vec path: safetensors + tokenizer.json -> sentence vectors.
//!
//! [`math`] has the hand-written `exp`/`log`/`sin`/`cos`; [`state`] pins all shared state at
//! fixed addresses; [`abi`] (wasm only) is the thin `extern "C"` shell over all of it.
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

pub mod error;
pub mod math;
pub mod pool;
pub mod state;

pub mod chat;
pub mod embed;
pub mod engine;
pub mod gguf;
pub mod json;
pub mod model;
pub mod quant;
pub mod sampler;
pub mod template;
pub mod tokenizer;
pub mod unicode;

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod abi;
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod wasm_alloc;

/// In wasm a panic cannot unwind; it becomes `unreachable`. Every fallible path returns a
/// status instead, so reaching this is a bug.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}
