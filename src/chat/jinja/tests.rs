//! The engine against `jinja2` with transformers' settings: every template of the fixtures
//! (`reference/jinja-templates.json`, made by host-tests/fixtures/gen/references/jinja_ref.py)
//! rendered for every conversation, byte for byte; plus hostile templates and the cost of a
//! turn.

use super::*;
use alloc::rc::Rc;
use crate::testutil::read_fixture;
use std::format;
use std::string::{String, ToString};
use std::vec::Vec;

fn render(t: &str, vars: &str) -> Result<String> {
    render_json(t, vars.as_bytes(), Limits::default(), Some(DateTime::from_unix(0)))
}

fn ok(t: &str, vars: &str) -> String {
    render(t, vars).unwrap_or_else(|e| panic!("{t:?}: {e}"))
}

/// The fixture's clock: `now` as "YYYY-MM-DDTHH:MM:SS".
fn parse_now(s: &str) -> DateTime {
    let n = |a: usize, b: usize| s[a..b].parse::<u32>().unwrap();
    DateTime {
        year: n(0, 4) as i32,
        month: n(5, 7),
        day: n(8, 10),
        hour: n(11, 13),
        minute: n(14, 16),
        second: n(17, 19),
    }
}

#[test]
fn every_template_renders_as_jinja2_does() {
    let bytes = read_fixture("reference/jinja-templates.json");
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    // The conversations as our own values too: serde_json would sort their keys, and a
    // template's `tojson` writes them in the order they came.
    let Value::Dict(root) = Value::from_json(&bytes).unwrap() else {
        panic!("not an object")
    };
    let Some(Value::Dict(ours)) = root.get_str("conversations") else {
        panic!("no conversations")
    };
    let now = parse_now(doc["now"].as_str().unwrap());
    let (mut cases, mut failures) = (0, Vec::new());
    for t in doc["templates"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let template = Template::parse(t["template"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for case in t["cases"].as_array().unwrap() {
            cases += 1;
            let conv = case["conversation"].as_str().unwrap();
            let Some(Value::Dict(c)) = ours.get_str(conv) else {
                panic!("no conversation {conv}")
            };
            let mut vars = (**c).clone();
            for k in ["bos_token", "eos_token"] {
                vars.set(Value::str(k), Value::str(t[k].as_str().unwrap()));
            }
            let vars = Value::Dict(Rc::new(vars));
            let got = template.render(&vars, Limits::default(), Some(now));
            match (got, case.get("text").and_then(|x| x.as_str())) {
                (Ok(g), Some(want)) if g == want => {}
                (Ok(g), Some(want)) => failures.push(format!(
                    "{name} x {conv}: differs at byte {}:\n got  {:?}\n want {:?}",
                    g.bytes().zip(want.bytes()).take_while(|(a, b)| a == b).count(),
                    g,
                    want
                )),
                (Err(e), Some(_)) => failures.push(format!("{name} x {conv}: error {e}")),
                (Ok(g), None) => failures.push(format!(
                    "{name} x {conv}: rendered {g:?}, jinja2 raised {}",
                    case["error"]
                )),
                (Err(e), None) => {
                    // A template's own raise_exception must say what jinja2's said.
                    let want = case["error"].as_str().unwrap();
                    let msg = e.to_string();
                    if msg.contains("raise_exception: ") && !msg.contains(want) {
                        failures.push(format!("{name} x {conv}: error {msg}, jinja2: {want}"));
                    }
                }
            }
        }
    }
    assert!(cases >= 300, "only {cases} cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ from jinja2:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
