/* muser.h — the narrow public API of Muser.
 *
 * A model is immutable once loaded (weights are views into the mapped
 * file). A session is one timeline: it owns the KV cache, the position and
 * the last logits. The CLI and the HTTP server use only this header.
 *
 * Errors: functions return MUSER_OK (0) or a negative muser_status; the
 * message of the last failure on the calling thread is muser_last_error().
 */
#ifndef MUSER_H
#define MUSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUSER_VERSION "0.1.0"

typedef enum muser_status {
    MUSER_OK = 0,
    MUSER_EINVAL = -1,       /* bad argument or bad input data            */
    MUSER_EIO = -2,          /* open/read/write/mmap failed               */
    MUSER_EFORMAT = -3,      /* malformed or hostile file                 */
    MUSER_ENOMEM = -4,       /* allocation failed                         */
    MUSER_EUNSUPPORTED = -5, /* valid but not supported (type, arch, ...) */
    MUSER_ERANGE = -6,       /* token id, position or size out of range   */
    MUSER_ECONTEXT = -7,     /* the context window is full                */
    MUSER_EBACKEND = -8,     /* backend unavailable or failed (GPU, ...)  */
} muser_status;

/* Message describing the last error on this thread ("" if none). */
const char *muser_last_error(void);

typedef int32_t muser_token;

typedef struct muser_model muser_model;
typedef struct muser_session muser_session;

/* ---- models ------------------------------------------------------------ */

typedef struct muser_model_info {
    const char *arch;        /* "muse-glimmer" or "llama"                    */
    const char *name;        /* general.name, or ""                          */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int n_ctx_train;         /* context_length from the file                */
    int sliding_window;      /* 0 when the model has no sliding layers       */
    uint64_t file_bytes;
    uint64_t weight_bytes_per_token; /* bytes of weights read per decoded token */
} muser_model_info;

int muser_model_load(const char *path, muser_model **out);
/* Loads only the tokenizer of any GGUF (a vocab-only file, or a full model
 * whose weights are then not bound). Such a model serves the text
 * functions below; muser_session_new refuses it. Fails if the file has no
 * tokenizer. */
int muser_model_load_vocab(const char *path, muser_model **out);
void muser_model_free(muser_model *model);
void muser_model_get_info(const muser_model *model, muser_model_info *info);

/* ---- sessions ------------------------------------------------------------ */

typedef enum muser_backend {
    MUSER_BACKEND_AUTO = 0, /* cuda when usable, else cpu (with a notice) */
    MUSER_BACKEND_CPU = 1,
    MUSER_BACKEND_REF = 2,  /* float64 reference: slow, the oracle */
    MUSER_BACKEND_CUDA = 3,
} muser_backend;

/* A lane is a named numerical contract (DESIGN.md). */
typedef enum muser_lane {
    MUSER_LANE_EXACT = 0, /* f32 activations into every dot product   */
    MUSER_LANE_FAST = 1,  /* activations quantized to int8 blocks     */
    MUSER_LANE_AUTO = 2,  /* the backend's default: fast on CUDA (as
                             llama.cpp's CUDA build quantizes activations),
                             exact on the CPU and the reference           */
} muser_lane;

typedef enum muser_kv_type {
    MUSER_KV_F16 = 0,
    MUSER_KV_F32 = 1,
} muser_kv_type;

typedef struct muser_session_params {
    int n_ctx;             /* 0: min(model's n_ctx_train, 4096)             */
    int n_batch;           /* prefill chunk; 0: 512                          */
    int n_threads;         /* 0: number of online cores                      */
    muser_backend backend;
    muser_lane lane;
    muser_kv_type kv_type;
    int gpus;              /* CUDA: number of GPUs (0 or 1: one)             */
    uint64_t gpu_mem;      /* CUDA: bytes Muser may allocate on each GPU, for
                              all its sessions together (0: what the GPU
                              has free)                                     */
    int gpu_layers;        /* CUDA (llama.cpp's -ngl): the first gpu_layers
                              layers run on the GPU, the rest and the output
                              head on the CPU, in the same token step; 0:
                              every layer on the CPU; n_layer or more, or
                              MUSER_GPU_LAYERS_ALL (the default): all of
                              them and the head on the GPU;
                              MUSER_GPU_LAYERS_AUTO: the most that fit
                              under gpu_mem                                  */
} muser_session_params;

