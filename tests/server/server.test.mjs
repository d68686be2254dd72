// server.test.mjs — `muser serve` against the official OpenAI client, on
// 127.0.0.1. The model is a synthetic Muse Glimmer (random weights: the
// text is gibberish but every stage is real); where a test needs a given
// output (tool calls, reasoning, stop strings) it scripts the model with
// the --test-hooks field "muser_test_script", whose tokens replace the
// sampler and then go through the same session, detokenizer, parser and
// stream as sampled ones.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {
  QUICK, MODEL_ID, startServer, getJson, postRaw, metrics, waitIdle, expectApiError,
} from './harness.mjs';

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' }, temp: { type: 'number' } },
      required: ['city'],
    },
  },
};
const TIME_TOOL = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };

const CALL_SCRIPT = ' to=self<|message|>The user wants the weather.<|eom|><|start|>assistant to=get_weather<|message|>'
  + '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n'
  + '<atem:parameter name="days">3</atem:parameter>\n<atem:parameter name="temp">1.0</atem:parameter>\n'
  + '</atem:invoke>\n</atem:function_calls><|eot|>';

const user = (content) => [{ role: 'user', content }];

describe('muser serve', () => {
  let srv, client, noEnd;
  before(async () => {
    srv = await startServer(['--parallel', '4', '--queue', '64', '-c', '4096', '--max-body', '65536']);
    client = srv.client();
    // A random model may end early; tests that count tokens forbid the end tokens.
    const t = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: '<|eot|><|end_of_text|>' }));
    noEnd = Object.fromEntries(t.json.tokens.map((id) => [String(id), -100]));
  });
  after(async () => { await srv.stop(); });

  test('models and health', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].id, MODEL_ID);
    const h = await getJson(srv.url, '/health');
    assert.equal(h.status, 200);
    assert.equal(h.body.status, 'ok');
    assert.equal(h.body.slots_idle, 4);
  });

  test('non-streaming chat: content, usage, finish_reason length', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_ID, messages: user('Hello!'), max_tokens: 8, temperature: 0.7, seed: 7, logit_bias: noEnd,
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, MODEL_ID);
    const c = r.choices[0];
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 8);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
    // prompt_tokens is the tokenized rendered template
    const tmpl = await postRaw(srv.url, '/apply-template', JSON.stringify({ messages: user('Hello!') }));
    const tok = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: tmpl.json.prompt }));
    assert.equal(r.usage.prompt_tokens, tok.json.tokens.length);
  });

  test('same seed, same text; greedy is deterministic', async () => {
    const ask = (extra) => client.chat.completions.create({ messages: user('Count to three.'), max_tokens: 12, ...extra });
    const a = await ask({ seed: 42 }), b = await ask({ seed: 42 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const g1 = await ask({ temperature: 0 }), g2 = await ask({ temperature: 0 });
    assert.equal(g1.choices[0].message.content, g2.choices[0].message.content);
  });

  test('a seeded top-k draw is the same alone and in a batch that needs full logits', async () => {
    // Alone, its steps hand back only the top logits; beside a request with a
    // penalty the batch takes every row's full logits. The text must agree.
    const ask = (extra) => client.chat.completions.create({ messages: user('Name some colours.'), ...extra });
    const drawn = { max_tokens: 24, temperature: 0.9, top_k: 20, seed: 11, logit_bias: { ...noEnd, 5: 3 } };
    const alone = await ask(drawn);
    const [beside] = await Promise.all([
      ask(drawn),
      ask({ max_tokens: 48, temperature: 0.7, presence_penalty: 0.5, seed: 3, logit_bias: noEnd }),
    ]);
    assert.equal(beside.choices[0].message.content, alone.choices[0].message.content);
    assert.equal(alone.usage.completion_tokens, 24);
  });

  test('streaming chat: role first, deltas, finish_reason, usage chunk', async () => {
    const stream = await client.chat.completions.create({
      messages: user('Tell me a story.'), max_tokens: 10, stream: true, logit_bias: noEnd, stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const finals = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
    assert.equal(finals.length, 1);
    assert.equal(finals[0].choices[0].finish_reason, 'length');
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 10);
    for (const c of chunks) assert.equal(c.object, 'chat.completion.chunk');
  });

  test('scripted answer with reasoning: reasoning_content and content, streamed and not', async () => {
    const script = ' to=self<|message|>Two and two make four.<|eom|><|start|>assistant to=user<|message|>4<|eot|>';
    const r = await client.chat.completions.create({ messages: user('2+2?'), muser_test_script: script });
    assert.equal(r.choices[0].message.reasoning_content, 'Two and two make four.');
    assert.equal(r.choices[0].message.content, '4');
    assert.equal(r.choices[0].finish_reason, 'stop');
    const stream = await client.chat.completions.create({ messages: user('2+2?'), muser_test_script: script, stream: true });
    let reasoning = '', content = '', finish = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta ?? {};
      reasoning += d.reasoning_content ?? '';
      content += d.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(reasoning, 'Two and two make four.');
    assert.equal(content, '4');
    assert.equal(finish, 'stop');
  });

  test('stop strings are never emitted, also when split across tokens', async () => {
    const script = ' to=user<|message|>one two three four<|eot|>';
    const r = await client.chat.completions.create({ messages: user('count'), muser_test_script: script, stop: ['thr', 'zzz'] });
    assert.equal(r.choices[0].message.content, 'one two ');
    assert.equal(r.choices[0].finish_reason, 'stop');
    const stream = await client.chat.completions.create({
      messages: user('count'), muser_test_script: script, stop: 'e fo', stream: true,
    });
    let content = '';
    for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(content, 'one two thre');
  });

  test('tool calls: typed JSON arguments, ids, finish_reason tool_calls', async () => {
    const r = await client.chat.completions.create({
      messages: user('Weather in Paris?'), tools: [WEATHER_TOOL, TIME_TOOL], muser_test_script: CALL_SCRIPT,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.reasoning_content, 'The user wants the weather.');
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.match(call.id, /^call_/);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.equal(call.function.arguments, '{"city":"Paris","days":3,"temp":1.0}');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 3, temp: 1 });

    // streamed: the call arrives as a tool_calls delta
    const stream = await client.chat.completions.create({
      messages: user('Weather in Paris?'), tools: [WEATHER_TOOL, TIME_TOOL], muser_test_script: CALL_SCRIPT, stream: true,
    });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) calls.push(tc);
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].index, 0);
    assert.equal(calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Paris', days: 3, temp: 1 });

    // the result goes back in the next turn
    const r2 = await client.chat.completions.create({
      messages: [...user('Weather in Paris?'), c.message,
        { role: 'tool', tool_call_id: call.id, name: 'get_weather', content: '{"sky":"clear"}' }],
      tools: [WEATHER_TOOL, TIME_TOOL], muser_test_script: ' to=user<|message|>Clear skies.<|eot|>',
    });
    assert.equal(r2.choices[0].message.content, 'Clear skies.');
    assert.equal(r2.choices[0].finish_reason, 'stop');
  });

  test('tool_choice naming a function forces the call', async () => {
    const r = await client.chat.completions.create({
      messages: user('Weather?'), tools: [WEATHER_TOOL, TIME_TOOL],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      muser_test_script: '<atem:parameter name="city">Oslo</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>',
    });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
    assert.equal(r.choices[0].message.tool_calls[0].function.arguments, '{"city":"Oslo"}');
    const none = await client.chat.completions.create({
      messages: user('Weather?'), tools: [WEATHER_TOOL], tool_choice: 'none', max_tokens: 3, logit_bias: noEnd,
    });
    assert.equal(none.choices[0].finish_reason, 'length');
  });

  test('reasoning_effort maps to the template strength', async () => {
    for (const effort of ['low', 'medium', 'high', 'xhigh', 'minimal']) {
      const r = await client.chat.completions.create({ messages: user('hi'), reasoning_effort: effort, max_tokens: 1, logit_bias: noEnd });
      assert.equal(r.choices[0].finish_reason, 'length');
    }
    const low = await postRaw(srv.url, '/apply-template', JSON.stringify({ messages: user('hi'), reasoning_effort: 'minimal' }));
    assert.match(low.json.prompt, /Reasoning strength: low\./);
    await assert.rejects(client.chat.completions.create({ messages: user('hi'), reasoning_effort: 'extreme' }),
      (e) => { expectApiError(e, 400, { param: 'reasoning_effort', code: 'unsupported_value' }); return true; });
  });

  test('completions: text, streaming, token-id prompts', async () => {
    const r = await client.completions.create({ model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 6, logit_bias: noEnd });
    assert.equal(r.object, 'text_completion');
    assert.equal(typeof r.choices[0].text, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 6);
    const stream = await client.completions.create({
      prompt: [1, 2, 3], max_tokens: 5, stream: true, logit_bias: noEnd, stream_options: { include_usage: true },
    });
    let n = 0, usage = null;
    for await (const chunk of stream) { n++; usage = chunk.usage ?? usage; }
    assert.ok(n >= 2);
    assert.equal(usage.prompt_tokens, 3);
    const s = await client.completions.create({ prompt: 'x', muser_test_script: 'alpha beta gamma', stop: [' beta'] });
    assert.equal(s.choices[0].text, 'alpha');
    assert.equal(s.choices[0].finish_reason, 'stop');
  });

  test('tokenize, detokenize, apply-template (llama-server shapes)', async () => {
    const t = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: 'hello <|eot|>' }));
    assert.equal(t.status, 200);
    assert.ok(Array.isArray(t.json.tokens) && t.json.tokens.every(Number.isInteger));
    const d = await postRaw(srv.url, '/detokenize', JSON.stringify({ tokens: t.json.tokens }));
    assert.equal(d.json.content, 'hello <|eot|>');
    const plain = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: '<|eot|>', parse_special: false }));
    assert.ok(plain.json.tokens.length > 1);
    const p = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: 'hé', with_pieces: true, add_special: true }));
    assert.ok(p.json.tokens.every((x) => Number.isInteger(x.id) && (typeof x.piece === 'string' || Array.isArray(x.piece))));
    const a = await postRaw(srv.url, '/apply-template', JSON.stringify({ messages: [{ role: 'system', content: 'Be brief.' }, ...user('hi')] }));
    assert.equal(a.status, 200);
    assert.ok(a.json.prompt.startsWith('<|begin_of_text|><|start|>system<|message|>Be brief.'));
    assert.ok(a.json.prompt.endsWith('<|start|>user<|message|>hi<|eot|><|start|>assistant'));
  });

  test('prompt cache: the second turn prefills only the new tokens', async () => {
    const first = user('Remember the number 12345, please.');
    const answer = ' to=user<|message|>I will remember it.<|eot|>';
    const r1 = await client.chat.completions.create({ messages: first, muser_test_script: answer });
    assert.equal(r1.choices[0].message.content, 'I will remember it.');
    const before = await metrics(srv.url);
    const second = [...first, { role: 'assistant', content: r1.choices[0].message.content }, ...user('What was it?')];
    const r2 = await client.chat.completions.create({ messages: second, max_tokens: 2, logit_bias: noEnd });
    const after2 = await metrics(srv.url);
    const cached = r2.usage.prompt_tokens_details.cached_tokens;
    // Everything of turn one is reused: its prompt and the answer the slot generated.
    assert.ok(cached >= r1.usage.prompt_tokens + r1.usage.completion_tokens - 1,
      `cached ${cached} of ${r2.usage.prompt_tokens}; turn one had ${r1.usage.prompt_tokens} + ${r1.usage.completion_tokens}`);
    const newTail = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: '<|eot|><|start|>user<|message|>What was it?<|eot|><|start|>assistant' }));
    const prefilled = after2.muser_prompt_tokens_prefilled_total - before.muser_prompt_tokens_prefilled_total;
    assert.equal(prefilled, r2.usage.prompt_tokens - cached);
    assert.ok(prefilled <= newTail.json.tokens.length + 1, `prefilled ${prefilled} tokens for a tail of ${newTail.json.tokens.length}`);
    assert.equal(after2.muser_prompt_tokens_cached_total - before.muser_prompt_tokens_cached_total, cached);
  });

  test('a client that disconnects mid-stream frees its slot at once', async () => {
    const before = await metrics(srv.url);
    const stream = await client.chat.completions.create({ messages: user('Go on forever.'), stream: true, max_tokens: 3000, logit_bias: noEnd });
    let n = 0;
    for await (const chunk of stream) { // eslint-disable-line no-unused-vars
      if (++n === 3) break; // leaving the loop aborts the request
    }
    const t0 = Date.now();
    await waitIdle(srv.url, 3000);
    const freedMs = Date.now() - t0;
    const after2 = await metrics(srv.url);
    assert.equal(after2.muser_generations_cancelled_total - before.muser_generations_cancelled_total, 1);
    const generated = after2.muser_completion_tokens_total - before.muser_completion_tokens_total;
    assert.ok(generated < 1000, `generation went on after the disconnect: ${generated} tokens`);
    assert.ok(freedMs < 3000);
  });

  describe('errors: OpenAI error objects with 4xx statuses', () => {
    const bad = async (params, status, expect = {}) => {
      await assert.rejects(client.chat.completions.create({ messages: user('hi'), max_tokens: 1, ...params }),
        (e) => { expectApiError(e, status, expect); return true; });
    };
    test('wrong field types and ranges', async () => {
      await bad({ temperature: 'hot' }, 400, { param: 'temperature' });
      await bad({ temperature: 3 }, 400, { param: 'temperature' });
      await bad({ max_tokens: 1.5 }, 400, { param: 'max_tokens' });
      await bad({ stream: 'yes' }, 400, { param: 'stream' });
      await bad({ stop: [1, 2] }, 400, { param: 'stop' });
      await bad({ messages: 'hi' }, 400, { param: 'messages' });
      await bad({ messages: [] }, 400, { param: 'messages' });
      await bad({ messages: [{ role: 'wizard', content: 'x' }] }, 400, { param: 'messages' });
      await bad({ tools: [{ type: 'function', function: { name: 'bad name' } }] }, 400, { param: 'tools[0]' });
      await bad({ logit_bias: { abc: 1 } }, 400, { param: 'logit_bias' });
    });
    test('unsupported parameters', async () => {
      await bad({ n: 2 }, 400, { param: 'n', code: 'unsupported_parameter' });
      await bad({ logprobs: true }, 400, { param: 'logprobs' });
      await bad({ response_format: { type: 'json_object' } }, 400, { param: 'response_format' });
      await bad({ tools: [WEATHER_TOOL, TIME_TOOL], tool_choice: 'required' }, 400, { param: 'tool_choice' });
      await bad({ tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'nope' } } }, 400, { param: 'tool_choice' });
    });
    test('unknown model', async () => {
      await bad({ model: 'gpt-17' }, 404, { code: 'model_not_found', param: 'model' });
    });
    test('a prompt longer than the context', async () => {
      await bad({ messages: user('word '.repeat(5000)) }, 400, { code: 'context_length_exceeded' });
    });
    test('malformed JSON, invalid UTF-8, not an object, empty body', async () => {
      for (const body of ['{"messages": [', '[1,2]', '', '{"messages": [{"role": "user", "content": "\\ud800"}]}']) {
        const r = await postRaw(srv.url, '/v1/chat/completions', body);
        assert.equal(r.status, 400, body);
        assert.equal(typeof r.json.error.message, 'string');
      }
      const utf8 = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}]}')]);
      const r = await postRaw(srv.url, '/v1/chat/completions', utf8);
      assert.equal(r.status, 400);
      assert.equal(r.json.error.code, 'invalid_utf8');
    });
    test('oversized body: 413', async () => {
      const big = JSON.stringify({ messages: user('x'.repeat(70000)) });
      const r = await postRaw(srv.url, '/v1/chat/completions', big);
      assert.equal(r.status, 413);
      assert.equal(r.json.error.code, 'request_too_large');
      await bad({ messages: user('y'.repeat(70000)) }, 413);
    });
    test('unknown routes: 404; wrong methods: 405', async () => {
      const r = await postRaw(srv.url, '/v1/nothing', '{}');
      assert.equal(r.status, 404);
      assert.match(r.json.error.message, /\/v1\/nothing/);
      const g = await fetch(srv.url + '/v1/chat/completions');
      assert.equal(g.status, 405);
      assert.equal(g.headers.get('allow'), 'POST');
      assert.equal((await g.json()).error.code, 'method_not_allowed');
      const p = await postRaw(srv.url, '/v1/models', '{}');
      assert.equal(p.status, 405);
    });
    test('utility endpoints validate too', async () => {
      assert.equal((await postRaw(srv.url, '/tokenize', '{"content": 5}')).status, 400);
      assert.equal((await postRaw(srv.url, '/detokenize', '{"tokens": [-1]}')).status, 400);
      assert.equal((await postRaw(srv.url, '/detokenize', '{"tokens": [99999999]}')).status, 400);
      assert.equal((await postRaw(srv.url, '/apply-template', '{"messages": 3}')).status, 400);
      assert.equal((await postRaw(srv.url, '/v1/completions', '{"prompt": ["a", "b"]}')).status, 400);
      assert.equal((await postRaw(srv.url, '/v1/completions', '{"prompt": "a", "echo": true}')).status, 400);
      assert.equal((await postRaw(srv.url, '/v1/completions', '{}')).status, 400);
    });
    test('the server is still healthy and nothing leaked', async () => {
      await waitIdle(srv.url);
      const m = await metrics(srv.url);
      assert.equal(m.muser_sessions_active, 0);
      assert.equal(m.muser_queue_depth, 0);
      assert.equal(m.muser_requests_server_errors_total, 0);
    });
  });

  test(`load: ${QUICK ? 8 : 32} concurrent streaming clients for ${QUICK ? 5 : 30} s, no failure, no leaked slot`, async () => {
    const clients = QUICK ? 8 : 32, seconds = QUICK ? 5 : 30;
    const deadline = Date.now() + seconds * 1000;
    const before = await metrics(srv.url);
    let ok = 0;
    const failures = [];
    const worker = async (k) => {
      let i = 0;
      while (Date.now() < deadline) {
        try {
          const stream = await client.chat.completions.create({
            messages: user(`client ${k} request ${i++}`), max_tokens: 8 + (k % 8), stream: true,
            stream_options: { include_usage: true }, logit_bias: noEnd,
          });
          let finish = null, usage = null;
          for await (const chunk of stream) {
            finish = chunk.choices[0]?.finish_reason ?? finish;
            usage = chunk.usage ?? usage;
          }
          assert.equal(finish, 'length');
          assert.equal(usage.completion_tokens, 8 + (k % 8));
          ok++;
        } catch (e) {
          failures.push(String(e));
        }
      }
    };
    await Promise.all(Array.from({ length: clients }, (_, k) => worker(k)));
    assert.deepEqual(failures, []);
    assert.ok(ok >= clients, `only ${ok} requests finished`);
    const h = await waitIdle(srv.url, 5000);
    assert.equal(h.slots_idle, 4);
    const after2 = await metrics(srv.url);
    const steps = after2.muser_decode_steps_total - before.muser_decode_steps_total;
    const rows = after2.muser_decode_rows_total - before.muser_decode_rows_total;
    console.log(`load: ${ok} requests, ${rows} tokens in ${steps} batched steps (mean batch ${(rows / steps).toFixed(2)})`);
    assert.ok(rows / steps > 1.5, 'concurrent sessions should share decode steps');
  });
});

