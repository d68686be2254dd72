/* vocab.c — loading the vocabulary from tokenizer.ggml.* metadata.
 *
 * Keys read: model, pre, tokens, token_type, scores, merges, the special ids
 * (bos, eos, eot, eom, unknown, seperator [sic], padding, fim_pad/rep/sep),
 * add_bos_token, add_eos_token, add_space_prefix. Everything is copied out
 * of the file, so the vocabulary does not depend on the mapping.
 *
 * Load-time fixes, as llama.cpp applies them (src/llama-vocab.cpp, load):
 *   - end-of-generation set: the texts on llama.cpp's list (<|eot_id|>,
 *     <|end_of_text|>, <|endoftext|>, </s>, ...), the EOS and EOT ids, and
 *     the FIM pad/repo/separator tokens; tokens found by text become
 *     control tokens;
 *   - <|start|>, <|message|>, <|channel|> and <|constrain|> become
 *     user-defined (llama.cpp's gpt-oss rule, which reaches Muse Glimmer):
 *     they are matched in text even with parse_special off, and always
 *     detokenize to their text;
 *   - Phi-3 vocabularies: special tokens swallow whitespace on their right.
 * One deliberate difference: llama.cpp also adds tokenizer.ggml.eom_token_id
 * to the end-of-generation set. We do not: for Muse Glimmer <|eom|> ends a
 * reasoning or tool-call block, not the turn, and stopping there cuts the
 * answer off (spec §5). An EOM whose text is on the list (Llama 3's
 * <|eom_id|>) is still an end token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/special.h"
#include "text/utf8.h"
#include "text/vocab_internal.h"
#include "util/error.h"

/* tokenizer.ggml.token_type values (llama.cpp's enum llama_token_type). */
enum { TYPE_UNDEFINED = 0, TYPE_NORMAL = 1, TYPE_UNKNOWN = 2, TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4,
       TYPE_UNUSED = 5, TYPE_BYTE = 6 };

static uint16_t attr_of_type(int64_t t) {
    switch (t) {
    case TYPE_NORMAL: return MU_TOKEN_NORMAL;
    case TYPE_UNKNOWN: return MU_TOKEN_UNKNOWN;
    case TYPE_CONTROL: return MU_TOKEN_CONTROL;
    case TYPE_USER_DEFINED: return MU_TOKEN_USER_DEFINED;
    case TYPE_UNUSED: return MU_TOKEN_UNUSED;
    case TYPE_BYTE: return MU_TOKEN_BYTE;
    default: return MU_TOKEN_UNDEFINED;
    }
}

static bool text_is(const struct mu_vocab *v, int32_t id, const char *s) {
    size_t n = strlen(s);
    return v->text_len[id] == n && memcmp(v->text_arena + v->text_off[id], s, n) == 0;
}

/* Every text llama.cpp recognises starts with one of these: a cheap
 * filter before comparing 200,000 tokens with the lists. */
static bool may_be_listed(const struct mu_vocab *v, int32_t id) {
    if (v->text_len[id] < 3) return false;
    char c = v->text_arena[v->text_off[id]];
    return c == '<' || c == '[' || c == '_';
}

static bool text_in(const struct mu_vocab *v, int32_t id, const char *const *list) {
    if (!may_be_listed(v, id)) return false;
    for (; *list; list++)
        if (text_is(v, id, *list)) return true;
    return false;
}

/* Texts llama.cpp treats as end of generation. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[", NULL};
/* Texts llama.cpp takes as the EOT token when the file names none. */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>", NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
/* gpt-oss's channel tokens, always rendered (llama.cpp re-types them). */
static const char *const always_visible_texts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};

/* Reads a special id. Absent: *id unchanged. -1 / all-ones (how converters
 * write "none"): unchanged, as llama.cpp keeps its default. Otherwise the
 * id must be a token. */
