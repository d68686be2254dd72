/* request.h — OpenAI request bodies in, validated generation requests out.
 *
 * The HTTP threads call these: parse (chat_json_parse, so 1.0 stays 1.0 in
 * tool arguments), check every field's type and range, render the chat
 * prompt, tokenize. Every failure fills an srv_error with the HTTP status,
 * OpenAI's error type, the offending parameter and a message that says what
 * to change. Nothing here touches a session: the worker does that.
 */
#ifndef MU_SERVE_REQUEST_H
#define MU_SERVE_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "muser.h"

/* An OpenAI error object {"error": {"message", "type", "param", "code"}}
 * with its HTTP status. */
typedef struct srv_error {
    int status;
    const char *type;  /* "invalid_request_error", "server_error", ...   */
    const char *code;  /* e.g. "context_length_exceeded", or NULL (null) */
    char param[64];    /* "" means null                                   */
    char message[768];
} srv_error;

/* Fills e and returns -1. param and code may be NULL. */
int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A 400 invalid_request_error about param. */
int srv_bad_param(srv_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef enum srv_kind {
    SRV_CHAT = 0,       /* /v1/chat/completions */
    SRV_COMPLETION = 1, /* /v1/completions      */
} srv_kind;

#define SRV_MAX_STOP 16

/* A validated generation request. */
typedef struct srv_request {
    srv_kind kind;
    char *model;         /* the requested model name, or NULL when absent  */
    bool stream, include_usage;
    int max_tokens;      /* -1: until the end of generation or a full context */
    muser_sampler_params sampling;
    bool seed_given;
    char *stop[SRV_MAX_STOP]; /* stop strings (never part of the output)    */
    int n_stop;
    muser_token *bias_ids; /* logit_bias: ids and the values added to their logits */
    float *bias;
    int n_bias;
    char *prompt_text;       /* rendered chat prompt, or the completion prompt text */
    muser_token *prompt_ids; /* a completion prompt given as token ids            */
    int n_prompt_ids;
    char *tools_json;    /* tools array that types tool-call arguments, or NULL */
    char *forced_prefix; /* output forced by tool_choice: appended to the prompt, parsed first */
    char *test_script;   /* test hook (--test-hooks): the output to produce instead of sampling */
} srv_request;

typedef struct srv_parse_opts {
    muser_sampler_params defaults; /* the model's sampling defaults          */
    bool seed_fixed;               /* defaults.seed serves requests without a seed (else random each) */
    bool chat_format;              /* the model speaks the Muse Glimmer chat format */
    bool test_hooks;               /* accept "muser_test_script"              */
    const char *current_date;      /* YYYY-MM-DD for the template; NULL: today */
} srv_parse_opts;

/* Parses a JSON body: valid UTF-8, well-formed, an object. *root must be
 * freed with cJSON_Delete. */
int srv_parse_body(const char *body, size_t len, cJSON **root, srv_error *e);

int srv_parse_chat(const char *body, size_t len, const srv_parse_opts *o, srv_request *r, srv_error *e);
int srv_parse_completion(const char *body, size_t len, const srv_parse_opts *o, srv_request *r, srv_error *e);
void srv_request_free(srv_request *r);

/* The prompt's token ids: the rendered chat prompt (its BOS text parses to
 * BOS) plus the forced prefix, or the completion prompt (with the model's
 * BOS). Fails (400 context_length_exceeded) when it leaves no room in a
 * context of n_ctx tokens for one generated token. *out is malloc'd. */
int srv_request_tokenize(const muser_model *model, const srv_request *r, int n_ctx, muser_token **out, int *n,
                         srv_error *e);

/* Renders the messages of an /apply-template body (also "tools",
 * "reasoning_effort", "chat_template_kwargs"); *prompt is malloc'd. */
int srv_render_messages(const cJSON *root, const srv_parse_opts *o, char **prompt, srv_error *e);

/* Typed field access for the utility endpoints: absent or null leaves *out
 * unchanged and returns 0; a value of the wrong type fails with a 400 that
 * names the field. */
int srv_get_bool(const cJSON *obj, const char *key, bool *out, srv_error *e);
int srv_get_string(const cJSON *obj, const char *key, const char **out, srv_error *e);

#endif