describe('a full queue answers 429; a cancelled stream lets the next request in', () => {
  let srv, client;
  before(async () => {
    srv = await startServer(['--parallel', '1', '--queue', '1', '--api-key', 'sesame']);
    client = srv.client({ apiKey: 'sesame' });
  });
  after(async () => { await srv.stop(); });

  test('429 when full, then the waiting request runs', async () => {
    const t = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: '<|eot|><|end_of_text|>' }), { authorization: 'Bearer sesame' });
    const noEnd = Object.fromEntries(t.json.tokens.map((id) => [String(id), -100]));
    const long = { messages: user('long'), max_tokens: 100000, stream: true, logit_bias: noEnd };
    const a = await client.chat.completions.create(long);
    const ita = a[Symbol.asyncIterator]();
    await ita.next(); // A holds the only slot
    const b = await client.chat.completions.create(long); // B waits in the queue
    await assert.rejects(client.chat.completions.create({ messages: user('c'), max_tokens: 1 }),
      (e) => { expectApiError(e, 429, { code: 'queue_full' }); return true; });
    a.controller.abort();
    const itb = b[Symbol.asyncIterator]();
    const first = await itb.next();
    assert.equal(first.done, false);
    b.controller.abort();
    await waitIdle(srv.url);
    const m = await metrics(srv.url);
    assert.equal(m.muser_requests_rejected_total, 1);
  });

  test('API key: 401 without it, /health open', async () => {
    await assert.rejects(srv.client({ apiKey: 'wrong' }).models.list(),
      (e) => { expectApiError(e, 401, { code: 'invalid_api_key' }); return true; });
    assert.equal((await getJson(srv.url, '/health')).status, 200);
  });
});