static int read_special(const gguf_file *f, const char *key, int n_tokens, int32_t *id) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    int64_t val;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        if (kv->v.u64 == UINT32_MAX || kv->v.u64 == UINT64_MAX) return 0;
        val = kv->v.u64 > INT64_MAX ? INT64_MAX : (int64_t)kv->v.u64;
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        if (kv->v.i64 < 0) return 0;
        val = kv->v.i64;
        break;
    default: return mu_fail(MUSER_EFORMAT, "metadata '%s' must be an integer token id", key);
    }
    if (val >= n_tokens)
        return mu_fail(MUSER_EFORMAT, "metadata '%s' = %lld is not a token id (the vocabulary has %d tokens)", key,
                       (long long)val, n_tokens);
    *id = (int32_t)val;
    return 0;
}

static int read_flag(const gguf_file *f, const char *key, bool *flag) {
    bool b;
    int rc = gguf_get_bool(f, key, &b);
    if (rc < 0) return rc;
    if (rc == 1) *flag = b;
    return 0;
}

static int add_eog(struct mu_vocab *v, int32_t id) {
    if (id < 0) return 0;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return 0;
    int32_t *e = realloc(v->eog, (size_t)(v->n_eog + 1) * sizeof *e);
    if (!e) return mu_fail(MUSER_ENOMEM, "out of memory");
    v->eog = e;
    v->eog[v->n_eog++] = id;
    return 0;
}

static void remove_eog(struct mu_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            v->eog[i] = v->eog[--v->n_eog];
            return;
        }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Finds by text the tokens llama.cpp recognises by text, then builds the
 * end-of-generation set (see the top of this file). */
static int fix_specials_by_text(struct mu_vocab *v, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int32_t *slot = NULL;
        if (v->sp.eot < 0 && text_in(v, i, eot_texts)) slot = &v->sp.eot;
        else if (v->sp.eom < 0 && text_in(v, i, eom_texts)) slot = &v->sp.eom;
        else if (fim_pad < 0 && text_in(v, i, fim_pad_texts)) slot = &fim_pad;
        else if (fim_rep < 0 && text_in(v, i, fim_rep_texts)) slot = &fim_rep;
        else if (fim_sep < 0 && text_in(v, i, fim_sep_texts)) slot = &fim_sep;
        if (slot) {
            *slot = i;
            v->attr[i] |= MU_TOKEN_CONTROL;
        }
    }
    int rc = add_eog(v, fim_pad);
    if (!rc) rc = add_eog(v, fim_rep);
    if (!rc) rc = add_eog(v, fim_sep);
    for (int32_t i = 0; i < v->n_tokens && !rc; i++)
        if (text_in(v, i, eog_texts)) {
            rc = add_eog(v, i);
            v->attr[i] |= MU_TOKEN_CONTROL;
        }
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (text_in(v, i, always_visible_texts)) v->attr[i] = MU_TOKEN_USER_DEFINED;
    if (!rc) rc = add_eog(v, v->sp.eos);
    if (!rc) rc = add_eog(v, v->sp.eot);
    if (rc) return rc;

    /* o200k_harmony / solar-open: with <|return|> and <|call|> (or <|calls|>
     * and <|flush|>), <|end|> ends a message, not the generation. */
    bool has_return = false, has_call = false, has_flush = false;
    int32_t end_id = -1;
    for (int i = 0; i < v->n_eog; i++) {
        int32_t id = v->eog[i];
        if (text_is(v, id, "<|return|>")) has_return = true;
        else if (text_is(v, id, "<|call|>") || text_is(v, id, "<|calls|>")) has_call = true;
        else if (text_is(v, id, "<|flush|>")) has_flush = true;
        else if (text_is(v, id, "<|end|>")) end_id = id;
    }
    if (end_id >= 0 && has_call && (has_return || has_flush)) {
        remove_eog(v, end_id);
        v->attr[end_id] = MU_TOKEN_USER_DEFINED;
    }
    /* Gemma 4: with <|tool_response>, </s> is an ordinary token. */
    int32_t s_id = -1;
    bool has_tool_response = false;
    for (int i = 0; i < v->n_eog; i++) {
        if (text_is(v, v->eog[i], "<|tool_response>")) has_tool_response = true;
        else if (text_is(v, v->eog[i], "</s>")) s_id = v->eog[i];
    }
    if (has_tool_response && s_id >= 0) {
        remove_eog(v, s_id);
        v->attr[s_id] = MU_TOKEN_NORMAL;
    }
    if (v->n_eog) qsort(v->eog, (size_t)v->n_eog, sizeof *v->eog, cmp_i32); /* eog is NULL when empty */
    return 0;
}

