#!/usr/bin/env bash
# `muser tokenize`: test-vector files reproduce their .out files exactly,
# -p / --bos / --parse-special, and the exit codes (1 bad input, 2 usage).
set -u
bin=${MUSER_BIN:?}
data=${MUSER_TEST_DATA:?}/vocab
shared=${MUSER_DATA_DIR:-${MUSER_DEFAULT_DATA_DIR:-}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
skipped=0

check() { # name, condition result
    if [ "$2" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi
}

# Vector files: llama.cpp's .out format (each id preceded by a space). The
# nano fixture's .out has no leading spaces, so it is compared modulo those.
vectors() { # gguf, inp, out, exact?
    "$bin" tokenize -m "$1" --file "$2" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    if [ "$4" = exact ]; then
        cmp -s "$tmp/out" "$3"
    else
        diff -q <(sed 's/^ *//' "$tmp/out") <(sed 's/^ *//' "$3") > /dev/null
    fi
    local same=$?
    [ $rc = 0 ] && [ $same = 0 ]
    check "vectors $(basename "$1") (rc $rc)" $?
}

for v in gpt-2 starcoder llama-spm phi-3; do
    vectors "$data/ggml-vocab-$v.gguf" "$data/ggml-vocab-$v.gguf.inp" "$data/ggml-vocab-$v.gguf.out" exact
done
vectors "$data/nano-vocab.gguf" "$data/nano-vocab.gguf.inp" "$data/nano-vocab.gguf.out" spaces

if [ -n "$shared" ] && [ -f "$shared/vocab/muse-glimmer/vocab-muse-glimmer.gguf" ]; then
    v=$shared/vocab/muse-glimmer/vocab-muse-glimmer.gguf
    vectors "$v" "$v.inp" "$v.out" exact
    v=$shared/vocab/llama3/vocab-llama3-bpe.gguf
    vectors "$v" "$v.inp" "$v.out" exact
    out=$("$bin" tokenize -m "$shared/vocab/muse-glimmer/vocab-muse-glimmer.gguf" --parse-special --ids-only \
        -p '<|begin_of_text|>Hello,')
    [ "$out" = "200000 19873 24" ]
    check "muse-glimmer --parse-special ($out)" $?
else
    echo "**************** SKIPPED PART: the shared vocabularies (set MUSER_DATA_DIR) ****************"
    skipped=1
fi

nano=$data/nano-vocab.gguf
out=$("$bin" tokenize -m "$nano" -p "Hello world" --ids-only 2> "$tmp/err")
[ "$out" = "72 849 111 382 389" ] && [ ! -s "$tmp/err" ]
check "-p ($out)" $?
out=$("$bin" tokenize -m "$nano" -p "Hello world" 2> "$tmp/err")
[ "$out" = "72 849 111 382 389" ] && grep -q "5 tokens" "$tmp/err"
check "-p with the listing on stderr" $?
out=$("$bin" tokenize -m "$nano" -p "Hello world" --bos --ids-only)
[ "$out" = "990 72 849 111 382 389" ]
check "--bos ($out)" $?
out=$("$bin" tokenize -m "$nano" -p "<|eot|>" --parse-special --ids-only)
[ "$out" = "998" ]
check "--parse-special ($out)" $?
out=$("$bin" tokenize -m "$nano" -p "<|start|>" --ids-only)
[ "$out" = "992" ]
check "user-defined <|start|> without --parse-special ($out)" $?
out=$("$bin" tokenize -m "$MUSER_SRC/models/stories260K/stories260K.gguf" -p "Once upon a time" --bos --ids-only)
[ "$out" = "1 403 407 261 378" ]
check "stories260K ($out)" $?

expect_rc() { # want, description, args...
    local want=$1 what=$2
    shift 2
    "$bin" tokenize "$@" > /dev/null 2> "$tmp/err"
    local rc=$?
    [ $rc = "$want" ] && [ -s "$tmp/err" ]
    check "$what: exit $rc, want $want" $?
}
expect_rc 1 "missing model file" -m "$tmp/none.gguf" -p x
echo "not a gguf" > "$tmp/bad.gguf"
expect_rc 1 "not a GGUF" -m "$tmp/bad.gguf" -p x
expect_rc 1 "missing input file" -m "$nano" --file "$tmp/none.inp"
expect_rc 2 "no model" -p x
expect_rc 2 "no text" -m "$nano"
expect_rc 2 "both -p and --file" -m "$nano" -p x --file y
expect_rc 2 "unknown option" -m "$nano" -p x --frobnicate
expect_rc 2 "missing value" -m "$nano" -p
expect_rc 2 "an extra argument" -m "$nano" -p x extra
expect_rc 1 "text that is not UTF-8" -m "$nano" -p "$(printf 'a\xffb')"
grep -q "the text is not valid UTF-8 (byte 1 is 0xff)" "$tmp/err"
check "the invalid byte named" $?
printf 'ok\n__ggml_vocab_test__\nbad \xc3(\n' > "$tmp/bad.inp"
expect_rc 1 "a vector file that is not UTF-8" -m "$nano" --file "$tmp/bad.inp"
expect_rc 1 "a directory as the vector file" -m "$nano" --file "$tmp"
grep -q "is a directory" "$tmp/err"
check "a directory named as such" $?
out=$("$bin" tokenize -m "$nano" -p "H" 2>&1 >/dev/null | head -1)
[ "$out" = "1 token:" ]
check "one token, not '1 tokens' ($out)" $?

echo "cli_tokenize: $pass passed, $fail failed"
[ $fail = 0 ] || exit 1
[ $skipped = 0 ] || exit 77 # report "skipped" rather than a pass that checked less
