//! The README's Rust example: one question to a GGUF chat model, the reply streamed to stdout.
//!
//!     cargo run --release -p wasmind-host --example chat -- models/SmolLM2-135M-Instruct.Q4_1.gguf

use std::io::Write;

use wasmind_host::{ROLE_USER, Wasmind};

fn main() -> wasmind_host::Result<()> {
    let model = std::env::args().nth(1).expect("usage: chat MODEL.gguf");
    let mut w = Wasmind::with_threads(2)?; // the driver and one helper thread
    w.load_model_file(model.as_ref(), 2048)?;
    w.chat_add(ROLE_USER, "What is the capital of France?")?;
    let reply = w.chat_reply(64, |piece| std::io::stdout().write_all(piece).unwrap())??;
    println!("\n({} tokens)", reply.ids.len());
    Ok(())
}
