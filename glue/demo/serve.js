// A small static server for the demo: serves the repository root (so /glue/ and /dist/) with
// the two headers that make a page cross-origin isolated (COOP same-origin, COEP require-corp).
// `?isolated=0` on a request leaves them out, to see the single-threaded fallback. `files` and
// `mounts` map extra URL paths to files and folders outside the root (the tests' fixtures).
//   cargo xtask serve [--no-isolation] [--port N]   (= node glue/demo/serve.js …), then open
//   http://localhost:8080/glue/demo/chat.html (chat), search.html (semantic search), or / (pool self-test)
import { createServer } from 'node:http';
import { stat } from 'node:fs/promises';
import { createReadStream, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { extname, join, normalize, sep } from 'node:path';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css', '.txt': 'text/plain' };

export const DEFAULT_MODEL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';
/** The search demo's default embedder (glue/demo/search.js): `python3 models/fetch.py --model potion-base-8m`. */
export const DEFAULT_EMBEDDER = '/models/potion-base-8M/';

/** `files`: URL path -> file; `mounts`: URL prefix (ending in '/') -> folder (ending in the
 *  separator); `pages`: URL path -> HTML text. Everything else comes from `root`. `isolation`
 *  false never sends COOP/COEP. `intercept(req, res, url, headers)` may answer a request first
 *  (return true). Files stream with their Content-Length; HEAD gets the headers only. */
export function serve({ port = 8080, host = '127.0.0.1', root = ROOT, files = {}, mounts = {}, pages = {},
  isolation = true, intercept } = {}) {
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    const headers = { 'Cache-Control': 'no-store', 'Cross-Origin-Resource-Policy': 'same-origin' };
    if (isolation && url.searchParams.get('isolated') !== '0') {
      headers['Cross-Origin-Opener-Policy'] = 'same-origin';
      headers['Cross-Origin-Embedder-Policy'] = 'require-corp';
    }
    if (intercept && await intercept(req, res, url, headers)) return;
    if (Object.hasOwn(pages, url.pathname)) {
      res.writeHead(200, { ...headers, 'Content-Type': TYPES['.html'] }).end(pages[url.pathname]);
      return;
    }
    let path = files[url.pathname];
    if (!path) {
      const prefix = Object.keys(mounts).find((p) => url.pathname.startsWith(p));
      const base = prefix ? mounts[prefix] : root;
      try { path = normalize(join(base, decodeURIComponent(url.pathname.slice(prefix?.length ?? 0)))); } catch { path = null; }
      if (!path || !(path + sep).startsWith(base)) { res.writeHead(400, headers).end('bad path'); return; }
    }
    if (url.pathname.endsWith('/')) path = join(path, 'index.html');
    let size;
    try { const st = await stat(path); if (!st.isFile()) throw new Error('not a file'); size = st.size; } catch {
      res.writeHead(404, headers).end('not found');
      return;
    }
    res.writeHead(200, { ...headers, 'Content-Type': TYPES[extname(path)] ?? 'application/octet-stream', 'Content-Length': size });
    if (req.method === 'HEAD') res.end(); else createReadStream(path).pipe(res);
  });
  return new Promise((ok) => server.listen(port, host, () => ok(server)));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // `cargo xtask serve [--no-isolation] [--port N]` runs this, after fetching the demo models
  // into models/ (models/fetch.py) when they are not there.
  const args = process.argv.slice(2);
  const isolation = !args.includes('--no-isolation');
  const portAt = args.indexOf('--port');
  const port = Number(portAt >= 0 ? args[portAt + 1] : args.find((a) => /^\d+$/.test(a)) ?? 8080);
  for (const [path, fetch] of [[DEFAULT_MODEL, 'python3 models/fetch.py'], [DEFAULT_EMBEDDER, 'python3 models/fetch.py --model potion-base-8m']]) {
    if (!existsSync(join(ROOT, path))) console.warn(`${path.slice(1)} is missing: the demo that loads it will fail (${fetch}, or cargo xtask serve, fetches it)`);
  }
  const server = await serve({ port, isolation });
  const base = `http://localhost:${server.address().port}/glue/demo/`;
  console.log(`${isolation ? 'cross-origin isolated (COOP/COEP): threaded module' : 'not isolated (--no-isolation): single-threaded module'}`);
  console.log(`${base}chat.html    chat (?model=URL&threads=N&ctx=N&temp=T)`);
  console.log(`${base}search.html  semantic search (Model2Vec; ?embedder=/models/all-MiniLM-L6-v2-F16.gguf for`);
  console.log('             the sentence encoder, after python3 models/fetch.py --model all-minilm-l6-v2)');
  console.log(`${base}             thread pool self-test`);
}
