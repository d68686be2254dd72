#!/usr/bin/env bash
# Speculative decoding with a DFlash drafter through the commands: `synth
# --draft` writes drafters; `run` and `chat` with --draft (-md) print the
# plain greedy text token for token and report drafted and accepted tokens;
# a drafter that does not fit its model is refused by name; `bench --draft`
# prints tok/s per accepted length and the observed accepted length; `serve
# --draft` answers and counts drafts in /metrics.
. "$(dirname "$0")/lib.sh"
"$M" synth --preset nano --ctx 2048 -o "$TMP/nano.gguf" 2>/dev/null || { bad "synth failed"; finish; exit 1; }
expect_status 0 "$M" synth --preset nano --draft -o "$TMP/nano-dflash.gguf"
expect_grep "2 layers" "$TMP/err"
expect_status 0 "$M" synth --preset micro --draft --mix q4_k_m -o "$TMP/micro-dflash.gguf"
expect_status 0 "$M" inspect "$TMP/nano-dflash.gguf"

# greedy: the drafter never changes the text (a prompt past the window of 32)
P="The quick brown fox jumps over the lazy dog, and then the dog wakes up and runs after the fox."
expect_status 0 "$M" run -m "$TMP/nano.gguf" -p "$P" --temp 0 -n 80 -t 2
cp "$TMP/out" "$TMP/plain"
expect_status 0 "$M" run -m "$TMP/nano.gguf" --draft "$TMP/nano-dflash.gguf" -p "$P" --temp 0 -n 80 -t 2
cmp -s "$TMP/out" "$TMP/plain" && ok || bad "run --draft changed the greedy text"
expect_grep "decode: 80 tokens" "$TMP/err"
expect_grep "^draft: .* drafted, .* accepted (.*), mean accepted length " "$TMP/err"
expect_status 0 "$M" run -m "$TMP/nano.gguf" -md "$TMP/nano-dflash.gguf" --draft-max 3 -p "$P" --temp 0 -n 80 -t 2
cmp -s "$TMP/out" "$TMP/plain" && ok || bad "run -md --draft-max 3 changed the greedy text"
# sampling: the same seed, the same text
"$M" run -m "$TMP/nano.gguf" -md "$TMP/nano-dflash.gguf" -p "$P" --temp 1 -s 5 -n 40 > "$TMP/a" 2>/dev/null
"$M" run -m "$TMP/nano.gguf" -md "$TMP/nano-dflash.gguf" -p "$P" --temp 1 -s 5 -n 40 > "$TMP/b" 2>/dev/null
cmp -s "$TMP/a" "$TMP/b" && ok || bad "run --draft: the same seed gave another text"

# chat, two turns (the second rewinds onto the first)
printf 'Hello there\nAnd then?\n' | "$M" chat -m "$TMP/nano.gguf" --temp 0 -n 24 > "$TMP/c1" 2>/dev/null
printf 'Hello there\nAnd then?\n' | "$M" chat -m "$TMP/nano.gguf" -md "$TMP/nano-dflash.gguf" --temp 0 -n 24 > "$TMP/c2" 2>"$TMP/err"
cmp -s "$TMP/c1" "$TMP/c2" && ok || bad "chat --draft changed the greedy answers"
expect_grep "^draft: " "$TMP/err"

# a drafter that does not fit, a model given as a drafter, a drafter given as a model
expect_status 1 "$M" run -m "$TMP/nano.gguf" --draft "$TMP/micro-dflash.gguf" -n 2
expect_grep "hidden size 512 differs from the target's 256" "$TMP/err"
expect_status 1 "$M" run -m "$TMP/nano.gguf" --draft "$TMP/nano.gguf" -n 2
expect_grep "architecture 'muse-glimmer' is not a drafter" "$TMP/err"
expect_status 1 "$M" run -m "$TMP/nano-dflash.gguf" -n 2
expect_grep "is a DFlash drafter" "$TMP/err"
expect_status 1 "$M" run -m "$TMP/nano.gguf" --draft "$TMP/nano-dflash.gguf" --draft-max 16 -n 2
expect_grep "drafts 1 to 15 tokens" "$TMP/err"
expect_status 1 "$M" run -m "$TMP/nano.gguf" --draft "$TMP/nano-dflash.gguf" --backend ref -n 2
expect_grep "cannot verify drafts yet" "$TMP/err"

# bench
expect_status 0 "$M" bench -m "$TMP/nano.gguf" --draft "$TMP/nano-dflash.gguf" --depths 0,100 -n 3 --observe 24 -t 2
expect_grep "^| 16 | " "$TMP/out"
expect_grep "^observed: 24 tokens greedy" "$TMP/out"
expect_status 2 "$M" bench -m "$TMP/nano.gguf" --draft "$TMP/nano-dflash.gguf" --json
expect_grep "does not take --json" "$TMP/err"

# serve: an answer, and the drafts in /metrics
"$M" serve -m "$TMP/nano.gguf" -md "$TMP/nano-dflash.gguf" --port 0 -t 2 -q 2> "$TMP/serve.err" &
pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/serve.err")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -n "$port" ]; then
  curl -s "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}' > "$TMP/answer"
  expect_grep '"completion_tokens":20' "$TMP/answer"
  curl -s "http://127.0.0.1:$port/metrics" > "$TMP/metrics"
  expect_grep "^muser_spec_steps_total [1-9]" "$TMP/metrics"
  expect_grep "^muser_spec_drafted_tokens_total [1-9]" "$TMP/metrics"
  expect_grep "^muser_spec_mean_accepted_length " "$TMP/metrics"
else
  bad "serve --draft did not start: $(cat "$TMP/serve.err")"
fi
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
finish
