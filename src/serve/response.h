/* response.h — OpenAI response shapes and the per-job output stream.
 *
 * An srv_output turns the detokenized text of one generation into what the
 * client reads: stop strings are cut (text that could still begin one is
 * held back), chat text goes through the ATEM parser into reasoning,
 * content and tool calls, and the result is written as SSE chunks while
 * streaming or as one JSON body at the end.
 */
#ifndef MU_SERVE_RESPONSE_H
#define MU_SERVE_RESPONSE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "serve/request.h"
#include "util/buf.h"

/* {"error": {"message", "type", "param", "code"}} */
void srv_error_json(mu_buf *b, const srv_error *e);
/* Appends "data: <compact JSON>\n\n" and deletes obj. */
void srv_sse_put(mu_buf *b, cJSON *obj);
/* A random id: prefix + 24 letters and digits. */
void srv_make_id(char *out, size_t cap, const char *prefix);
/* cJSON_PrintUnformatted into b, deleting obj. */
void srv_json_put(mu_buf *b, cJSON *obj);

/* ---- stop strings ------------------------------------------------------------ */

typedef struct srv_stopper {
    char *const *stops;
    int n_stops;
    size_t longest;
    mu_buf held; /* text that may still be the start of a stop string */
    bool matched;
} srv_stopper;

void srv_stopper_init(srv_stopper *st, char *const *stops, int n);
/* Adds text; appends to out what is safe to show. Once a stop string
 * appears, out gets the text before it and matched becomes true; later
 * pushes add nothing. */
void srv_stopper_push(srv_stopper *st, const char *text, size_t len, mu_buf *out);
/* The end of the text: whatever was held back is safe now. */
void srv_stopper_flush(srv_stopper *st, mu_buf *out);
void srv_stopper_free(srv_stopper *st);

/* ---- one generation's output ----------------------------------------------- */

typedef enum srv_finish {
    SRV_FINISH_STOP,   /* end of generation or a stop string  */
    SRV_FINISH_LENGTH, /* max_tokens or a full context        */
} srv_finish;

typedef struct srv_output {
    const srv_request *req;
    const char *id, *model_id;
    int64_t created;
    srv_stopper stopper;
    muser_chat_parser *parser; /* chat only */
    mu_buf text;             /* completions: everything shown (non-streaming) */
    int n_calls_sent;          /* tool calls streamed so far */
    bool role_sent;
} srv_output;

int srv_output_init(srv_output *o, const srv_request *req, const char *id, const char *model_id, int64_t created);
/* Generated text (detokenizer output). Appends SSE events to sse when
 * streaming. Returns true when a stop string ended the output. */
bool srv_output_push(srv_output *o, const char *text, mu_buf *sse);
/* Ends the output: appends the last SSE events (finish_reason, usage,
 * [DONE]) or the whole JSON body to out. */
void srv_output_finish(srv_output *o, srv_finish why, int prompt_tokens, int cached_tokens, int completion_tokens,
                       mu_buf *out);
void srv_output_free(srv_output *o);

#endif
