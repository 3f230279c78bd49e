// math_apply (the module's hand-written exp/log/sin/cos in f64 and the 4-lane f32 exp) against
// JavaScript's Math. Math is not correctly rounded either (V8 uses fdlibm ports, < 1 ulp), so
// the bound is a distance in units in the last place: ≤ 2 ulp for f64 (ours ≤ 1 + Math's ≤ 1),
// ≤ 2 f32 ulp for the f32 exp against Math.exp rounded to f32.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load } from '../wasmind.js';

const wm = await load({ threaded: false });

// Distance in ulps between two finite floats of the same sign class, via their bit patterns.
function ulps(a, b, Float, Int) {
  if (a === b) return 0;
  const f = new Float([a, b]), i = new Int(f.buffer);
  const ord = (x) => (x < 0n ? -(x & (Int === BigInt64Array ? 0x7fffffffffffffffn : 0x7fffffffn)) : x);
  const d = ord(BigInt(i[0])) - ord(BigInt(i[1]));
  return Number(d < 0n ? -d : d);
}

let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
const N = 4000;
const cases = {
  exp: [() => (rand() * 2 - 1) * 708, () => (rand() * 2 - 1) * 1e-3, () => (rand() * 2 - 1) * 20],
  log: [() => 10 ** ((rand() * 2 - 1) * 300), () => 1 + (rand() * 2 - 1) * 1e-3, () => rand() * 100],
  sin: [() => (rand() * 2 - 1) * 10, () => (rand() * 2 - 1) * 1e5, () => (rand() * 2 - 1) * 1e-6],
  cos: [() => (rand() * 2 - 1) * 10, () => (rand() * 2 - 1) * 1e5, () => (rand() * 2 - 1) * 1e-6],
};

for (const [fn, gens] of Object.entries(cases)) {
  test(`math_apply ${fn} (f64) within 2 ulp of Math.${fn} on ${N} values`, (t) => {
    const x = Float64Array.from({ length: N }, (_, k) => gens[k % gens.length]());
    const y = wm.mathApply(fn, x);
    let worst = 0, at = 0;
    for (let k = 0; k < N; k++) {
      const d = ulps(y[k], Math[fn](x[k]), Float64Array, BigInt64Array);
      if (d > worst) [worst, at] = [d, k];
    }
    t.diagnostic(`worst: ${worst} ulp`);
    assert.ok(worst <= 2, `${fn}(${x[at]}) = ${y[at]}, Math: ${Math[fn](x[at])}, ${worst} ulp`);
  });
}

test('math_apply expf4 (f32) within 2 f32 ulp of fround(Math.exp) on 4000 values', (t) => {
  const x = Float32Array.from({ length: N }, () => (rand() * 2 - 1) * 87);
  const y = wm.mathApply('expf4', x);
  let worst = 0, at = 0;
  for (let k = 0; k < N; k++) {
    const d = ulps(y[k], Math.fround(Math.exp(x[k])), Float32Array, Int32Array);
    if (d > worst) [worst, at] = [d, k];
  }
  t.diagnostic(`worst: ${worst} f32 ulp`);
  assert.ok(worst <= 2, `expf4(${x[at]}) = ${y[at]}, Math: ${Math.fround(Math.exp(x[at]))}, ${worst} ulp`);
});

test('math_apply special values', () => {
  const y = wm.mathApply('exp', new Float64Array([0, -Infinity, Infinity, 710, -746]));
  assert.deepEqual([...y], [1, 0, Infinity, Infinity, 0]);
  const l = wm.mathApply('log', new Float64Array([1, 0, Infinity]));
  assert.deepEqual([...l], [0, -Infinity, Infinity]);
  assert.ok(Number.isNaN(wm.mathApply('log', new Float64Array([-1]))[0]));
});