#define MUSER_GPU_LAYERS_ALL (-1)
#define MUSER_GPU_LAYERS_AUTO (-2)

muser_session_params muser_session_default_params(void);

int muser_session_new(const muser_model *model, const muser_session_params *params,
                      muser_session **out);
void muser_session_free(muser_session *s);

/* Which backend the session actually runs on (AUTO resolved). */
muser_backend muser_session_backend(const muser_session *s);
/* Which lane the session computes in (AUTO resolved). */
muser_lane muser_session_lane(const muser_session *s);
/* One line about the backend's device (CUDA: the GPU, its route set:
 * Hopper's or the portable paths, the GPU memory the session holds, the
 * settings), or NULL for backends that say nothing more. */
const char *muser_session_describe(const muser_session *s);

/* Feed n tokens at the current position. With all_logits, logits for every
 * fed position are kept (muser_session_logits_at); otherwise only the last.
 * Fails with MUSER_ECONTEXT if the tokens do not fit, MUSER_ERANGE for an
 * id outside the vocabulary; the session is unchanged on failure. */
int muser_session_feed(muser_session *s, const muser_token *tokens, int n, bool all_logits);

/* Logits of the last fed position [n_vocab], or NULL before any feed. */
const float *muser_session_logits(const muser_session *s);
/* Logits of the i-th token of the last feed (all_logits feeds only). */
const float *muser_session_logits_at(const muser_session *s, int i);

int muser_session_pos(const muser_session *s);    /* tokens in the timeline */
int muser_session_n_ctx(const muser_session *s);
void muser_session_reset(muser_session *s);
/* Drop every position >= pos (pos <= current). Fails (MUSER_EUNSUPPORTED)
 * when a sliding ring no longer holds what pos needs and no checkpoint
 * covers it; the session is then unchanged. */
int muser_session_truncate(muser_session *s, int pos);

/* Makes the session hold exactly tokens[0..n): keeps the longest common
 * prefix of what it holds (truncating the rest; a sliding ring that cannot
 * rewind falls back to a full re-feed), then feeds the remaining tokens
 * with last-position logits. *reused (may be NULL) receives the number of
 * tokens kept. Prompt caching for chat and the server. */
int muser_session_sync(muser_session *s, const muser_token *tokens, int n, int *reused);
/* Prompt caching in steps, for a caller that interleaves a long prefill
 * with other work (the server): muser_session_sync_begin rewinds the
 * session to the longest prefix of tokens[0..n) it can keep, exactly as
 * muser_session_sync does, and stores that count in *kept. When *kept == n
 * the last prompt token's logits are already there; otherwise the caller
 * feeds tokens[*kept..n) with muser_session_feed, in chunks of its
 * choosing, and then calls muser_session_sync_end (which takes the ring
 * checkpoint that muser_session_sync would take). */
int muser_session_sync_begin(muser_session *s, const muser_token *tokens, int n, int *kept);
void muser_session_sync_end(muser_session *s);
/* Ring checkpoints: sliding-window rings forget old positions, so rewinding
 * to an earlier prompt would need a full re-prefill. With max > 0 the
 * session keeps up to max checkpoints (a copy of the rings taken after each
 * muser_session_sync prompt, most recent first) and sync restores the
 * newest one that the new prompt extends. Default 0 (off). */
void muser_session_set_checkpoints(muser_session *s, int max);

/* Decodes one token for each of n distinct sessions of one model, as one
 * step of n concurrent timelines: tokens[i] is fed to sessions[i] at its
 * own position, and muser_session_logits(sessions[i]) becomes that
 * token's logits. Backends that can (the CPU) run the n tokens through the
 * weights as one n-row matmul, so a step costs about one pass over the
 * weights instead of n; the result equals n separate one-token feeds.
 * Fails before changing anything (MUSER_EINVAL, MUSER_ERANGE,
 * MUSER_ECONTEXT) when a session is repeated, on another model, full, or
 * given an id outside the vocabulary; if the backend fails midway, every
 * session is put back at its position (its logits are then gone). */
int muser_batch_decode(muser_session *const *sessions, const muser_token *tokens, int n);

/* muser_batch_decode, with each session's next token chosen greedily
 * (next[i]: the first largest logit, NaN never chosen) where the logits
 * are: a GPU copies n token ids back instead of n rows of logits. What
 * muser_session_logits gives afterwards is not promised. next must not
 * alias tokens. */
