//! Chat templates through the real module: every rendering llama.cpp made
//! (the fixture `reference/templates.json`, and `testdata/templates-extra.json` for conversations
//! that file does not hold) comes out of `template_render` byte for byte, and out of
//! `wasmind template NAME` too.

mod common;
use common::{json, wasmind_piped};
use wasmind_host::Wasmind;

/// llama.cpp's renderings of conversations templates.json does not hold (gen_templates.py).
fn extra() -> serde_json::Value {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/templates-extra.json");
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// `template_render`'s input for a reference row.
fn request(row: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "messages": row["messages"],
        "add_assistant": row["add_ass"],
    }))
    .unwrap()
}

/// Renders every row of a reference file in the module; returns (renderings, mismatches).
fn compare(w: &mut Wasmind, r: &serde_json::Value) -> (usize, Vec<String>) {
    let mut n = 0;
    let mut bad = Vec::new();
    for (name, rows) in r["templates"].as_object().unwrap() {
        for row in rows.as_array().unwrap() {
            let want = row["text"].as_str().unwrap();
            match w.template_render(name, &request(row)) {
                Ok(got) if got == want.as_bytes() => {}
                Ok(got) => bad.push(format!(
                    "{name} {}:\n got {:?}\nwant {want:?}",
                    row["messages"],
                    String::from_utf8_lossy(&got)
                )),
                Err(e) => bad.push(format!("{name} {}: {e}", row["messages"])),
            }
            n += 1;
        }
    }
    (n, bad)
}

#[test]
fn every_reference_rendering_is_byte_identical_in_the_module() {
    let mut w = Wasmind::single_threaded().unwrap();
    let (n, bad) = compare(&mut w, &json("reference/templates.json"));
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(n, 22 * 6 * 2);
    println!("templates.json: {n}/{n} renderings byte-identical to llama.cpp's");
}

#[test]
fn unseen_conversations_render_as_llama_cpp_in_the_module() {
    let r = extra();
    let mut w = Wasmind::single_threaded().unwrap();
    let (n, bad) = compare(&mut w, &r);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(n >= 24 * 18 * 2, "{n}");
    println!("templates-extra.json: {n}/{n} renderings byte-identical to llama.cpp's");
}

#[test]
fn wasmind_template_prints_the_rendering_and_nothing_else() {
    let r = json("reference/templates.json");
    for (name, rows) in r["templates"].as_object().unwrap() {
        // The conversation with a system message and a reply, with the assistant's opening.
        let row = &rows[6];
        let out = wasmind_piped(&["template", name], &request(row));
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            row["text"].as_str().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn names_are_checked_and_requests_too() {
    let mut w = Wasmind::single_threaded().unwrap();
    let req = br#"{"messages": [{"role": "user", "content": "Hi"}], "add_assistant": true}"#;
    let e = w.template_render("nope", req).unwrap_err().to_string();
    assert!(
        e.contains("(-1)") && e.contains("chatml, llama3, gemma") && e.contains("qwen3"),
        "{e}"
    );
    let e = w.chat_set_template_name("Llama3").unwrap_err().to_string();
    assert!(e.contains("known: chatml"), "{e}");
    // No model: the empty name is ChatML.
    assert_eq!(
        w.template_render("", req).unwrap(),
        b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    // Qwen3 with and without thinking.
    assert!(
        w.template_render("qwen3", req)
            .unwrap()
            .ends_with(b"<|im_start|>assistant\n<think>\n\n</think>\n\n")
    );
    let think = br#"{"messages": [{"role": "user", "content": "Hi"}], "add_assistant": true, "think": true}"#;
    assert!(
        w.template_render("qwen3", think)
            .unwrap()
            .ends_with(b"<|im_start|>assistant\n")
    );
    for bad in [
        &br#"{"messages": [{"role": "tool", "content": "x"}]}"#[..],
        br#"{"messages": [{"role": "user"}]}"#,
        b"\xff",
        b"",
    ] {
        assert!(w.template_render("chatml", bad).is_err());
    }
}
