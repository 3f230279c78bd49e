//! The engine against `jinja2` with transformers' settings: every template of the fixtures
//! (`reference/jinja-templates.json`, made by host-tests/fixtures/gen/references/jinja_ref.py)
//! rendered for every conversation, byte for byte; plus hostile templates and the cost of a
//! turn.

use super::*;
use crate::testutil::read_fixture;
use alloc::rc::Rc;
use std::format;
use std::string::{String, ToString};
use std::vec::Vec;

fn render(t: &str, vars: &str) -> Result<String> {
    render_json(
        t,
        vars.as_bytes(),
        Limits::default(),
        Some(DateTime::from_unix(0)),
    )
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
                    g.bytes()
                        .zip(want.bytes())
                        .take_while(|(a, b)| a == b)
                        .count(),
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

#[test]
fn python_semantics() {
    let cases: &[(&str, &str)] = &[
        (
            "{{ [1, 'a', none, true, 1.5, {'k': (1, 2)}] }}",
            "[1, 'a', None, True, 1.5, {'k': (1, 2)}]",
        ),
        (
            "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 3/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }}",
            "1e+16 1000000000000000.0 0.0001 1e-05 1.5 3 -4 2",
        ),
        (
            "{{ 'abc'[::-1] }} {{ [1,2,3][-2:] }} {{ 'a b  c'.split() }} {{ ' x '.strip() }}",
            "cba [2, 3] ['a', 'b', 'c'] x",
        ),
        (
            "{% for i in [1,2,3] %}{% if i==1 %}{% set x=5 %}{% endif %}{{ x }}{% endfor %}",
            "5",
        ),
        (
            "{% set x=1 %}{% for i in [1] %}{% set x=2 %}{% endfor %}{{ x }}",
            "1",
        ),
        (
            "{% set ns = namespace(a=1) %}{% for i in [1,2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}",
            "4",
        ),
        (
            "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{% set c = 9 %}{{ m(1) }}",
            "129",
        ),
        (
            "{{ {'b': 1, 'a': [1, 2.0, none]} | tojson }} {{ {'é': 1} | tojson(indent=2) }}",
            "{\"b\": 1, \"a\": [1, 2.0, null]} {\n  \"é\": 1\n}",
        ),
        (
            "{{ [1] | tojson(separators=(',', ':')) }} {{ {'b':1,'a':2} | tojson(sort_keys=true) }}",
            "[1] {\"a\": 2, \"b\": 1}",
        ),
        (
            "{{ x is defined }} {{ x | length }} {{ x ~ 'a' }} {{ none | default('d') }} {{ x | default('d') }}",
            "False 0 a None d",
        ),
        (
            "{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }};{{ loop.index }}/{{ loop.length }}{% endfor %}",
            "a=1;1/1",
        ),
        ("  {% if true %}\n  x\n  {% endif %}\n", "  x\n"),
        ("a  {{- ' b ' -}}  c", "a b c"),
        ("{{ strftime_now('%d %b %Y %A') }}", "01 Jan 1970 Thursday"),
        (
            "{{ '%s-%d' % ('a', 3) }} {{ 'x{}y{k}'.format(1, k=2) }}",
            "a-3 x1y2",
        ),
        ("{{ ('<'|safe) + '<' }} {{ '<' ~ ('<'|safe) }}", "<&lt; <<"),
    ];
    for (t, want) in cases {
        assert_eq!(ok(t, "{}"), *want, "{t}");
    }
    let msgs = r#"{"messages": [{"role": "user", "content": "Hi"}], "x": 3}"#;
    assert_eq!(ok("{{ messages[0].content }}{{ x * 2 }}", msgs), "Hi6");
}

/// Errors name the line and column; the template's own exception says its message.
#[test]
fn errors_name_line_and_column() {
    let e = render("ok\n{{ raise_exception('no system role') }}", "{}").unwrap_err();
    assert!(
        e.to_string()
            .contains("line 2, column 19: raise_exception: no system role"),
        "{e}"
    );
    for (t, at) in [
        ("{% if x %}", "line 1, column 11"),
        ("a\n  {{ 1 + }}", "line 2, column 10"),
        ("{% for %}", "line 1, column 8"),
        ("{{ 'open }}", "line 1, column 4"),
        ("{% endfor %}", "line 1, column 4"),
        ("{{ x.pop(0) }}", "line 1, column 5"),
    ] {
        let e = render(t, r#"{"x": {"a": 1}}"#).unwrap_err().to_string();
        assert!(e.contains(at), "{t:?}: {e}");
    }
}

/// Hostile templates fail within the limits, quickly, never hang or overflow the stack.
#[test]
fn hostile_templates_fail_cleanly() {
    let start = std::time::Instant::now();
    let deep_ifs = "{% if true %}".repeat(5000);
    let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(100_000), ")".repeat(100_000));
    let long_chain = format!("{{{{ 1{} }}}}", "+1".repeat(200_000));
    let long_attrs = format!("{{{{ x{} }}}}", ".a".repeat(200_000));
    let long_filters = format!("{{{{ x{} }}}}", "|trim".repeat(200_000));
    let nots = format!("{{{{ {}1 }}}}", "not ".repeat(100_000));
    let hostile = [
        deep_ifs.as_str(),
        &deep_parens,
        &long_chain,
        &long_attrs,
        &long_filters,
        &nots,
        // Loops that never end or run too long.
        "{% for i in range(100000000) %}x{% endfor %}",
        "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}",
        // Output and strings that grow without bound.
        "{% for i in range(1000000) %}{{ 'x' * 1000 }}{% endfor %}",
        "{{ 'x' * 10000000000 }}",
        "{% set s = namespace(v='x') %}{% for i in range(100) %}{% set s.v = s.v + s.v %}{% endfor %}",
        "{{ [1] * 1000000000 }}",
        // Recursion.
        "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
        "{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(1) }}",
        // Bad syntax.
        "{{ }}",
        "{% if %}{% endif %}",
        "{% for x in y %}",
        "{{ 1 +* 2 }}",
        "{% unknown %}",
        "{# unterminated",
        "{{ 'a' 'b' c }}",
        "{% set = 1 %}",
    ];
    for t in hostile {
        let r = render(t, "{}");
        assert!(r.is_err(), "{:?} rendered", &t[..t.len().min(80)]);
    }
    let took = start.elapsed();
    assert!(took.as_secs() < 20, "hostile templates took {took:?}");
}

/// SmolLM2's own template: the cost of rendering a conversation, per turn (must be < 1 ms).
#[test]
fn smollm2_template_renders_a_turn_in_under_a_millisecond() {
    let doc: serde_json::Value =
        serde_json::from_slice(&read_fixture("reference/jinja-templates.json")).unwrap();
    let src = doc["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "HuggingFaceTB-SmolLM2-135M-Instruct")
        .unwrap()["template"]
        .as_str()
        .unwrap()
        .to_string();
    let mut msgs = String::from("{\"messages\": [");
    let turns = 20;
    for i in 0..turns {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        msgs += &format!(
            "{}{{\"role\": \"{role}\", \"content\": \"Message number {i}, with a few words of text in it.\"}}",
            if i > 0 { ", " } else { "" }
        );
    }
    msgs += "], \"add_generation_prompt\": true}";
    let vars = Value::from_json(msgs.as_bytes()).unwrap();
    let template = Template::parse(&src).unwrap();
    let runs = 200;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        let text = template.render(&vars, Limits::default(), None).unwrap();
        assert!(text.ends_with("<|im_start|>assistant\n"));
    }
    let per_turn = start.elapsed().as_secs_f64() / (runs * turns) as f64;
    let parse_start = std::time::Instant::now();
    for _ in 0..runs {
        Template::parse(&src).unwrap();
    }
    let parse = parse_start.elapsed().as_secs_f64() / runs as f64;
    std::println!(
        "SmolLM2 template: {:.2} us per turn ({turns} turns), parse {:.1} us",
        per_turn * 1e6,
        parse * 1e6
    );
    assert!(per_turn < 1e-3, "{per_turn} s per turn");
}