int muser_batch_decode_greedy(muser_session *const *sessions, const muser_token *tokens, int n, muser_token *next);

/* A session's logit bias: values[j] added to the logit of ids[j] (in that
 * order) before choosing. */
typedef struct muser_logit_bias {
    const muser_token *ids;
    const float *values;
    int n;
} muser_logit_bias;
#define MUSER_TOP_MAX 256 /* the most top logits muser_batch_decode_top hands back a row */

/* muser_batch_decode, then for each session the k (1 to MUSER_TOP_MAX)
 * highest-ranked of its logits after adding bias[i] (bias NULL: none) --
 * ranked by value, then lower id, NaN as -inf -- as top_logits[i * k + j]
 * and top_ids[i * k + j], in no particular order: what
 * muser_sampler_sample_top takes. A GPU finds them where the logits are
 * and copies n x k pairs back instead of n rows of logits. What
 * muser_session_logits gives afterwards is not promised. MUSER_ERANGE
 * for a bias on an id outside the vocabulary or of a non-finite value. */
int muser_batch_decode_top(muser_session *const *sessions, const muser_token *tokens, int n,
                           const muser_logit_bias *bias, int k, float *top_logits, muser_token *top_ids);

/* The tokens the session holds (muser_session_pos of them). */
const muser_token *muser_session_tokens(const muser_session *s);

/* Bytes the next decoded token reads: every weight byte plus the KV rows
 * visible at the current position (the session's cache type). */
uint64_t muser_session_bytes_per_token(const muser_session *s);

/* A string metadata value of the model file (e.g. "tokenizer.chat_template");
 * NULL when absent or not a string. The pointer stays valid with the model;
 * *len receives the length (the value is not NUL-terminated). */
const char *muser_model_meta_str(const muser_model *model, const char *key, size_t *len);

/* ---- speculative decoding with a DFlash drafter ---------------------------
 * A drafter (llama.cpp's `dflash` GGUF architecture, such as Meta's
 * Muse-Glimmer-30B-assistant) guesses a block of tokens from the target's
 * hidden states; the target checks the whole block in one multi-row step
 * and keeps the longest prefix it agrees with plus its own next token. The
 * output is exactly the target's: token for token at temperature 0, and
 * the sampler's distribution otherwise (speculative rejection sampling).
 * docs/dflash.md has the format and the design. */
typedef struct muser_drafter muser_drafter;
typedef struct muser_sampler muser_sampler; /* the sampler, below */

/* Loads a drafter for target and checks that it fits (hidden size,
 * vocabulary, target layers in range, block size, mask token); variants
 * Muser does not run (DSpark heads, other backbones) are refused by name. */
int muser_drafter_load(const char *path, const muser_model *target, muser_drafter **out);
void muser_drafter_free(muser_drafter *d);

typedef struct muser_drafter_info {
    int n_layer, n_embd, block_size, n_target_layers;
    const int *target_layers; /* [n_target_layers] target layer-input indices */
    muser_token mask_token;
    int sliding_window;       /* 0: none                                      */
} muser_drafter_info;
void muser_drafter_get_info(const muser_drafter *d, muser_drafter_info *info);

/* Attaches d (it must outlive the session) to an empty session; draft_max
 * tokens are drafted per step (1 .. block_size - 1; 0: block_size - 1).
 * From then on every feed also captures the target's hidden states at the
 * drafter's layers and fills the drafter's cache with them. Fails on a
 * backend that cannot run drafters (CUDA for now) with a message saying so. */
int muser_session_set_drafter(muser_session *s, const muser_drafter *d, int draft_max);

/* One speculative step. `last` is the token chosen after the session's last
 * position (shown already, not yet fed). Drafts up to draft_max tokens (fewer
 * near the end of the context or of max_new), feeds [last, drafts] as one
 * chunk, and commits `last`, the drafts the target agrees with and the
 * target's own next token, which ends the step: out[0 .. *n_out) receives
 * the accepted drafts then that token (the caller's next `last`), at most
 * max_new (>= 1) tokens. smp chooses the target's tokens as
 * muser_sampler_sample would (NULL: greedy); rejected positions leave no
 * trace in the KV cache. Without a drafter it is a plain one-token step. */
int muser_session_spec_step(muser_session *s, muser_token last, muser_sampler *smp, int max_new, muser_token *out,
                            int *n_out);

