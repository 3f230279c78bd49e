// The page API (glue/index.js, imported unchanged) in Deno and Bun. Under Node this file is the
// test: it runs itself in each runtime (from the npm packages pinned in package.json), once
// single-threaded and once with 2 threads, and checks what each run reports. In Deno or Bun
// (WASMIND_RUNTIME_CHECK set) it is the script: llama.cpp's greedy replies while it is decisive
// (the 12 reference chats), a follow-up that reads only its own tokens, stop() and an AbortSignal
// ending a reply, Model2Vec vectors against the Python package's (cosine ≥ 0.99999), and which
// build and thread path the glue took: both runtimes report `process.versions.node`, so the glue
// takes its Node path there (the driver and helpers in node:worker_threads, the shared memory
// posted to them), and the relaxed-SIMD build where the engine's probe computes it right.
import assert from 'node:assert/strict';

const CHECK = process.env.WASMIND_RUNTIME_CHECK;
if (CHECK) await check(JSON.parse(CHECK)); else await tests();

/** In Deno or Bun: runs the checks with Wasmind.create(`create`) and prints `RESULT {json}`. */
async function check({ create }) {
  const { Wasmind } = await import('../index.js');
  const { canUseThreads, hasRelaxedSimd } = await import('../wasmind.js');
  const { MODEL_PATH, EMBEDDER_DIR, smollm2, m2v, messagesOf, compareGreedy, cosine, checkStopAndAbort, REPLY_TOKENS } = await import('./reference.mjs');
  const GREEDY = { temperature: 0, repeatPenalty: 1, maxTokens: REPLY_TOKENS };
  const reply = async (ai, messages, options = GREEDY) => {
    let text = '';
    for await (const piece of ai.chat(messages, options)) text += piece;
    return { text, ...ai.stats() };
  };
  const t0 = Date.now(), ms = {};
  const result = { canUseThreads: canUseThreads(), probeRelaxed: hasRelaxedSimd() };
  if (create.threaded !== false) { // what the glue picks by itself
    const ai = await Wasmind.create();
    Object.assign(result, { defaultThreaded: ai.threaded, defaultRelaxed: ai.relaxed });
    await ai.unload();
  }
  const ai = await Wasmind.create(create);
  try {
    Object.assign(result, { threaded: ai.threaded, threads: ai.threads, relaxed: ai.relaxed });
    const info = await ai.load(MODEL_PATH, { context: 1024 });
    assert.equal(info.chat_template, 'chatml');
    ms.load = Date.now() - t0;
    let compared = 0;
    for (const chat of smollm2().greedy) {
      const r = await reply(ai, messagesOf(chat));
      compared += compareGreedy(chat, { ...(await ai.tokens()), state: r.state, text: r.text });
    }
    assert.ok(compared >= 40, `compared ${compared} decisive tokens`);
    result.compared = compared;
    ms.greedy = Date.now() - t0 - ms.load;
    const first = [{ role: 'user', content: 'What is the capital of France?' }];
    const a = await reply(ai, first);
    const b = await reply(ai, [...first, { role: 'assistant', content: a.text }, { role: 'user', content: 'And of Italy?' }]);
    assert.ok(b.promptTokens < 20, `follow-up ran ${b.promptTokens} prompt tokens`);
    assert.match(b.text, /Rome/);

    await checkStopAndAbort(ai);

    const ref = m2v(), rows = ref.rows.slice(0, 60);
    assert.deepEqual(await ai.loadEmbedder(EMBEDDER_DIR), { dim: ref.dim });
    const vectors = await ai.embed(rows.map((r) => r.text));
    rows.forEach((row, i) => assert.ok(cosine(vectors[i], row.embedding) >= 0.99999, `text ${i}: cosine ${cosine(vectors[i], row.embedding)}`));
    result.worstCosine = Math.min(...rows.map((row, i) => cosine(vectors[i], row.embedding)));
    await assert.rejects(ai.embed(42), (e) => e.status === 'INVALID_ARGUMENT');
    ms.total = Date.now() - t0;
  } finally { await ai.unload(); }
  console.log(`RESULT ${JSON.stringify({ ...result, ms })}`);
}

/** Under Node: the tests, one per runtime and thread setting. */
async function tests() {
  const { test } = await import('node:test');
  const { spawn } = await import('node:child_process');
  const { runtime, skipped } = await import('./runtime-bin.mjs');
  const file = new URL(import.meta.url).pathname;
  // Deno: read (dist/, the fixtures) and env (WASMIND_FIXTURES, this check's settings); nothing else.
  const argv = { deno: (f) => ['run', '--no-prompt', '--allow-read', '--allow-env', f], bun: (f) => [f] };
  for (const name of ['deno', 'bun']) {
    const skip = skipped(name, 'runtimes.test.mjs');
    for (const [label, create] of [['single-threaded', { threaded: false }], ['2 threads', { threads: 2 }]]) {
      test(`${name}: glue/index.js unchanged, ${label}: llama.cpp's greedy replies, stop and abort, Model2Vec vectors`, { skip, timeout: 600000 }, async () => {
        const bin = runtime(name);
        const child = spawn(bin.path, argv[name](file), {
          env: { ...process.env, WASMIND_RUNTIME_CHECK: JSON.stringify({ create }) }, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.on('data', (d) => { out += d; });
        child.stderr.on('data', (d) => { out += d; });
        const code = await new Promise((done) => child.on('close', done));
        assert.equal(code, 0, `${name} ${bin.version} exited with ${code}:\n${out.slice(-4000)}`);
        const line = out.split('\n').find((l) => l.startsWith('RESULT '));
        assert.ok(line, `no RESULT line from ${name}:\n${out.slice(-4000)}`);
        const r = JSON.parse(line.slice(7));
        // The path taken: shared memory and workers are there in both runtimes, so the glue
        // runs threaded by default and as asked; the build is the relaxed one exactly where the
        // runtime's engine passes the relaxed-SIMD probe.
        assert.equal(r.canUseThreads, true, `${name}: no SharedArrayBuffer`);
        assert.equal(r.threaded, create.threaded !== false);
        assert.equal(r.threads, create.threaded === false ? 1 : 2);
        assert.equal(r.relaxed, r.probeRelaxed);
        if (create.threaded !== false) assert.deepEqual([r.defaultThreaded, r.defaultRelaxed], [true, r.probeRelaxed]);
        const build = `wasmind${r.relaxed ? '-relaxed' : ''}${r.threaded ? '-mt' : ''}.wasm`;
        console.log(`# ${name} ${bin.version}, ${label}: ${build}, ${r.compared} decisive tokens equal llama.cpp's, ` +
          `worst cosine ${r.worstCosine.toFixed(7)}; load ${r.ms.load} ms, 12 greedy replies ${r.ms.greedy} ms, all ${r.ms.total} ms`);
      });
    }
  }
}
