#!/usr/bin/env python3
# Python twin of scripts/bench_serve.mjs (for machines without node):
#   bench_serve.py URL CLIENTS(1,4,16) TOKENS [greedy]
import json, sys, threading, time, urllib.request, re
url, counts, tokens = sys.argv[1], [int(x) for x in sys.argv[2].split(',')], int(sys.argv[3])
greedy = sys.argv[4:] == ['greedy']
def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={'content-type': 'application/json'})
    return urllib.request.urlopen(req, timeout=600)
def metrics():
    t = urllib.request.urlopen(url + '/metrics').read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'^(muser_[a-z_]+) ([-0-9.e+]+)$', t, re.M)}
def stream(body, out, k):
    r = post('/v1/chat/completions', dict(body, stream=True))
    n = 0
    for line in r:
        if line.startswith(b'data: {'): n += 1
    out[k] = n
ends = json.load(post('/tokenize', {'content': '<|eot|><|end_of_text|>'}))['tokens']
no_end = {str(i): -100 for i in ends}
print(f'{tokens} tokens per client, ' + ('greedy' if greedy else 'sampled (seeded), end tokens suppressed'))
print('| concurrent sessions | aggregate tok/s | per session tok/s | server decode tok/s | mean batch |')
print('|---:|---:|---:|---:|---:|')
def run(n, mt):
    out = [0] * n
    th = [threading.Thread(target=stream, args=({'messages': [{'role': 'user', 'content': f'Benchmark client {k}: tell a long story.'}],
          'max_tokens': mt, **({'temperature': 0} if greedy else {'logit_bias': no_end, 'seed': k})}, out, k))
          for k in range(n)]
    for t in th: t.start()
    for t in th: t.join()
    return out
for n in counts:
    run(n, 1)
    m0 = metrics(); t0 = time.time()
    got = run(n, tokens)
    sec = time.time() - t0; m1 = metrics()
    rows = m1['muser_decode_rows_total'] - m0['muser_decode_rows_total']
    steps = m1['muser_decode_steps_total'] - m0['muser_decode_steps_total']
    ds = m1['muser_decode_seconds_total'] - m0['muser_decode_seconds_total']
    agg = (m1['muser_completion_tokens_total'] - m0['muser_completion_tokens_total']) / sec
    print(f'| {n} | {agg:.1f} | {agg / n:.1f} | {rows / ds:.1f} | {rows / steps:.2f} |', flush=True)