typedef struct muser_spec_stats {
    uint64_t steps;         /* verify steps with at least one drafted token   */
    uint64_t drafted;       /* tokens the drafter proposed                     */
    uint64_t accepted;      /* of them, the tokens the target agreed with      */
    double draft_seconds;   /* in the drafter (its block pass and injections)  */
    double verify_seconds;  /* in the target's verify steps                    */
} muser_spec_stats;
/* Totals since the drafter was attached; the mean accepted length of a
 * step is (accepted + steps) / steps (the target's own token included). */
void muser_session_spec_stats(const muser_session *s, muser_spec_stats *st);

/* ---- text ------------------------------------------------------------------ */

/* Tokenize UTF-8 text. add_bos follows the caller (use muser_vocab_add_bos
 * for the file's choice). Returns the number of tokens, or a negative
 * status; if it exceeds cap, nothing beyond cap is written and the full
 * count is returned so the caller can retry. parse_special: control tokens
 * written in the text (e.g. "<|eot|>") become their ids; user-defined
 * tokens (Muse Glimmer's <|start|>, <|message|>) are matched either way.
 * Any bytes are accepted: with byte-level BPE, ill-formed UTF-8 comes out
 * as the byte tokens of those bytes (so decoding gives back the input; a
 * byte the vocabulary has no token for is dropped, as llama.cpp drops it);
 * with SentencePiece vocabularies, as <0xXX> byte tokens. Thread-safe: a
 * model's tokenizer is read-only. */
int muser_tokenize(const muser_model *model, const char *text, size_t len, bool add_bos,
                   bool parse_special, muser_token *out, int cap);

/* Vocabulary queries; without a tokenizer: false, -1, false, 0. The
 * end-of-generation set is llama.cpp's (EOS, EOT, texts such as
 * <|end_of_text|> or <|eot_id|>) except that tokenizer.ggml.eom_token_id
 * alone does not make a token final: Muse Glimmer stops on {200001,
 * 200008}, never on <|eom|> 200007. */
bool muser_vocab_add_bos(const muser_model *model);
muser_token muser_vocab_bos(const muser_model *model);
muser_token muser_vocab_eos(const muser_model *model);
bool muser_vocab_is_eog(const muser_model *model, muser_token t);
int muser_vocab_size(const muser_model *model);

/* The raw bytes a token stands for (control tokens: their text when
 * show_special, else nothing; user-defined tokens: always their text).
 * Returns the byte count; the bytes are written only when it is <= cap.
 * A piece may be part of a UTF-8 sequence: use the detokenizer for text.
 * No leading-space handling (see muser_detok_*). */
int muser_token_to_bytes(const muser_model *model, muser_token t, bool show_special,
                         char *buf, int cap);

/* Streaming detokenizer: emits only complete UTF-8 sequences, so its
 * output is always valid UTF-8. An incomplete sequence at the end is held
 * back until later tokens complete it; bytes that cannot become valid come
 * out at once as U+FFFD (one per maximal ill-formed subpart). For
 * SentencePiece vocabularies with add_space_prefix, the first text of the
 * stream loses one leading space (the tokenizer's prefix), BOS or not. A
 * detokenizer starts a text: to continue one, push its earlier tokens.
 * NULL if the model has no tokenizer. */
typedef struct muser_detok muser_detok;
muser_detok *muser_detok_new(const muser_model *model, bool show_special);
/* Appends the token; returns a NUL-terminated string of newly completed
 * text (valid until the next call), possibly "" (text holding a NUL byte
 * ends there early). An id outside the vocabulary adds nothing (and sets
 * muser_last_error). */
const char *muser_detok_push(muser_detok *d, muser_token t);
/* Whatever is left (an incomplete trailing sequence becomes U+FFFD). */
const char *muser_detok_flush(muser_detok *d);
void muser_detok_free(muser_detok *d);

/* ---- sampling -------------------------------------------------------------- */

typedef struct muser_sampler_params {
    float temperature;       /* <= 0: greedy                               */
    int top_k;               /* <= 0: off                                  */
    float top_p;             /* >= 1: off                                  */
    float min_p;             /* <= 0: off                                  */
    float repeat_penalty;    /* 1: off                                     */
    int repeat_last_n;       /* window for the penalties                   */
    float presence_penalty;  /* 0: off                                     */
    float frequency_penalty; /* 0: off                                     */
    uint64_t seed;
} muser_sampler_params;

