//! The driver's state: two owners, each with its own file block, scratch and lifecycle.
//!
//! - [`llm::LlmEngine`]: a GGUF file and what is built over it (tokenizer, forward pass), the
//!   conversation in its KV cache, the sampler, streaming detokenization.
//! - [`embedding::EmbedEngine`]: a Model2Vec model (its safetensors block) and the scratch its
//!   embeddings use, one per thread for `embed_batch`.
//!
//! One static [`Driver`] holds both (`abi.rs`); only the driver thread touches it. Exports that
//! return text write it to `Driver::result`, valid until the next such call.

pub mod embedding;
pub mod llm;

use alloc::vec::Vec;

pub use embedding::EmbedEngine;
pub use llm::LlmEngine;

#[derive(Default)]
pub struct Driver {
    pub llm: LlmEngine,
    pub embedder: EmbedEngine,
    /// Text results (model_info, detokenize, stream pieces, chat pieces and stats).
    pub result: Vec<u8>,
}
