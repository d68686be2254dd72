/* fuzz_request.c — libFuzzer target for the server's request parser:
 * arbitrary bytes as a chat or completion body (the first byte picks which,
 * and whether test hooks are on). Parsing must fail cleanly or give a
 * request whose prompt tokenizes with the nano vocabulary; errors must
 * carry a 4xx/5xx status and a message; nothing may leak or overrun. The
 * vocabulary path is MUSER_FUZZ_VOCAB (environment), else the build's
 * tests/data/vocab/nano-vocab.gguf. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request.h"
#include "serve/response.h"

#include "fuzz_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    srv_parse_opts o = {.chat_format = true, .test_hooks = data[0] & 2, .current_date = "2026-01-01"};
    o.defaults = muser_sampler_default_params(model);
    size_t len = size - 1;
    char *body = malloc(len ? len : 1); /* exact size, so overreads are caught */
    if (!body) return 0;
    memcpy(body, data + 1, len);
    srv_request r;
    srv_error e;
    int rc = data[0] & 1 ? srv_parse_completion(body, len, &o, &r, &e) : srv_parse_chat(body, len, &o, &r, &e);
    if (rc == 0) {
        muser_token *t = NULL;
        int n = 0;
        if (srv_request_tokenize(model, &r, 4096, &t, &n, &e) == 0) {
            if (n <= 0 || n >= 4096) abort();
            free(t);
        }
        srv_output out;
        if (srv_output_init(&out, &r, "id", "m", 0) == 0) {
            mu_buf b = {0};
            srv_output_push(&out, r.prompt_text ? r.prompt_text : "x", &b);
            srv_output_finish(&out, SRV_FINISH_STOP, 1, 0, 1, &b);
            mu_buf_free(&b);
        }
        srv_output_free(&out);
        srv_request_free(&r);
    } else if (e.status < 400 || e.status > 599 || !e.message[0]) {
        abort();
    }
    free(body);
    return 0;
}
