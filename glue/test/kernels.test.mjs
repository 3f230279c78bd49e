// The tiny models of every tensor type (F32 to Q6_K) and of qwen3, gemma3 and phi3 run in
// each browser engine (Chromium, Firefox ESR, WebKitGTK: engines.mjs), against llama.cpp's logits, with the tolerances of host-tests/tests/model.rs: the
// kernels as Chromium's V8 compiles them. The relaxed build's integer dots are lowered per CPU
// (one `vpdpbusd` with AVX-VNNI, a `pmaddubsw` sequence without, `sdot` on Arm), and which of
// its two ways of summing a kernel takes is chosen at run time from what the dot gives
// (`quant::simd128::dot_i8::narrow_dots`). wasmtime and Node 20 lower it without AVX-VNNI, so
// the wasm unit tests and the host tests never run the way most x86 browsers take; this test
// does, where the CPU has AVX-VNNI. Every build the engine runs (the relaxed one where the
// glue's probe finds relaxed SIMD: Chromium and Firefox, not WebKitGTK, which the test asserts),
// the single-threaded modules (the threaded ones run the same kernels, split by rows: the page
// tests run them); all ids but the last as one batch (`prefill_logits`: the tiles and the
// prepared rows), the last as a decode step (`step`: the one-vector kernels).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fixture } from './reference.mjs';
import { ENGINES, inBrowser, record } from './harness.mjs';

const FLOAT_TOLERANCE = 0.15;
const QUANT_TOLERANCE = 0.75;
const DECISIVE_MARGIN = 0.5;
/** llama.cpp's logits for the tiny models: `{ tokens, models: { file: { top5, last4_logits,
 *  top5_logits or margins } } }`. */
const references = ['tiny-reference.json', 'tiny-arch-reference.json']
  .map((f) => JSON.parse(readFileSync(fixture(`models/tiny/${f}`))));

/** `(agree, decisive, maxDiff)` of `rows` (one logit row per id) against `want`: the argmax at
 *  every position where llama.cpp's top two logits are at least DECISIVE_MARGIN apart, and the
 *  largest difference over the last four rows. */
function compare(rows, want) {
  let agree = 0, decisive = 0, maxDiff = 0;
  rows.forEach((row, p) => {
    const margin = want.margins ? want.margins[p] : want.top5_logits[p][0] - want.top5_logits[p][1];
    if (margin >= DECISIVE_MARGIN) {
      decisive += 1;
      const argmax = row.reduce((best, x, i) => (x > row[best] ? i : best), 0);
      if (argmax === want.top5[p][0]) agree += 1;
    }
  });
  want.last4_logits.forEach((logits, k) => {
    const row = rows[rows.length - 4 + k];
    logits.forEach((x, i) => { maxDiff = Math.max(maxDiff, Math.abs(row[i] - x)); });
  });
  return { agree, decisive, maxDiff };
}

for (const engine of ENGINES) {
  test(`tiny models in ${engine.label} match llama.cpp, every build it runs, batch and decode step`, { skip: engine.skip, timeout: 300000 }, (t) => inBrowser(engine, async ({ page, origin, browser }) => {
    await page.goto(`${origin}/test.html?isolated=0`);
    await page.waitForFunction(() => window.pageReady);
    const relaxedProbe = await page.evaluate(async () => (await import('/glue/wasmind.js')).hasRelaxedSimd());
    assert.equal(relaxedProbe, engine.features.relaxed, `relaxed SIMD probe in ${engine.label}`);
    const failures = [], builds = [];
    for (const relaxed of [true, false]) {
      const build = relaxed ? 'relaxed' : 'SIMD128';
      for (const reference of references) {
        const files = Object.keys(reference.models);
        const got = await page.evaluate(async ({ files, ids, relaxed }) => {
          const { load, hasRelaxedSimd } = await import('/glue/wasmind.js');
          if (relaxed && !hasRelaxedSimd()) return null;
          const wm = await load({ threaded: false, relaxed });
          const out = {};
          try {
            for (const file of files) {
              const bytes = new Uint8Array(await (await fetch(`/models/tiny/${file}`)).arrayBuffer());
              const { vocab } = wm.loadModel(bytes, { context: 64 });
              const n = ids.length - 1;
              const flat = wm.withBlock(n * vocab * 4, (o) => wm.withBytes(new Uint32Array(ids.slice(0, n)), (p) => {
                wm.check(wm.exports.prefill_logits(p, n, o));
                return Array.from(new Float32Array(wm.memory.buffer, o, n * vocab));
              }));
              const rows = Array.from({ length: n }, (_, i) => flat.slice(i * vocab, (i + 1) * vocab));
              const last = wm.exports.step(ids[n]);
              if (last === 0) throw new Error(`${file}: step failed: ${wm.lastError()}`);
              rows.push(Array.from(new Float32Array(wm.memory.buffer, last, vocab)));
              out[file] = rows;
              wm.unloadModel();
            }
          } finally {
            await wm.close();
          }
          return out;
        }, { files, ids: reference.tokens, relaxed });
        if (got === null) {
          t.diagnostic(`${engine.label} has no relaxed SIMD: the relaxed build is not tested`);
          break;
        }
        if (!builds.includes(build)) builds.push(build);
        for (const file of files) {
          const { agree, decisive, maxDiff } = compare(got[file], reference.models[file]);
          const tolerance = /F32|F16|BF16/.test(file) ? FLOAT_TOLERANCE : QUANT_TOLERANCE;
          t.diagnostic(`${build} ${file}: decisive argmax ${agree}/${decisive}, last-4 max |dlogit| ${maxDiff.toFixed(4)}`);
          if (agree !== decisive || !(maxDiff <= tolerance)) failures.push(`${file} (${build})`);
        }
      }
    }
    assert.deepEqual(await page.errors(), []);
    assert.deepEqual(failures, [], 'differ from llama.cpp');
    record(engine, browser, 'not isolated', { kernels: builds.join(' + ') });
  }));
}