/* Phi-3 (by general.name, as llama.cpp decides): special tokens swallow
 * whitespace on their right, except <unk>, <s> and <|endoftext|>. */
static void apply_phi3_strip(struct mu_vocab *v, const gguf_file *f) {
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name) != 1) return;
    char lower[256];
    size_t n = name.len < sizeof lower - 1 ? name.len : sizeof lower - 1;
    for (size_t i = 0; i < n; i++) {
        char c = name.ptr[i];
        lower[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    lower[n] = 0;
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3")) return;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if ((v->attr[i] & (MU_TOKEN_CONTROL | MU_TOKEN_USER_DEFINED | MU_TOKEN_UNKNOWN)) || text_is(v, i, "</s>"))
            v->attr[i] |= MU_TOKEN_RSTRIP;
        if (text_in(v, i, keep)) v->attr[i] &= (uint16_t)~MU_TOKEN_RSTRIP;
    }
}

/* "<0xHH>" -> HH, or -1. */
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Pieces: what each token detokenizes to when shown (llama.cpp's
 * token_to_piece with special = true). */
static int build_pieces(struct mu_vocab *v) {
    uint64_t total = 0;
    for (int i = 0; i < v->n_tokens; i++) total += v->text_len[i];
    v->piece_arena = malloc(total ? total : 1);
    v->piece_off = malloc((size_t)v->n_tokens * sizeof *v->piece_off);
    v->piece_len = malloc((size_t)v->n_tokens * sizeof *v->piece_len);
    if (!v->piece_arena || !v->piece_off || !v->piece_len) return mu_fail(MUSER_ENOMEM, "out of memory");
    uint64_t o = 0;
    for (int i = 0; i < v->n_tokens; i++) {
        const char *t = v->text_arena + v->text_off[i];
        uint32_t n = v->text_len[i];
        uint16_t a = v->attr[i];
        char *dst = v->piece_arena + o;
        long len = 0;
        int byte;
        if (a & (MU_TOKEN_UNKNOWN | MU_TOKEN_CONTROL | MU_TOKEN_USER_DEFINED)) {
            memcpy(dst, t, n);
            len = n;
        } else if (a & MU_TOKEN_NORMAL) {
            if (v->kind == MU_VOCAB_BPE) {
                len = mu_gpt2_decode(t, n, dst);
                if (len < 0) {
                    /* Outside the byte alphabet: llama.cpp prints a
                     * "[UNK_BYTE_...]" marker; we keep the text. */
                    memcpy(dst, t, n);
                    len = n;
                }
            } else {
                /* "▁" (3 bytes) -> " " (1 byte): never longer. */
                for (uint32_t j = 0; j < n;) {
                    if (j + 3 <= n && memcmp(t + j, "\xE2\x96\x81", 3) == 0) {
                        dst[len++] = ' ';
                        j += 3;
                    } else {
                        dst[len++] = t[j++];
                    }
                }
            }
        } else if (a & MU_TOKEN_BYTE) {
            if ((byte = byte_token_value(t, n)) >= 0) {
                dst[0] = (char)byte;
                len = 1;
            } else {
                memcpy(dst, t, n);
                len = n;
            }
        } /* unused / undefined tokens detokenize to nothing */
        v->piece_off[i] = o;
        v->piece_len[i] = (uint32_t)len;
        o += (uint64_t)len;
    }
    return 0;
}