typedef struct muser_sampler muser_sampler;
/* Defaults: the model's known card (Muse Glimmer: T 1.0, top-p 0.95,
 * top-k 64), else T 0.8, top-p 0.95, top-k 40. model may be NULL. */
muser_sampler_params muser_sampler_default_params(const muser_model *model);
/* A fresh random seed from the system's entropy, below 2^32 (short to print
 * and retype): for runs that differ each time yet can be repeated. */
uint64_t muser_seed_random(void);
muser_sampler *muser_sampler_new(const muser_sampler_params *p, int n_vocab);
void muser_sampler_free(muser_sampler *s);
/* Chooses a token from logits (not modified) and remembers it for the
 * penalties. */
muser_token muser_sampler_sample(muser_sampler *s, const float *logits);
/* How many of the logits' top candidates (ranked by value, then lower id;
 * NaN as -inf) the sampler's next draw depends on, when that is all it
 * depends on (no penalties; greedy: 1, else top_k below the vocabulary);
 * else 0, and it needs the full logits. */
int muser_sampler_top_candidates(const muser_sampler *s);
/* muser_sampler_sample from only the n highest-ranked logits (values and
 * ids, in any order), n at least muser_sampler_top_candidates: the same
 * token as from the full logits, the same random stream. -1 (and
 * muser_last_error) when n is too few. */
muser_token muser_sampler_sample_top(muser_sampler *s, const float *top_logits, const muser_token *top_ids, int n);
void muser_sampler_accept(muser_sampler *s, muser_token t); /* e.g. prompt tokens */
void muser_sampler_reset(muser_sampler *s);

/* ---- chat format ------------------------------------------------------------ */

/* Options of the Muse Glimmer chat template. Zeroed fields take the
 * template's defaults. */
typedef struct muser_chat_options {
    bool add_generation_prompt;      /* end with "<|start|>assistant"             */
    const char *reasoning_strength;  /* low|medium|high|xhigh; NULL or "": high   */
    const char *current_date;        /* YYYY-MM-DD; NULL or "": today (local)     */
    const char *knowledge_cutoff;    /* NULL or "": 2026-01-04                    */
    const char *tool_namespace_descriptions; /* JSON object text, or NULL        */
    const char *bos_token;           /* NULL: "<|begin_of_text|>"                  */
} muser_chat_options;

/* Renders a conversation into the exact prompt text of the Muse Glimmer
 * template. messages_json: an OpenAI-style messages array (or a request
 * object with "messages" and optionally "tools"). tools_json: an OpenAI
 * tools array, or NULL. opt may be NULL. *out is malloc'd (free()).
 * tool_call.function.arguments may be an object or a JSON string holding
 * an object (the template itself only accepts objects). Bad input gives
 * MUSER_EINVAL with a message in muser_last_error(). */
int muser_chat_render(const char *messages_json, const char *tools_json,
                      const muser_chat_options *opt, char **out);

/* Output parsing: the generated text after the prompt's `<|start|>assistant`
 * split into reasoning (to=self), the visible answer (to=user) and ATEM
 * tool calls. Fed incrementally; tags never reach the answer text. */
typedef struct muser_chat_tool_call {
    char *name;
    char *arguments; /* a JSON object, compact; parameters typed by the tool's schema */
    bool complete;   /* false: the output ended inside this call */
} muser_chat_tool_call;

/* What one feed made safe to show. Pointers stay valid until the next call
 * on the parser. Text deltas end on whole UTF-8 sequences (until finish). */
typedef struct muser_chat_delta {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
    const muser_chat_tool_call *calls; /* calls completed by this feed */
    int n_calls;
} muser_chat_delta;

typedef struct muser_chat_result {
    const char *reasoning; /* "" when none */
    const char *content;   /* "" when none */
    const muser_chat_tool_call *calls;
    int n_calls;
    bool truncated; /* the text ended inside a header or a tool call */
} muser_chat_result;

typedef struct muser_chat_parser muser_chat_parser;
/* tools_json: the OpenAI tools array (types the call arguments), or NULL. */
int muser_chat_parser_new(const char *tools_json, muser_chat_parser **out);
int muser_chat_parser_feed(muser_chat_parser *p, const char *text, size_t len, muser_chat_delta *delta);
int muser_chat_parser_finish(muser_chat_parser *p, muser_chat_delta *delta, muser_chat_result *result);
void muser_chat_parser_free(muser_chat_parser *p);

#ifdef __cplusplus
}
#endif
#endif /* MUSER_H */
