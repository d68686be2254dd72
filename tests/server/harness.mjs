// harness.mjs — starts `muser serve` processes on 127.0.0.1 for the tests
// and stops them checking a clean exit (under ASan: no leak, no error).
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

export const MUSER = process.env.MUSER_BIN;
export const QUICK = process.env.MUSER_TEST_QUICK === '1';
// Servers in the tests run this model (synthesized by tests/cli/serve.sh).
export const MODEL = process.env.MUSER_SERVE_MODEL;
export const MODEL_ID = process.env.MUSER_SERVE_MODEL_ID || 'serve-nano';

export async function startServer(args, { model = MODEL } = {}) {
  const argv = ['serve', '--port', '0', '--test-hooks', '-t', '1', ...(model ? ['-m', model] : []), ...args];
  const proc = spawn(MUSER, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}) before listening:\n${log}`)));
  });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    url,
    client: (opts = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, ...opts }),
    log: () => log,
    async stop() {
      proc.kill('SIGTERM');
      const { code, signal } = await exited;
      assert.doesNotMatch(log, /Sanitizer|runtime error/, `sanitizer report:\n${log}`);
      assert.equal(signal, null, `server died of ${signal}:\n${log}`);
      assert.equal(code, 0, `server exit status ${code}:\n${log}`);
    },
  };
}

export async function getJson(url, path) {
  const r = await fetch(url + path);
  return { status: r.status, body: await r.json() };
}

export async function postRaw(url, path, body, headers = {}) {
  const r = await fetch(url + path, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

export async function metrics(url) {
  const text = await (await fetch(url + '/metrics')).text();
  const values = {};
  for (const line of text.split('\n')) {
    const m = /^(muser_[a-z_]+(?:\{[^}]*\})?) ([-0-9.e+]+)$/.exec(line);
    if (m) values[m[1]] = Number(m[2]);
  }
  return values;
}

// Waits until every slot is idle and nothing waits (no leaked slot).
export async function waitIdle(url, ms = 5000) {
  const t0 = Date.now();
  let h;
  for (;;) {
    h = (await getJson(url, '/health')).body;
    if (h.slots_processing === 0 && h.requests_waiting === 0) return h;
    if (Date.now() - t0 > ms) assert.fail(`slots still busy after ${ms} ms: ${JSON.stringify(h)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function expectApiError(err, status, { code, param } = {}) {
  assert.ok(err instanceof OpenAI.APIError, `expected an APIError, got ${err}`);
  assert.equal(err.status, status, err.message);
  assert.equal(typeof err.error?.message, 'string');
  assert.equal(typeof err.error?.type, 'string');
  assert.ok('param' in err.error && 'code' in err.error, JSON.stringify(err.error));
  if (code !== undefined) assert.equal(err.error.code, code, JSON.stringify(err.error));
  if (param !== undefined) assert.equal(err.error.param, param, JSON.stringify(err.error));
}