/* Token texts, attributes and scores; the text -> id map. */
static int load_tokens(struct mu_vocab *v, const gguf_file *f, const gguf_kv *tokens) {
    const int n = v->n_tokens;
    const gguf_kv *types = gguf_find(f, "tokenizer.ggml.token_type");
    const gguf_kv *scores = gguf_find(f, "tokenizer.ggml.scores");
    if (types && (types->type != GGUF_TYPE_ARRAY || types->arr_type == GGUF_TYPE_STRING ||
                  types->arr_type == GGUF_TYPE_ARRAY || types->arr_type == GGUF_TYPE_FLOAT32 ||
                  types->arr_type == GGUF_TYPE_FLOAT64 || types->arr_count < (uint64_t)n))
        return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.token_type must be an integer array with one entry per token");
    if (scores && (scores->type != GGUF_TYPE_ARRAY ||
                   (scores->arr_type != GGUF_TYPE_FLOAT32 && scores->arr_type != GGUF_TYPE_INT32) ||
                   scores->arr_count < (uint64_t)n))
        return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.scores must be a float32 or int32 array with one entry per token");

    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += tokens->arr_strs[i].len;
    if (total >= UINT32_MAX) return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.tokens holds more than 4 GiB of text");
    v->text_arena = malloc(total ? total : 1);
    v->text_off = malloc((size_t)n * sizeof *v->text_off);
    v->text_len = malloc((size_t)n * sizeof *v->text_len);
    v->attr = malloc((size_t)n * sizeof *v->attr);
    v->score = malloc((size_t)n * sizeof *v->score);
    if (v->kind == MU_VOCAB_BPE) v->key_arena = malloc(total ? total : 1);
    if (!v->text_arena || !v->text_off || !v->text_len || !v->attr || !v->score ||
        (v->kind == MU_VOCAB_BPE && !v->key_arena))
        return mu_fail(MUSER_ENOMEM, "out of memory loading %d tokens", n);
    int rc = mu_strmap_init(&v->token_map, (size_t)n);
    if (rc) return rc;

    uint64_t o = 0, ko = 0;
    for (int i = 0; i < n; i++) {
        gguf_str s = tokens->arr_strs[i];
        if (s.len > UINT32_MAX / 2) return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.tokens[%d] is too long", i);
        if (!mu_utf8_valid(s.ptr, s.len))
            return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.tokens[%d] is not valid UTF-8", i);
        memcpy(v->text_arena + o, s.ptr, s.len);
        v->text_off[i] = o;
        v->text_len[i] = (uint32_t)s.len;
        v->attr[i] = types ? attr_of_type(gguf_arr_int(types, (uint64_t)i)) : MU_TOKEN_NORMAL;
        v->score[i] = scores ? (float)gguf_arr_float(scores, (uint64_t)i) : 0.0f;
        if (s.len) {
            /* Empty texts (llama.cpp renames them "[EMPTY_i]") never match. */
            if (v->kind == MU_VOCAB_SPM) {
                rc = mu_strmap_put(&v->token_map, v->text_arena, (uint32_t)o, (uint32_t)s.len, i);
            } else {
                /* BPE texts are looked up as raw bytes; a text outside the
                 * GPT-2 alphabet cannot come out of the byte-level split. */
                long k = mu_gpt2_decode(s.ptr, s.len, v->key_arena + ko);
                if (k > 0) {
                    rc = mu_strmap_put(&v->token_map, v->key_arena, (uint32_t)ko, (uint32_t)k, i);
                    ko += (uint64_t)k;
                }
            }
            if (rc) return rc;
        }
        o += s.len;
    }
    for (int b = 0; b < 256; b++) v->byte_token[b] = -1;
    if (v->kind == MU_VOCAB_SPM) {
        for (int b = 0; b < 256; b++) {
            char hex[7];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            v->byte_token[b] = mu_strmap_get(&v->token_map, v->text_arena, hex, 6);
        }
    }
    return 0;
}

