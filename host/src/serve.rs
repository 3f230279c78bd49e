//! `wasmind serve`: an OpenAI-compatible HTTP server over the module in wasmtime.
//!
//! ```text
//! HTTP thread per request ──(Job over a channel: the queue)──> engine thread (one Wasmind: the
//!   parse, auth, limits          <──(events: pieces, end)───   chat model and the embedder)
//!   JSON or server-sent events
//! ```
//! Routes: `POST /v1/chat/completions` (messages, stream, temperature, top_p, max_tokens, seed,
//! stop, response_format), `POST /v1/embeddings`, `GET /v1/models`, `GET /health`. Requests
//! queue on the one engine. A streaming client that goes away closes its event channel; the
//! engine notices at the next piece and stops that reply (the module's stop flag), so the next
//! request starts at once. Errors use OpenAI's shape `{"error": {"message", "type", ...}}`.
//! Request fields are checked before a request queues (`check_chat`, `check_embeddings`): a
//! wrong type or range, or a feature this server lacks (`n` > 1, tools, penalties, log
//! probabilities, other `dimensions`), is a 400 naming the field, never silently ignored.

use std::io::{Read, Write};
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::{
    GRAMMAR_JSON_OBJECT, GRAMMAR_JSON_SCHEMA, GRAMMAR_NONE, Piece, ROLE_ASSISTANT, ROLE_SYSTEM,
    ROLE_USER, Sampling, Wasmind,
};

/// Largest request body accepted.
pub const MAX_BODY: usize = 4 << 20;

pub struct Options {
    pub model: Option<std::path::PathBuf>,
    pub embed_model: Option<std::path::PathBuf>,
    pub threads: u32,
    pub context: u32,
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
}

/// What the engine thread does for one request.
enum Job {
    Chat(Value, mpsc::Sender<Event>),
    /// The texts, the `dimensions` asked for (if any) and where the vectors go.
    Embed(
        Vec<String>,
        Option<u64>,
        mpsc::Sender<std::result::Result<Vec<Vec<f32>>, String>>,
    ),
}

