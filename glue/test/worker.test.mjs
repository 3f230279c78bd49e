// The Cloudflare Worker example (glue/examples/worker/) in workerd from npm, over loopback: the
// test starts workerd on free ports with the fixtures' models behind the MODELS binding, POSTs
// /embed (Model2Vec vectors against the Python package's, cosine ≥ 0.99999) and /chat (llama.cpp's
// greedy replies while it is decisive, the 12 reference chats), checks that bad requests get a
// 400 naming the fault, measures each isolate's memory against the 128 MB a Worker isolate may
// use (its wasm memory from /stats, its JS heap from workerd's inspector), and stops workerd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runtime, skipped } from './runtime-bin.mjs';
import { fixture, smollm2, m2v, messagesOf, compareGreedy, cosine, REPLY_TOKENS } from './reference.mjs';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BUDGET = 128e6; // bytes a Worker isolate may use, JS heap and wasm memory together
const skip = skipped('workerd', 'worker.test.mjs');

/** Starts workerd on the example's config; resolves with { url, inspector, pid, stop() }. */
async function startWorkerd(bin) {
  const child = spawn(bin.path, ['serve', 'glue/examples/worker/config.capnp', '--socket-addr', 'http=127.0.0.1:0',
    '--inspector-addr', '127.0.0.1:0', '--directory-path', `models=${fileURLToPath(fixture('models/'))}`, '--control-fd', '3'],
  { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((done) => child.on('exit', done));
  const ports = {};
  await new Promise((ready, fail) => {
    let buf = '';
    const timer = setTimeout(() => fail(new Error(`workerd did not listen within 30 s:\n${log}`)), 30000);
    child.stdio[3].on('data', (d) => {
      buf += d;
      for (const line of buf.split('\n').slice(0, -1)) {
        const e = JSON.parse(line);
        if (e.event === 'listen-inspector') ports.inspector = e.port;
        if (e.event === 'listen' && e.socket === 'http') ports.http = e.port;
      }
      buf = buf.slice(buf.lastIndexOf('\n') + 1);
      if (ports.http && ports.inspector) { clearTimeout(timer); ready(); }
    });
    exited.then((code) => { clearTimeout(timer); fail(new Error(`workerd exited (${code}):\n${log}`)); });
  });
  return { url: `http://127.0.0.1:${ports.http}`, inspector: ports.inspector, pid: child.pid, log: () => log,
    stop: async () => {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited; clearTimeout(t);
    } };
}

/** Runtime.getHeapUsage of each isolate (workerd's inspector names them by service), read by a
 *  Node child with a WebSocket client (Node 20 has one behind --experimental-websocket). */
function heaps(port, ids) {
  const script = `const out = {};
for (const id of ${JSON.stringify(ids)}) {
  const ws = new WebSocket('ws://127.0.0.1:${port}/' + id);
  await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = () => fail(new Error('no inspector for ' + id)); });
  out[id] = await new Promise((ok) => { ws.onmessage = (e) => ok(JSON.parse(e.data).result); ws.send(JSON.stringify({ id: 1, method: 'Runtime.getHeapUsage' })); });
  ws.close();
}
console.log(JSON.stringify(out)); process.exit(0);`;
  const flags = typeof WebSocket === 'function' ? [] : ['--experimental-websocket', '--no-warnings'];
  return JSON.parse(execFileSync(process.execPath, [...flags, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30000 }));
}

const post = async (url, body) => {
  const r = await fetch(url, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
};
const MiB = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;

test('workerd: the Worker example embeds (Model2Vec) and chats (llama.cpp\'s greedy replies), each isolate within 128 MB', { skip, timeout: 300000 }, async () => {
  const bin = runtime('workerd');
  const t0 = Date.now();
  const w = await startWorkerd(bin);
  try {
    const idle = heaps(w.inspector, ['wasmind', 'wasmind-chat']);
    const ref = m2v(), rows = ref.rows.slice(0, 60);
    let r = await post(`${w.url}/embed`, { input: rows.map((row) => row.text) });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.data.length, rows.length);
    rows.forEach((row, i) => {
      assert.equal(r.json.data[i].embedding.length, ref.dim);
      assert.ok(cosine(r.json.data[i].embedding, row.embedding) >= 0.99999, `text ${i}`);
    });
    const worst = Math.min(...rows.map((row, i) => cosine(r.json.data[i].embedding, row.embedding)));
    r = await post(`${w.url}/embed`, { input: rows[1].text });
    assert.ok(r.json.data.length === 1 && cosine(r.json.data[0].embedding, rows[1].embedding) >= 0.99999);
    const embedMs = Date.now() - t0;

    let compared = 0;
    for (const chat of smollm2().greedy) {
      r = await post(`${w.url}/chat`, { messages: messagesOf(chat), temperature: 0, repeat_penalty: 1, max_tokens: REPLY_TOKENS, tokens: true });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const { ids, last, state } = r.json.wasmind;
      compared += compareGreedy(chat, { ids, last, state, text: r.json.choices[0].message.content });
    }
    assert.ok(compared >= 40, `compared ${compared} decisive tokens`);
    const chatMs = Date.now() - t0 - embedMs;

    // Bad requests: a 400 that names the fault, and the Worker serves on.
    for (const [path, body, message] of [['/embed', { input: 42 }, /"input" must be/], ['/embed', '{"input": [', /not JSON/],
      ['/chat', { messages: [{ role: 'wizard', content: 'hi' }] }, /role "wizard"/], ['/chat', { messages: 'hi' }, /"messages" must be/]]) {
      r = await post(`${w.url}${path}`, body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.json)}`);
      assert.match(r.json.error.message, message);
    }
    r = await post(`${w.url}/chat`, { messages: [{ role: 'user', content: 'What is the capital of France?' }], temperature: 0, max_tokens: 12 });
    assert.match(r.json.choices[0].message.content, /Paris/);

    // Memory: wasm memory (exact, from the module) + the isolate's JS heap (allocated) and
    // ArrayBuffer backing stores, against the budget.
    const stats = await (await fetch(`${w.url}/stats`)).json();
    const heap = heaps(w.inspector, ['wasmind', 'wasmind-chat']);
    const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${w.pid}/status`, 'utf8'))[1]) * 1024;
    const isolates = { embed: [stats.wasm_bytes, heap.wasmind], chat: [stats.chat.wasm_bytes, heap['wasmind-chat']] };
    for (const [name, [wasm, h]] of Object.entries(isolates)) {
      const total = wasm + h.totalSize + h.backingStorageSize;
      console.log(`# workerd ${bin.version}, ${name} isolate: wasm memory ${MiB(wasm)} + JS heap ${MiB(h.totalSize)} ` +
        `(${MiB(h.usedSize)} used) + ArrayBuffers ${MiB(h.backingStorageSize)} = ${(total / 1e6).toFixed(1)} MB of ${BUDGET / 1e6} MB`);
      assert.ok(total <= BUDGET, `the ${name} isolate holds ${total} bytes, over the ${BUDGET} of a Worker`);
    }
    console.log(`# workerd: ${compared} decisive tokens equal llama.cpp's, worst cosine ${worst.toFixed(7)}; ` +
      `start + embed ${embedMs} ms, 12 chats ${chatMs} ms; process peak RSS ${MiB(hwm)} (idle isolates' heaps ` +
      `${MiB(idle.wasmind.totalSize)} and ${MiB(idle['wasmind-chat'].totalSize)})`);
  } finally {
    await w.stop();
  }
});