int mu_vocab_load(const gguf_file *f, int n_vocab, struct mu_vocab **out) {
    *out = NULL;
    const gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (rc < 0) return rc;
    if (rc == 0 && !tokens) return 0; /* no tokenizer: ids only */
    if (rc == 0) return mu_fail(MUSER_EFORMAT, "%s: tokenizer.ggml.tokens is present but tokenizer.ggml.model is missing", f->path);
    if (gguf_str_eq(model, "no_vocab") || gguf_str_eq(model, "none")) return 0;

    char model_name[32];
    gguf_str_copy(model, model_name, sizeof model_name);
    mu_vocab_kind kind;
    if (gguf_str_eq(model, "gpt2")) kind = MU_VOCAB_BPE;
    else if (gguf_str_eq(model, "llama")) kind = MU_VOCAB_SPM;
    else
        return mu_fail(MUSER_EUNSUPPORTED,
                       "%s: unknown tokenizer type tokenizer.ggml.model = '%s' (supported: 'gpt2' byte-level BPE, "
                       "'llama' SentencePiece-style)", f->path, model_name);
    if (!tokens) return mu_fail(MUSER_EFORMAT, "%s: tokenizer.ggml.tokens is missing", f->path);
    if (tokens->type != GGUF_TYPE_ARRAY || tokens->arr_type != GGUF_TYPE_STRING)
        return mu_fail(MUSER_EFORMAT, "%s: tokenizer.ggml.tokens must be an array of strings", f->path);
    if (tokens->arr_count == 0 || tokens->arr_count > INT32_MAX / 2)
        return mu_fail(MUSER_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries", f->path,
                       (unsigned long long)tokens->arr_count);
    if (n_vocab > 0 && tokens->arr_count > (uint64_t)n_vocab)
        return mu_fail(MUSER_EFORMAT, "%s: the tokenizer has %llu tokens but the model's embedding has only %d rows",
                       f->path, (unsigned long long)tokens->arr_count, n_vocab);

    struct mu_vocab *v = calloc(1, sizeof *v);
    if (!v) return mu_fail(MUSER_ENOMEM, "out of memory");
    v->kind = kind;
    v->n_tokens = (int)tokens->arr_count;

    /* Defaults by type, as llama.cpp sets them before reading the keys. */
    if (kind == MU_VOCAB_SPM) {
        v->sp = (mu_vocab_specials){.bos = 1, .eos = 2, .eot = -1, .eom = -1, .unk = 0, .pad = -1, .sep = -1};
        v->add_space_prefix = true;
        v->add_bos = true;
    } else {
        gguf_str pre;
        rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre);
        if (rc < 0) goto fail;
        if (rc == 0) {
            mu_warn("%s: tokenizer.ggml.pre is missing: using llama.cpp's 'default' pre-tokenizer. "
                    "TOKENIZATION MAY NOT MATCH THE MODEL'S TRAINING; consider regenerating the file.", f->path);
            snprintf(v->pre_name, sizeof v->pre_name, "default");
        } else {
            gguf_str_copy(pre, v->pre_name, sizeof v->pre_name);
        }
        v->pretok = mu_pretok_find(v->pre_name);
        if (!v->pretok) {
            rc = mu_fail(MUSER_EUNSUPPORTED, "unknown pre-tokenizer tokenizer.ggml.pre = '%s' (supported: %s)",
                         v->pre_name, mu_pretok_known_names());
            goto fail;
        }
        /* llama.cpp's BPE defaults are 11 for both; they rarely matter. */
        v->sp = (mu_vocab_specials){.bos = 11, .eos = 11, .eot = -1, .eom = -1, .unk = -1, .pad = -1, .sep = -1};
        v->ignore_merges = v->pretok->ignore_merges;
        v->add_bos = v->pretok->add_bos_default;
    }
    if (v->sp.bos >= v->n_tokens) v->sp.bos = -1;
    if (v->sp.eos >= v->n_tokens) v->sp.eos = -1;
    if (v->sp.unk >= v->n_tokens) v->sp.unk = -1;

    if ((rc = load_tokens(v, f, tokens))) goto fail;
    if (kind == MU_VOCAB_BPE) {
        const gguf_kv *merges = gguf_find(f, "tokenizer.ggml.merges");
        if (!merges) {
            rc = mu_fail(MUSER_EFORMAT, "byte-level BPE vocabulary without tokenizer.ggml.merges");
            goto fail;
        }
        if ((rc = mu_bpe_load_merges(v, merges))) goto fail;
    }

    int32_t fim_pad = -1, fim_rep = -1, fim_sep = -1;
    if ((rc = read_special(f, "tokenizer.ggml.bos_token_id", v->n_tokens, &v->sp.bos)) ||
        (rc = read_special(f, "tokenizer.ggml.eos_token_id", v->n_tokens, &v->sp.eos)) ||
        (rc = read_special(f, "tokenizer.ggml.eot_token_id", v->n_tokens, &v->sp.eot)) ||
        (rc = read_special(f, "tokenizer.ggml.eom_token_id", v->n_tokens, &v->sp.eom)) ||
        (rc = read_special(f, "tokenizer.ggml.unknown_token_id", v->n_tokens, &v->sp.unk)) ||
        (rc = read_special(f, "tokenizer.ggml.seperator_token_id", v->n_tokens, &v->sp.sep)) ||
        (rc = read_special(f, "tokenizer.ggml.padding_token_id", v->n_tokens, &v->sp.pad)) ||
        (rc = read_special(f, "tokenizer.ggml.fim_pad_token_id", v->n_tokens, &fim_pad)) ||
        (rc = read_special(f, "tokenizer.ggml.fim_rep_token_id", v->n_tokens, &fim_rep)) ||
        (rc = read_special(f, "tokenizer.ggml.fim_sep_token_id", v->n_tokens, &fim_sep)) ||
        (rc = read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos)) ||
        (rc = read_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos)) ||
        (rc = read_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix)))
        goto fail;
    if ((rc = fix_specials_by_text(v, fim_pad, fim_rep, fim_sep))) goto fail;
    apply_phi3_strip(v, f);
    if ((rc = build_pieces(v)) || (rc = mu_special_build(v))) goto fail;
    if (kind == MU_VOCAB_BPE && (rc = mu_pretok_compile(v))) goto fail;
    *out = v;
    return 0;
