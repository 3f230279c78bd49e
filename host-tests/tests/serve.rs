//! `wasmind serve` end to end: the official `openai` Python package against it (chat streamed
//! and not, `response_format` with a JSON schema, embeddings), `curl`, raw HTTP for errors and
//! limits, and a client that disconnects mid-stream freeing the engine for the next request.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server on a port the system picks (`--port 0`), read from its first line: a port chosen
/// here and then passed on could be taken in between, by the other test's server too.
fn start(extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmind-under-test"))
        .args(["serve", "--model"])
        .arg(fixture(SMOLLM2))
        .arg("--embed-model")
        .arg(fixture("models/potion-base-8M"))
        .args(["--threads", "2", "--ctx", "2048", "--port", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let port = loop {
        let Some(line) = lines.next().map(Result::unwrap) else {
            panic!("the server ended before listening; its output:\n{log}");
        };
        eprintln!("{line}");
        log += &line;
        log.push('\n');
        if let Some(rest) = line.strip_prefix("wasmind serve: http://127.0.0.1:") {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    // The rest of its log, as it comes.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
    Server { child, port }
}

/// A raw HTTP/1.1 request; returns the status and the body.
fn http(port: u16, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    (status, body)
}

#[test]
fn errors_limits_auth_and_disconnect() {
    let server = start(&["--api-key", "sekret"]);
    let port = server.port;
    let auth = "Authorization: Bearer sekret\r\n";
    assert_eq!(http(port, "GET", "/health", "", "").0, 200);
    let (status, body) = http(port, "GET", "/v1/models", "", "");
    assert_eq!(status, 401, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "authentication_error");
    let (status, body) = http(port, "GET", "/v1/models", auth, "");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("SmolLM2") && body.contains("potion-base-8M"),
        "{body}"
    );
    let (status, body) = http(
        port,
        "POST",
        "/v1/chat/completions",
        auth,
        "{\"messages\": 3}",
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(
        port,
        "POST",
        "/v1/chat/completions",
        auth,
        r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"frob"}}}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown type"), "{body}");
    // Fields of the wrong type or range, and features the server lacks: a 400 naming the field
    // (OpenAI's `param`), not a reply that ignores them.
    let user = r#""messages":[{"role":"user","content":"hi"}]"#;
    for (extra, param) in [
        (r#""max_tokens":-5"#, "max_tokens"),
        (r#""max_tokens":0"#, "max_tokens"),
        (r#""max_completion_tokens":2.5"#, "max_completion_tokens"),
        (r#""stream":"yes""#, "stream"),
        (r#""temperature":"hot""#, "temperature"),
        (r#""temperature":-1"#, "temperature"),
        (r#""top_p":1.5"#, "top_p"),
        (r#""seed":0.5"#, "seed"),
        (r#""stop":[1,2]"#, "stop"),
        (r#""n":2"#, "n"),
        (r#""frequency_penalty":0.5"#, "frequency_penalty"),
        (r#""tools":[{"type":"function"}]"#, "tools"),
        (r#""logprobs":true"#, "logprobs"),
        (r#""response_format":"json""#, "response_format"),
    ] {
        let body = format!("{{{user},{extra}}}");
        let (status, reply) = http(port, "POST", "/v1/chat/completions", auth, &body);
        assert_eq!(status, 400, "{extra}: {reply}");
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(v["error"]["param"], param, "{extra}: {reply}");
    }
    // Their neutral values, fields it does not know, and a negative seed are fine.
    let body = format!(
        r#"{{{user},"n":1,"frequency_penalty":0,"tools":[],"tool_choice":"auto","logprobs":false,"seed":-3,"user":"u","max_tokens":2}}"#
    );
    let (status, reply) = http(port, "POST", "/v1/chat/completions", auth, &body);
    assert_eq!(status, 200, "{reply}");
    for (extra, want) in [
        (r#""dimensions":3"#, "have 256"),
        (r#""encoding_format":"int8""#, "encoding_format"),
    ] {
        let body = format!(r#"{{"input":"hi",{extra}}}"#);
        let (status, reply) = http(port, "POST", "/v1/embeddings", auth, &body);
        assert_eq!(status, 400, "{extra}: {reply}");
        assert!(reply.contains(want), "{extra}: {reply}");
    }
    let body = r#"{"input":"hi","dimensions":256}"#;
    assert_eq!(http(port, "POST", "/v1/embeddings", auth, body).0, 200);

    let big = format!("{{\"messages\": \"{}\"}}", "a".repeat(5 << 20));
    let (status, _) = http(port, "POST", "/v1/chat/completions", auth, &big);
    assert_eq!(status, 413);
    assert_eq!(http(port, "GET", "/nope", auth, "").0, 404);

    // A streaming client that reads three events and goes away: its long reply stops, and the
    // next request is served at once (not after 1500 more tokens).
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = r#"{"messages":[{"role":"user","content":"Count from 1 to 1000, one number per line."}],"stream":true,"max_tokens":1500,"temperature":0}"#;
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut events = 0;
    let mut line = String::new();
    while events < 3 {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line.starts_with("data: ") {
            events += 1;
        }
    }
    s.shutdown(std::net::Shutdown::Both).unwrap();
    drop(r);
    drop(s);
    let t0 = Instant::now();
    let (status, body) = http(
        port,
        "POST",
        "/v1/chat/completions",
        auth,
        r#"{"messages":[{"role":"user","content":"Say hi."}],"max_tokens":8}"#,
    );
    let waited = t0.elapsed();
    assert_eq!(status, 200, "{body}");
    println!("after the disconnect, the next reply took {waited:?}");
    assert!(
        waited < Duration::from_secs(20),
        "{waited:?}: the engine kept generating"
    );
}

#[test]
fn curl_and_the_official_openai_client() {
    let server = start(&[]);
    let base = format!("http://127.0.0.1:{}/v1", server.port);
    // curl, not streamed and streamed.
    let out = Command::new("curl")
        .args(["-sS", &format!("{base}/chat/completions"), "-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0}"#)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("Paris"), "{v}");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let out = Command::new("curl")
        .args(["-sSN", &format!("{base}/chat/completions"), "-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0,"stream":true}"#)
        .output()
        .unwrap();
    let sse = String::from_utf8_lossy(&out.stdout);
    assert!(sse.trim_end().ends_with("data: [DONE]"), "{sse}");
    let streamed: String = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(
        streamed, text,
        "streamed and not streamed greedy replies differ"
    );

    // The official Python client, if installed (pip install openai).
    let have_openai = Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_openai {
        skipped(
            "serve: the official openai client",
            "python3 cannot import openai (pip install openai)",
        );
        return;
    }
    let script = r#"
import json, sys
from openai import OpenAI
c = OpenAI(base_url=sys.argv[1], api_key="none")
r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=16, temperature=0)
assert "Paris" in r.choices[0].message.content, r
parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(model="x", messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=16, temperature=0, stream=True) if ch.choices]
assert "".join(parts) == r.choices[0].message.content, (parts, r)
schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}}, "required": ["city", "country"]}
r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Where is the Eiffel Tower?"}], max_tokens=200, temperature=0.8, seed=3,
    response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
obj = json.loads(r.choices[0].message.content)
assert set(obj) == {"city", "country"}, obj
assert r.choices[0].finish_reason == "stop", r
e = c.embeddings.create(model="m2v", input=["a cat", "a dog"])
assert len(e.data) == 2 and len(e.data[0].embedding) == 256, e
print("openai client: ok", obj)
"#;
    let out = Command::new("python3")
        .args(["-c", script, &base])
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
