// The module contract as an outside script sees it: imports, exports and the memory each module
// declares, read with the JS API's type reflection (a child Node with
// --experimental-wasm-type-reflection), not with wasmind.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { importedMemoryMinimum, load } from '../wasmind.js';
import { GZIP_BUDGET, MODULES, moduleSizes } from '../bench/sizes.mjs';

const dist = new URL('../../dist/', import.meta.url);
const header = readFileSync(new URL('../../abi/wasmind.h', import.meta.url), 'utf8');
const declared = [...header.matchAll(/^WASMIND_API\s+\w+\s+(\w+)\(/gm)].map((m) => m[1]).sort();

// Node 20 compiles relaxed SIMD only behind a flag (harmless for the other modules).
const RELAXED_FLAGS = ['--experimental-wasm-relaxed-simd', '--no-liftoff'];

function reflect(file) {
  const script = `const m = new WebAssembly.Module(require('fs').readFileSync(${JSON.stringify(new URL(file, dist).pathname)}));
    console.log(JSON.stringify({ imports: WebAssembly.Module.imports(m), exports: WebAssembly.Module.exports(m) }));`;
  const out = execFileSync(process.execPath, ['--experimental-wasm-type-reflection', ...RELAXED_FLAGS, '-e', script]);
  return JSON.parse(out);
}

const functions = (exports) => exports.filter((e) => e.kind === 'function').map((e) => e.name).sort();

test('wasmind.h lists the functions (sanity of the header parse)', () => {
  assert.ok(declared.length >= 15, `only ${declared.length} WASMIND_API lines`);
  assert.ok(declared.includes('pool_selftest') && declared.includes('math_apply'));
});

for (const file of ['wasmind.wasm', 'wasmind-relaxed.wasm']) test(`${file}: no imports, exports its memory, the header functions and __stack_pointer`, () => {
  const { imports, exports } = reflect(file);
  assert.deepEqual(imports, []);
  assert.ok(exports.some((e) => e.name === 'memory' && e.kind === 'memory'), 'exports memory');
  assert.deepEqual(functions(exports), declared);
  const sp = exports.find((e) => e.name === '__stack_pointer');
  assert.deepEqual(sp?.type, { mutable: true, value: 'i32' });
});

for (const file of ['wasmind-mt.wasm', 'wasmind-relaxed-mt.wasm']) test(`${file}: imports only env.memory (shared, with a maximum), same functions`, () => {
  const { imports, exports } = reflect(file);
  assert.equal(imports.length, 1);
  const [mem] = imports;
  assert.equal(`${mem.module}.${mem.name}:${mem.kind}`, 'env.memory:memory');
  assert.equal(mem.type.shared, true);
  assert.equal(mem.type.maximum, 65536, 'maximum is 65,536 pages (ABI.md)');
  assert.ok(mem.type.minimum >= 1 && mem.type.minimum <= mem.type.maximum);
  assert.ok(!exports.some((e) => e.kind === 'memory'), 'does not export a memory of its own');
  assert.deepEqual(functions(exports), declared);
  const sp = exports.find((e) => e.name === '__stack_pointer');
  assert.deepEqual(sp?.type, { mutable: true, value: 'i32' }, 'a host must be able to set each helper stack');
  // The glue's own import-section reader agrees with the engine's reflection.
  assert.equal(importedMemoryMinimum(readFileSync(new URL(file, dist))), mem.type.minimum);
});

// What a page downloads, as `cargo xtask bench` reports it (glue/bench/sizes.mjs): each module
// gzipped (Node's zlib, level 9) within the budget, and the parts of the size table covering
// each module's every byte.
test(`each module gzipped is at most ${GZIP_BUDGET} bytes, and its parts cover it`, () => {
  const mods = moduleSizes(fileURLToPath(dist));
  assert.deepEqual(mods.map((m) => m.file), MODULES, 'every module is in dist/ (cargo xtask dist)');
  const sizes = mods.map((m) => `${m.file} ${m.gzip} bytes gzipped (${m.raw} raw)`).join(', ');
  const over = mods.filter((m) => m.gzip > GZIP_BUDGET).map((m) => m.file);
  assert.deepEqual(over, [], `over the ${GZIP_BUDGET}-byte gzip budget: ${sizes}`);
  for (const m of mods) {
    assert.ok(m.parts, `${m.file}: no symbols file beside it`);
    const raw = Object.values(m.parts).reduce((sum, p) => sum + p.raw, 0);
    assert.equal(raw, m.raw, `${m.file}: the parts hold ${raw} of its ${m.raw} bytes`);
  }
  console.log(`# ${sizes}`);
});

test('hasRelaxedSimd runs its probe instead of trusting validation', () => {
  const probe = (flags) => JSON.parse(execFileSync(process.execPath, [...flags, '--input-type=module', '-e',
    `import { hasRelaxedSimd } from ${JSON.stringify(new URL('../wasmind.js', import.meta.url).href)};
     console.log(JSON.stringify(hasRelaxedSimd()));`]));
  assert.equal(probe(RELAXED_FLAGS), true, 'an engine that runs relaxed SIMD right');
  // Node 20's baseline compiler validates the instruction but drops its accumulator (later
  // versions compute it right): the probe must say no there.
  if (process.versions.node.split('.')[0] === '20') {
    assert.equal(probe(['--experimental-wasm-relaxed-simd', '--liftoff', '--no-wasm-tier-up']), false);
    assert.equal(probe([]), false, 'no relaxed SIMD without the flag');
  }
});

test('a missing dist/ is an error that says how to build it', async () => {
  for (const threaded of [false, true]) {
    await assert.rejects(load({ threaded, threads: 2, dist: new URL('file:///nonexistent-wasmind-dist/') }),
      /cannot read the module .*wasmind(-mt)?\.wasm .*cargo xtask dist/);
  }
});

test('a model larger than the memory is OUT_OF_MEMORY with the sizes, before any byte is copied', async () => {
  const wm = await load({ threaded: false });
  try {
    assert.throws(() => wm.beginLoad(5e9), (e) => e.status === 'OUT_OF_MEMORY' && /5000000000 bytes/.test(e.message));
  } finally { await wm.close(); }
});
