// The JavaScript runtimes the glue is tested in besides Node (Deno, Bun, workerd): each from the
// npm package pinned in package.json's devDependencies (node_modules/.bin/NAME after `npm ci`), or
// the binary named by $DENO, $BUN, $WORKERD. One that cannot start fails its tests with what to
// install, unless WASMIND_SKIP_RUNTIMES lists it (`deno,bun`, or `1` for all): then the skip goes
// into $WASMIND_SKIP_LOG, which `cargo xtask test` lists in its summary, so it is never a silent `ok`.
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PINNED = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')).devDependencies;

/** Whether WASMIND_SKIP_RUNTIMES names `name` (logged once per test file that asks). */
export function skipped(name, file) {
  const list = (process.env.WASMIND_SKIP_RUNTIMES ?? '').split(',').map((s) => s.trim());
  if (!list.includes(name) && !list.includes('1')) return false;
  if (process.env.WASMIND_SKIP_LOG) {
    appendFileSync(process.env.WASMIND_SKIP_LOG, `glue/test/${file}: the ${name} tests (WASMIND_SKIP_RUNTIMES=${process.env.WASMIND_SKIP_RUNTIMES})\n`);
  }
  return `WASMIND_SKIP_RUNTIMES=${process.env.WASMIND_SKIP_RUNTIMES}`;
}

/** The runtime `name` ('deno', 'bun', 'workerd') as { path, version }; throws, saying what to
 *  install, when its binary is missing, does not start, or is not the pinned version. */
export function runtime(name) {
  const env = name.toUpperCase();
  const path = process.env[env] ?? `${ROOT}node_modules/.bin/${name}`;
  const fix = `run \`npm ci\` in the repository root (package.json pins ${name}@${PINNED[name]}), or set ${env}=/path/to/${name}; ` +
    `WASMIND_SKIP_RUNTIMES=${name} skips these tests (listed as skipped)`;
  if (!existsSync(path)) throw new Error(`${name} is not installed (${path} missing): ${fix}`);
  const r = spawnSync(path, ['--version'], { encoding: 'utf8', timeout: 60000 });
  if (r.status !== 0) throw new Error(`${path} --version failed (${r.error?.message ?? `exit ${r.status}: ${r.stderr.trim()}`}): ${fix}`);
  // `deno 2.9.6 (stable, …)`, `1.4.5`, `workerd 2026-11-23` (workerd prints its date; the npm
  // version is 1.YYYYMMDD.N).
  const printed = /(\d+[.-]\d+[.-]\d+)/.exec(r.stdout)?.[1] ?? r.stdout.trim();
  const want = name === 'workerd' ? PINNED[name].replace(/^1\.(\d{4})(\d\d)(\d\d)\..*/, '$1-$2-$3') : PINNED[name];
  if (process.env[env] === undefined && printed !== want) {
    throw new Error(`${path} is ${name} ${printed}, not the pinned ${want}: ${fix}`);
  }
  return { path, version: printed };
}