fail:
    mu_vocab_free(v);
    return mu_fail_context(rc, "%s: loading the tokenizer: ", f->path);
}

void mu_vocab_free(struct mu_vocab *v) {
    if (!v) return;
    mu_pretok_release(v);
    mu_strmap_free(&v->token_map);
    mu_pairmap_free(&v->merges);
    free(v->byte_merge);
    free(v->text_arena);
    free(v->text_off);
    free(v->text_len);
    free(v->key_arena);
    free(v->piece_arena);
    free(v->piece_off);
    free(v->piece_len);
    free(v->attr);
    free(v->score);
    free(v->trie);
    free(v->special_order);
    free(v->eog);
    free(v);
}

/* ---- accessors ----------------------------------------------------------- */

int mu_vocab_n_tokens(const struct mu_vocab *v) { return v->n_tokens; }
mu_vocab_kind mu_vocab_get_kind(const struct mu_vocab *v) { return v->kind; }
const char *mu_vocab_pre_name(const struct mu_vocab *v) { return v->pre_name; }
const mu_vocab_specials *mu_vocab_get_specials(const struct mu_vocab *v) { return &v->sp; }
bool mu_vocab_get_add_bos(const struct mu_vocab *v) { return v->add_bos; }
bool mu_vocab_get_add_eos(const struct mu_vocab *v) { return v->add_eos; }
bool mu_vocab_get_add_space_prefix(const struct mu_vocab *v) { return v->add_space_prefix; }

bool mu_vocab_is_eog(const struct mu_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return true;
    return false;
}

int mu_vocab_eog_ids(const struct mu_vocab *v, const int32_t **ids) {
    *ids = v->eog;
    return v->n_eog;
}

uint32_t mu_vocab_attr(const struct mu_vocab *v, int32_t id) {
    return (id >= 0 && id < v->n_tokens) ? v->attr[id] : 0;
}

const char *mu_vocab_text(const struct mu_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_tokens) {
        *len = 0;
        return NULL;
    }
    *len = v->text_len[id];
    return v->text_arena + v->text_off[id];
}

int32_t mu_vocab_find_text(const struct mu_vocab *v, const char *s, size_t n) {
    for (int32_t i = v->n_tokens - 1; i >= 0; i--) /* the last id wins, like the lookup maps */
        if (v->text_len[i] == n && memcmp(v->text_arena + v->text_off[i], s, n) == 0) return i;
    return -1;
}

int mu_vocab_piece(const struct mu_vocab *v, int32_t id, bool show_special, const char **bytes) {
    if (id < 0 || id >= v->n_tokens) {
        *bytes = NULL;
        return -1;
    }
    *bytes = v->piece_arena + v->piece_off[id];
    if (!show_special && (v->attr[id] & (MU_TOKEN_UNKNOWN | MU_TOKEN_CONTROL))) return 0;
    return (int)v->piece_len[id];
}