enum Event {
    Piece(String),
    /// finish_reason, prompt tokens, completion tokens.
    Done(&'static str, u64, u64),
    Error(u16, String),
}

struct HttpError(u16, String);

fn error_body(status: u16, message: &str) -> Value {
    let ty = match status {
        401 => "authentication_error",
        404 => "not_found_error",
        413 | 400 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": ty, "param": null, "code": null}})
}

// ---------------------------------------------------------------------------------------------
// Request parameters

/// A request field that is wrong: its name (OpenAI's `param`) and why.
struct BadParam(&'static str, String);

fn bad_param_body(e: &BadParam) -> Value {
    let mut body = error_body(400, &e.1);
    body["error"]["param"] = json!(e.0);
    body
}

/// The fields of a request body, read with their types checked. Absent and `null` are the same:
/// the field's default.
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }
    fn expect(&self, k: &'static str, ok: bool, what: &str) -> Result<(), BadParam> {
        if self.get(k).is_none() || ok {
            return Ok(());
        }
        let got = self.get(k).map_or(String::new(), |v| v.to_string());
        Err(BadParam(
            k,
            format!("'{k}' must be {what} (got {})", shorten(&got)),
        ))
    }
    fn string(&self, k: &'static str) -> Result<(), BadParam> {
        self.expect(k, self.get(k).is_some_and(Value::is_string), "a string")
    }
    fn boolean(&self, k: &'static str) -> Result<(), BadParam> {
        self.expect(
            k,
            self.get(k).is_some_and(Value::is_boolean),
            "true or false",
        )
    }
    /// A number in `lo..=hi` (OpenAI's ranges).
    fn number(&self, k: &'static str, lo: f64, hi: f64) -> Result<(), BadParam> {
        let ok = self
            .get(k)
            .and_then(Value::as_f64)
            .is_some_and(|v| (lo..=hi).contains(&v));
        self.expect(k, ok, &format!("a number from {lo} to {hi}"))
    }
    fn integer(&self, k: &'static str) -> Result<(), BadParam> {
        let ok = self.get(k).is_some_and(|v| v.is_i64() || v.is_u64());
        self.expect(k, ok, "an integer")
    }
    fn positive(&self, k: &'static str) -> Result<(), BadParam> {
        let ok = self.get(k).and_then(Value::as_u64).is_some_and(|n| n >= 1);
        self.expect(k, ok, "a positive integer")
    }
    /// A field this server does not implement: only its neutral value (or none) is accepted.
    fn neutral(&self, k: &'static str, neutral: bool, what: &str) -> Result<(), BadParam> {
        match self.get(k) {
            Some(v) if !neutral => Err(BadParam(
                k,
                format!(
                    "'{k}' is not supported here: {what} (got {})",
                    shorten(&v.to_string())
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// At most 60 characters of a value, for an error message.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Checks a chat request before it queues: every field the server reads has its type and
/// OpenAI's range (temperature 0 to 2, top_p 0 to 1), and a field it does not implement is
/// refused unless it holds its neutral value, so that nothing a client asks for is silently
/// ignored. Fields it does not know pass (clients add their own: `user`, `metadata`, ...).
fn check_chat(body: &Value) -> Result<(), BadParam> {
    let f = Fields(body);
    let messages = f.get("messages").and_then(Value::as_array);
    if messages.is_none_or(Vec::is_empty) {
        let m = "'messages' must be a non-empty array of messages".to_string();
        return Err(BadParam("messages", m));
    }
    f.string("model")?;
    f.boolean("stream")?;
    f.expect(
        "stream_options",
        f.get("stream_options").is_some_and(Value::is_object),
        "an object",
    )?;
    Fields(&body["stream_options"]).boolean("include_usage")?;
    f.number("temperature", 0.0, 2.0)?;
    f.number("top_p", 0.0, 1.0)?;
    f.integer("seed")?;
    f.positive("max_tokens")?;
    f.positive("max_completion_tokens")?;
    let stop_ok = match f.get("stop") {
        Some(Value::Array(a)) => a.iter().all(Value::is_string),
        v => v.is_none_or(Value::is_string),
    };
    f.expect("stop", stop_ok, "a string or an array of strings")?;
    f.expect(
        "response_format",
        f.get("response_format").is_some_and(Value::is_object),
        "an object",
    )?;
    f.neutral(
        "n",
        f.get("n").and_then(Value::as_u64) == Some(1),
        "one choice per request",
    )?;
    let zero = |k: &str| f.get(k).and_then(Value::as_f64) == Some(0.0);
    f.neutral(
        "presence_penalty",
        zero("presence_penalty"),
        "leave it out or send 0",
    )?;
    f.neutral(
        "frequency_penalty",
        zero("frequency_penalty"),
        "leave it out or send 0",
    )?;
    let empty = |k: &str| match f.get(k) {
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    f.neutral("logit_bias", empty("logit_bias"), "leave it out")?;
    f.neutral("tools", empty("tools"), "no tool calls")?;
    f.neutral("functions", empty("functions"), "no function calls")?;
    let none = matches!(
        f.get("tool_choice").and_then(Value::as_str),
        Some("none" | "auto")
    );
    f.neutral("tool_choice", none, "no tool calls")?;
    let no = |k: &str| f.get(k) == Some(&Value::Bool(false));
    f.neutral("logprobs", no("logprobs"), "no log probabilities")?;
    f.neutral("top_logprobs", zero("top_logprobs"), "no log probabilities")?;
    Ok(())
}

/// Checks an embeddings request before it queues (as [`check_chat`]); `dimensions` is checked
/// against the model's on the engine.
fn check_embeddings(body: &Value) -> Result<(), BadParam> {
    let f = Fields(body);
    f.string("model")?;
    let format = f.get("encoding_format").and_then(Value::as_str);
    f.expect(
        "encoding_format",
        matches!(format, Some("float" | "base64")),
        "\"float\" or \"base64\"",
    )?;
    f.positive("dimensions")
}

/// Runs the server until the process ends.
pub fn run(opts: Options) -> std::result::Result<(), String> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let model = opts.model.clone();
    let embed = opts.embed_model.clone();
    let (threads, context) = (opts.threads, opts.context);
    std::thread::spawn(move || engine(model, embed, threads, context, queue, ready_tx));
    let names: (Option<String>, Option<String>) = ready_rx
        .recv()
        .map_err(|_| "the engine thread ended".to_string())??;
    let addr = format!("{}:{}", opts.host, opts.port);
    let server = tiny_http::Server::http(&addr).map_err(|e| format!("{addr}: {e}"))?;
    // The address bound (`--port 0`: a free port the system picked).
    let addr = server.server_addr().to_ip().map_or(addr, |a| a.to_string());
    eprintln!(
        "wasmind serve: http://{addr}/v1 (chat: {}, embeddings: {})",
        names.0.as_deref().unwrap_or("none"),
        names.1.as_deref().unwrap_or("none")
    );
    let api_key = opts.api_key.clone();
    for request in server.incoming_requests() {
        let jobs = jobs.clone();
        let names = names.clone();
        let key = api_key.clone();
        std::thread::spawn(move || handle(request, &jobs, &names, key.as_deref()));
    }
    Ok(())
}

fn respond_json(request: tiny_http::Request, status: u16, body: &Value) {
    let header = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
    let _ = request.respond(
        tiny_http::Response::from_string(body.to_string())
            .with_status_code(status)
            .with_header(header),
    );
}

fn handle(
    mut request: tiny_http::Request,
    jobs: &mpsc::Sender<Job>,
    names: &(Option<String>, Option<String>),
    api_key: Option<&str>,
) {
    let route = (
        request.method().as_str().to_string(),
        request.url().to_string(),
    );
    let route = (route.0.as_str(), route.1.split('?').next().unwrap_or(""));
    if let Some(key) = api_key {
        let ok = request
            .headers()
            .iter()
            .any(|h| h.field.equiv("Authorization") && h.value.as_str() == format!("Bearer {key}"));
        if !ok && route.1 != "/health" {
            let body = error_body(401, "missing or wrong API key (Authorization: Bearer ...)");
            return respond_json(request, 401, &body);
        }
    }
    let body = match read_body(&mut request) {
        Ok(b) => b,
        Err(HttpError(s, m)) => return respond_json(request, s, &error_body(s, &m)),
    };
    match route {
        ("GET", "/health") => respond_json(request, 200, &json!({"status": "ok"})),
        ("GET", "/v1/models") => {
            let data: Vec<Value> = [&names.0, &names.1]
                .into_iter()
                .flatten()
                .map(|n| json!({"id": n, "object": "model", "created": 0, "owned_by": "wasmind"}))
                .collect();
            respond_json(request, 200, &json!({"object": "list", "data": data}))
        }
        ("POST", "/v1/chat/completions") => chat(request, body, jobs, names.0.as_deref()),
        ("POST", "/v1/embeddings") => embeddings(request, body, jobs, names.1.as_deref()),
        _ => {
            let m = format!("no route {} {}", route.0, route.1);
            respond_json(request, 404, &error_body(404, &m))
        }
    }
}

fn read_body(request: &mut tiny_http::Request) -> std::result::Result<Value, HttpError> {
    let too_large = || HttpError(413, format!("the body is larger than {MAX_BODY} bytes"));
    if request.body_length().is_some_and(|n| n > MAX_BODY) {
        drain(request);
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    request
        .as_reader()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| HttpError(400, e.to_string()))?;
    if bytes.len() > MAX_BODY {
        drain(request);
        return Err(too_large());
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|e| HttpError(400, format!("the body is not JSON: {e}")))
}

/// Reads and drops what is left of a refused body (up to `DRAIN_LIMIT`), so that the answer
/// reaches the client: closing a socket with unread data resets the connection, and the client
/// may then see the reset instead of the 413.
fn drain(request: &mut tiny_http::Request) {
    const DRAIN_LIMIT: u64 = 64 << 20;
    let _ = std::io::copy(
        &mut request.as_reader().take(DRAIN_LIMIT),
        &mut std::io::sink(),
    );
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn chat(request: tiny_http::Request, body: Value, jobs: &mpsc::Sender<Job>, model: Option<&str>) {
    let Some(model) = model else {
        return respond_json(
            request,
            400,
            &error_body(400, "no chat model is loaded (--model)"),
        );
    };
    if let Err(e) = check_chat(&body) {
        return respond_json(request, 400, &bad_param_body(&e));
    }
    let stream = body["stream"].as_bool().unwrap_or(false);
    let include_usage = body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let (tx, rx) = mpsc::channel();
    if jobs.send(Job::Chat(body, tx)).is_err() {
        return respond_json(request, 500, &error_body(500, "the engine has stopped"));
    }
    let id = format!("chatcmpl-{}", now_s());
    let created = now_s();
    if !stream {
        let mut text = String::new();
        for ev in rx {
            match ev {
                Event::Piece(p) => text.push_str(&p),
                Event::Error(s, m) => return respond_json(request, s, &error_body(s, &m)),
                Event::Done(reason, prompt, completion) => {
                    let body = json!({
                        "id": id, "object": "chat.completion", "created": created, "model": model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": reason, "logprobs": null}],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                  "total_tokens": prompt + completion}});
                    return respond_json(request, 200, &body);
                }
            }
        }
        return respond_json(
            request,
            500,
            &error_body(500, "the engine dropped the request"),
        );
    }
    // Server-sent events, written by hand in chunked encoding so each event goes out at once.
    // The first event waits for the engine: an error before any piece is a plain error reply.
    let first = match rx.recv() {
        Ok(Event::Error(s, m)) => return respond_json(request, s, &error_body(s, &m)),
        Ok(ev) => ev,
        Err(_) => {
            return respond_json(
                request,
                500,
                &error_body(500, "the engine dropped the request"),
            );
        }
    };
    let mut w = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let chunk = |w: &mut Box<dyn Write + Send>, data: &str| -> std::io::Result<()> {
        let event = format!("data: {data}\n\n");
        write!(w, "{:x}\r\n{event}\r\n", event.len())?;
        w.flush()
    };
    let frame = |delta: Value, reason: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": null}]})
        .to_string()
    };
    let send = || -> std::io::Result<()> {
        w.write_all(head.as_bytes())?;
        chunk(
            &mut w,
            &frame(json!({"role": "assistant", "content": ""}), None),
        )?;
        let mut next = Some(first);
        loop {
            let ev = match next.take() {
                Some(ev) => ev,
                None => match rx.recv() {
                    Ok(ev) => ev,
                    Err(_) => break,
                },
            };
            match ev {
                Event::Piece(p) => chunk(&mut w, &frame(json!({"content": p}), None))?,
                Event::Error(_, m) => {
                    chunk(
                        &mut w,
                        &json!({"error": {"message": m, "type": "server_error"}}).to_string(),
                    )?;
                    break;
                }
                Event::Done(reason, prompt, completion) => {
                    chunk(&mut w, &frame(json!({}), Some(reason)))?;
                    if include_usage {
                        let usage = json!({"id": id, "object": "chat.completion.chunk",
                            "created": created, "model": model, "choices": [],
                            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                      "total_tokens": prompt + completion}});
                        chunk(&mut w, &usage.to_string())?;
                    }
                    break;
                }
            }
        }
        chunk(&mut w, "[DONE]")?;
        w.write_all(b"0\r\n\r\n")?;
        w.flush()
    };
    // A failed write is a client that went away: dropping `rx` tells the engine to stop.
    let _ = send();
}

fn embeddings(
    request: tiny_http::Request,
    body: Value,
    jobs: &mpsc::Sender<Job>,
    model: Option<&str>,
) {
    let Some(model) = model else {
        let m = "no embedding model is loaded (--embed-model)";
        return respond_json(request, 400, &error_body(400, m));
    };
    if let Err(e) = check_embeddings(&body) {
        return respond_json(request, 400, &bad_param_body(&e));
    }
    let texts: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) if a.iter().all(Value::is_string) => a
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => {
            let m = "'input' must be a string or an array of strings";
            return respond_json(request, 400, &error_body(400, m));
        }
    };
    let base64 = body["encoding_format"] == "base64";
    let (tx, rx) = mpsc::channel();
    let words: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    let dimensions = body["dimensions"].as_u64();
    if jobs.send(Job::Embed(texts, dimensions, tx)).is_err() {
        return respond_json(request, 500, &error_body(500, "the engine has stopped"));
    }
    match rx.recv() {
        Ok(Ok(vectors)) => {
            let data: Vec<Value> = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let embedding = if base64 {
                        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                        json!(base64_encode(&bytes))
                    } else {
                        json!(v)
                    };
                    json!({"object": "embedding", "index": i, "embedding": embedding})
                })
                .collect();
            let body = json!({"object": "list", "data": data, "model": model,
                              "usage": {"prompt_tokens": words, "total_tokens": words}});
            respond_json(request, 200, &body)
        }
        Ok(Err(m)) => respond_json(request, 400, &error_body(400, &m)),
        Err(_) => respond_json(
            request,
            500,
            &error_body(500, "the engine dropped the request"),
        ),
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

type Names = (Option<String>, Option<String>);

/// The engine thread: loads the models, then runs jobs one at a time (the queue).
fn engine(
    model: Option<std::path::PathBuf>,
    embed: Option<std::path::PathBuf>,
    threads: u32,
    context: u32,
    queue: mpsc::Receiver<Job>,
    ready: mpsc::Sender<std::result::Result<Names, String>>,
) {
    let setup = || -> std::result::Result<(Wasmind, Names, usize), String> {
        let mut w = Wasmind::with_threads(threads).map_err(|e| e.to_string())?;
        let mut names = (None, None);
        let mut dim = 0;
        if let Some(m) = &model {
            w.load_model_file(m, context)
                .map_err(|e| format!("{}: {e}", m.display()))?;
            names.0 = m.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        if let Some(e) = &embed {
            dim = w
                .load_embedder_path(e)
                .map_err(|x| format!("{}: {x}", e.display()))?;
            names.1 = e.file_name().map(|s| s.to_string_lossy().into_owned());
        }
        Ok((w, names, dim))
    };
    let (mut w, dim) = match setup() {
        Ok((w, names, dim)) => {
            let _ = ready.send(Ok(names));
            (w, dim)
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    for job in queue {
        match job {
            Job::Embed(_, Some(d), tx) if d != dim as u64 => {
                let m = format!("'dimensions': this model's vectors have {dim} (asked for {d})");
                let _ = tx.send(Err(m));
            }
            Job::Embed(texts, _, tx) => {
                let refs: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
                let r = w.embed_batch(&refs, dim).map_err(|e| e.to_string());
                let _ = tx.send(r);
            }
            Job::Chat(body, tx) => {
                if let Err(e) = run_chat(&mut w, &body, &tx) {
                    let _ = tx.send(Event::Error(e.0, e.1));
                }
            }
        }
    }
}

/// One chat completion on the engine; pieces and the end go to `tx`.
fn run_chat(
    w: &mut Wasmind,
    body: &Value,
    tx: &mpsc::Sender<Event>,
) -> std::result::Result<(), HttpError> {
    let bad = |m: String| HttpError(400, m);
    let internal = |e: wasmtime::Error| HttpError(500, e.to_string());
    w.chat_reset().map_err(internal)?;
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = match m["role"].as_str() {
            Some("system" | "developer") => ROLE_SYSTEM,
            Some("user") => ROLE_USER,
            Some("assistant") => ROLE_ASSISTANT,
            r => return Err(bad(format!("unsupported message role {r:?}"))),
        };
        let content = match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            Value::Null => String::new(),
            _ => return Err(bad("message content must be a string or text parts".into())),
        };
        w.chat_add(role, &content).map_err(|e| bad(e.to_string()))?;
    }
    let d = Sampling::default();
    let f = |k: &str, default: f32| body[k].as_f64().map_or(default, |v| v as f32);
    let sampling = Sampling {
        temperature: f("temperature", d.temperature),
        top_p: f("top_p", d.top_p),
        // Any integer (check_chat): a negative one by its two's-complement bits.
        seed: body["seed"]
            .as_u64()
            .or(body["seed"].as_i64().map(|v| v as u64))
            .unwrap_or(d.seed),
        ..d
    };
    w.sampler_set(&sampling).map_err(|e| bad(e.to_string()))?;
    let (kind, text) = match body["response_format"]["type"].as_str() {
        None | Some("text") => (GRAMMAR_NONE, String::new()),
        Some("json_object") => (GRAMMAR_JSON_OBJECT, String::new()),
        Some("json_schema") => {
            let schema = &body["response_format"]["json_schema"]["schema"];
            if !schema.is_object() {
                return Err(bad(
                    "response_format.json_schema.schema must be an object".into()
                ));
            }
            (GRAMMAR_JSON_SCHEMA, schema.to_string())
        }
        Some(t) => return Err(bad(format!("unsupported response_format type '{t}'"))),
    };
    if let Err(e) = w.chat_set_grammar(kind, &text).map_err(internal)? {
        return Err(bad(format!("response_format: {}", e.message)));
    }
    let stops: Vec<String> = match &body["stop"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let max_tokens = body["max_completion_tokens"]
        .as_u64()
        .or(body["max_tokens"].as_u64())
        .map_or(0, |n| n.min(u32::MAX as u64) as u32); // 0: up to the context
    if let Err(e) = w.chat_start(max_tokens).map_err(internal)? {
        return Err(bad(e.message));
    }
    // Text not yet sent: it may be the start of a stop string.
    let hold = stops
        .iter()
        .map(|s| s.len())
        .max()
        .unwrap_or(1)
        .saturating_sub(1);
    let mut pending = String::new();
    let mut stopped_by_string = false;
    let mut gone = false;
    while let Piece::Text(t) = w.chat_next().map_err(internal)? {
        if gone || stopped_by_string {
            continue;
        }
        pending.push_str(&String::from_utf8_lossy(&t));
        if let Some(at) = stops.iter().filter_map(|s| pending.find(s.as_str())).min() {
            pending.truncate(at);
            stopped_by_string = true;
            w.request_stop().map_err(internal)?;
        }
        let mut cut = if stopped_by_string {
            pending.len()
        } else {
            pending.len().saturating_sub(hold)
        };
        while !pending.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut > 0 {
            let out: String = pending.drain(..cut).collect();
            if tx.send(Event::Piece(out)).is_err() {
                // The client went away: stop this reply.
                gone = true;
                w.request_stop().map_err(internal)?;
            }
        }
    }
    if !pending.is_empty() && !gone {
        let _ = tx.send(Event::Piece(pending));
    }
    let stats = w.chat_stats().map_err(internal)?;
    let reason = match stats["state"].as_str() {
        _ if stopped_by_string => "stop",
        Some("eog") => "stop",
        Some("limit" | "context_full") => "length",
        _ => "stop",
    };
    let n = |k: &str| stats[k].as_u64().unwrap_or(0);
    let _ = tx.send(Event::Done(reason, n("prompt_tokens"), n("tokens")));
    Ok(())
}
