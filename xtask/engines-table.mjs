// The browser support table (README, docs/engines.md) from a test run: reads the cells the
// glue's browser tests recorded (glue/test/engines.mjs `record`, one JSON object a line in
// target/test-results/engines.jsonl: { engine, label, version, page, ...cells }), writes the
// markdown table to target/test-results/engines.md and prints it. A cell no passing test
// recorded says so ("✗ failed or not run"), so the table never claims what was not seen.
//   node xtask/engines-table.mjs [results.jsonl]   (cargo xtask test runs it after the glue tests)
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const input = process.argv[2] ?? process.env.WASMIND_ENGINE_RESULTS ?? join(root, 'target/test-results/engines.jsonl');
if (!existsSync(input)) {
  console.error(`${input} is missing: the browser tests write it (node --test glue/test/, or cargo xtask test)`);
  process.exit(1);
}
const records = readFileSync(input, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));

const ENGINES = ['chromium', 'firefox', 'webkit'];
const PAGES = ['isolated', 'not isolated'];
const NONE = '✗ failed or not run';
/** The cells recorded for one engine and page, merged (later records win). */
const cells = (engine, page) => Object.assign({}, ...records.filter((r) => r.engine === engine && r.page === page));
const moduleFile = (c) => `wasmind${c.relaxed ? '-relaxed' : ''}${c.threaded ? '-mt' : ''}.wasm`;

const columns = ['Engine', 'Version', 'Page (COOP/COEP)', 'Build picked', 'Threads', 'Compile', 'Model cache',
  'Greedy = llama.cpp', 'Model2Vec cos (min)', 'Kernels vs llama.cpp', 'Offline demos'];
const rows = [];
for (const engine of ENGINES) {
  const seen = records.find((r) => r.engine === engine);
  if (!seen) continue;
  for (const page of PAGES) {
    const c = cells(engine, page);
    const api = c.build !== undefined;
    rows.push([
      seen.label, seen.version, page,
      api ? moduleFile(c) : NONE,
      api ? String(c.threads) : NONE,
      api ? (c.compiled === 'streaming' ? 'compileStreaming' : 'from bytes') : NONE,
      api ? { opfs: 'OPFS', 'cache-api': 'Cache API' }[c.cache] ?? 'none' : NONE,
      api ? `✓ ${c.greedy} decisive tokens` : NONE,
      api ? `✓ ${c.m2vCos.toFixed(7)}` : NONE,
      // The kernels run on a page without COOP/COEP (single-threaded modules), the offline
      // demos on an isolated one: each is a cell of its own row only.
      page === 'not isolated' ? (c.kernels ? `✓ ${c.kernels}` : NONE) : '(not isolated row)',
      page === 'isolated' ? (c.offline === undefined ? NONE : c.offline ? '✓' : '✗ no Worker starts offline') : '(isolated row)',
    ]);
  }
}
const line = (cs) => `| ${cs.join(' | ')} |`;
const table = [line(columns), line(columns.map(() => '---')), ...rows.map(line)].join('\n');
const out = join(dirname(input), 'engines.md');
writeFileSync(out, `${table}\n`);
console.log(`${table}\n(${out})`);
