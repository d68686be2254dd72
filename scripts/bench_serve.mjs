#!/usr/bin/env node
// bench_serve.mjs — aggregate decode speed of a running `muser serve` with
// 1, 4, 16... concurrent streaming sessions (a benchmark, not a test).
//
//   node scripts/bench_serve.mjs --url http://127.0.0.1:8080 [--clients 1,4,16] [--tokens 64] [--greedy 1]
//
// Each client first sends its prompt once (so the measured run prefills
// almost nothing), then all clients stream --tokens tokens at once, seeded
// sampling with the end tokens suppressed (or, with --greedy, temperature 0
// and nothing suppressed: the server's choices on the device). Reported:
// aggregate tok/s (the tokens generated over the wall time), and the
// server's own decode tok/s and mean batch size from /metrics.
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const url = args.url ?? 'http://127.0.0.1:8080';
const clientCounts = (args.clients ?? '1,4,16').split(',').map(Number);
const tokens = Number(args.tokens ?? 64);
const greedy = args.greedy !== undefined && args.greedy !== '0';

async function post(path, body) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r;
}

async function metrics() {
  const text = await (await fetch(url + '/metrics')).text();
  const v = {};
  for (const m of text.matchAll(/^(muser_[a-z_]+) ([-0-9.e+]+)$/gm)) v[m[1]] = Number(m[2]);
  return v;
}

// Streams one completion and returns the number of content chunks.
async function stream(body) {
  const r = await post('/v1/chat/completions', { ...body, stream: true });
  const reader = r.body.getReader();
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return n;
    n += (Buffer.from(value).toString().match(/^data: \{/gm) ?? []).length;
  }
}

const ends = (await (await post('/tokenize', { content: '<|eot|><|end_of_text|>' })).json()).tokens;
const noEnd = Object.fromEntries(ends.map((id) => [String(id), -100]));
const models = await (await fetch(url + '/v1/models')).json();
console.log(`model ${models.data[0].id}, ${tokens} tokens per client, ${greedy ? 'greedy' : 'sampled (seeded), end tokens suppressed'}`);
console.log('| concurrent sessions | aggregate tok/s | per session tok/s | server decode tok/s | mean batch |');
console.log('|---:|---:|---:|---:|---:|');
for (const n of clientCounts) {
  const request = (k, maxTokens) => ({
    messages: [{ role: 'user', content: `Benchmark client ${k}: tell a long story.` }],
    max_tokens: maxTokens, ...(greedy ? { temperature: 0 } : { logit_bias: noEnd, seed: k }),
  });
  await Promise.all(Array.from({ length: n }, (_, k) => stream(request(k, 1)))); // prefill each prompt once
  const m0 = await metrics();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: n }, (_, k) => stream(request(k, tokens))));
  const seconds = (performance.now() - t0) / 1000;
  const m1 = await metrics();
  const rows = m1.muser_decode_rows_total - m0.muser_decode_rows_total;
  const steps = m1.muser_decode_steps_total - m0.muser_decode_steps_total;
  const decodeSeconds = m1.muser_decode_seconds_total - m0.muser_decode_seconds_total;
  const aggregate = (m1.muser_completion_tokens_total - m0.muser_completion_tokens_total) / seconds;
  console.log(`| ${n} | ${aggregate.toFixed(1)} | ${(aggregate / n).toFixed(1)} | ${(rows / decodeSeconds).toFixed(1)} | ${(rows / steps).toFixed(2)} |`);
}