describe('a llama model without the chat format', () => {
  let srv, client;
  before(async () => {
    srv = await startServer(['--parallel', '1'], { model: process.env.MUSER_LLAMA_MODEL });
    client = srv.client();
  });
  after(async () => { await srv.stop(); });

  test('completions and tokenization work; chat is a clear 400', async () => {
    const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    assert.equal(r.usage.completion_tokens, 8);
    assert.ok(r.choices[0].text.length > 0);
    const t = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: 'Once upon a time', add_special: true }));
    assert.equal(t.status, 200);
    await assert.rejects(client.chat.completions.create({ messages: user('hi') }),
      (e) => { expectApiError(e, 400, { code: 'unsupported_model' }); assert.match(e.message, /chat format/); return true; });
    assert.equal((await postRaw(srv.url, '/apply-template', JSON.stringify({ messages: user('hi') }))).status, 400);
  });

  test('one log line per request (method, path, status, tokens, ms); none with --quiet', async () => {
    // the line is written once the answer is out, so the client may see the answer first
    const logged = async (server, re) => {
      for (let t0 = Date.now(); !re.test(server.log()); await new Promise((r) => setTimeout(r, 20)))
        if (Date.now() - t0 > 5000) assert.fail(`no log line ${re} in:\n${server.log()}`);
    };
    await client.completions.create({ prompt: 'Once upon a time', max_tokens: 3, temperature: 0 });
    await logged(srv, /muser serve: POST \/v1\/completions 200, 5 prompt \+ 3 completion tokens, \d+ ms\n/);
    const stream = await client.completions.create({ prompt: 'Once', max_tokens: 2, temperature: 0, stream: true });
    for await (const chunk of stream) assert.ok(chunk);
    await logged(srv, /muser serve: POST \/v1\/completions 200, \d+ prompt \+ 2 completion tokens, \d+ ms\n/);
    await getJson(srv.url, '/health');
    await logged(srv, /muser serve: GET \/health 200, \d+ ms\n/);
    await postRaw(srv.url, '/nowhere', '{}');
    await logged(srv, /muser serve: POST \/nowhere 404, \d+ ms\n/);

    // --seed makes requests without a seed repeatable (without it each draws its own)
    const quiet = await startServer(['--parallel', '1', '--quiet', '--seed', '5'], { model: process.env.MUSER_LLAMA_MODEL });
    await getJson(quiet.url, '/health');
    const ask = () => quiet.client().completions.create({ prompt: 'Once', max_tokens: 24, temperature: 1.5 });
    const [a, b] = [await ask(), await ask()];
    assert.equal(a.choices[0].text, b.choices[0].text);
    await quiet.stop();
    assert.doesNotMatch(quiet.log(), /GET|POST/);
  });
});

describe('shutdown while requests run', () => {
  test('SIGTERM ends streams and waiting requests, and the server exits cleanly', async () => {
    const srv = await startServer(['--parallel', '1', '--queue', '4']);
    const client = srv.client();
    const t = await postRaw(srv.url, '/tokenize', JSON.stringify({ content: '<|eot|><|end_of_text|>' }));
    const noEnd = Object.fromEntries(t.json.tokens.map((id) => [String(id), -100]));
    const running = await client.chat.completions.create({ messages: user('run'), max_tokens: 100000, stream: true, logit_bias: noEnd });
    const it = running[Symbol.asyncIterator]();
    await it.next();
    const waiting = client.chat.completions.create({ messages: user('wait'), max_tokens: 5, logit_bias: noEnd })
      .then(() => 'answered', (e) => e.status);
    for (let h; !(h = (await getJson(srv.url, '/health')).body).requests_waiting;) await new Promise((r) => setTimeout(r, 20));
    const t0 = Date.now();
    await srv.stop(); // asserts exit status 0 and no sanitizer report
    assert.ok(Date.now() - t0 < 10000, 'shutdown took too long');
    assert.equal(await waiting, 503);
    // the stream ends (an error event or a closed connection), it does not hang
    await assert.rejects((async () => { for (let r = await it.next(); !r.done; r = await it.next()); throw new Error('ended'); })());
  });
});
