/* cmd_tokenize.c — `muser tokenize`: text to token ids.
 *
 *   muser tokenize -m MODEL [--parse-special] [--bos] (-p TEXT | --file INP) [--ids-only]
 *
 * -p prints one line of space-separated ids on stdout (and, unless
 * --ids-only, each token with its text on stderr). --file reads test
 * vectors in llama.cpp's test-tokenizer-0 format (strings joined by
 * "\n__ggml_vocab_test__\n") and prints one line per string in the format
 * of its .out files (each id preceded by a space). Only the tokenizer is
 * loaded, so any GGUF with tokenizer metadata works, weights or not.
 * Exit codes: 0 ok, 1 bad input (file, tokenizer), 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/args.h"
#include "tools/commands.h"
#include "tools/tool_util.h"
#include "util/error.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser tokenize -m MODEL (-p TEXT | -f FILE) [options]\n"
            "Token ids of UTF-8 text, space separated.\n\n"
            "  %-28s a GGUF with tokenizer metadata; weights are not loaded (required)\n"
            "  %-28s tokenize TEXT: one line of ids (the tokens with their text on stderr)\n"
            "  %-28s test vectors: strings joined by a line \"__ggml_vocab_test__\";\n"
            "  %-28s one line of ids per string (llama.cpp's .out format)\n"
            "  %-28s control tokens written in the text (e.g. <|eot|>) become their ids\n"
            "  %-28s (default: they are text)\n"
            "  %-28s add the BOS token first (default: none; add_bos_token is not applied)\n"
            "  %-28s -p: print only the ids, no listing on stderr\n",
            "-m, --model FILE", "-p, --prompt TEXT", "-f, --file FILE", "", "--parse-special", "", "--bos",
            "--ids-only, --ids");
}

/* Tokenizes into *ids (grown as needed); returns the count or < 0. */
static int tokenize(const muser_model *m, const char *text, size_t len, bool bos, bool special, muser_token **ids,
                    int *cap) {
    int n = muser_tokenize(m, text, len, bos, special, *ids, *cap);
    if (n > *cap) {
        muser_token *p = realloc(*ids, (size_t)n * sizeof *p);
        if (!p) return MUSER_ENOMEM;
        *ids = p;
        *cap = n;
        n = muser_tokenize(m, text, len, bos, special, *ids, *cap);
    }
    return n;
}

static void print_piece(const muser_model *m, muser_token t) {
    char buf[256];
    int n = muser_token_to_bytes(m, t, true, buf, sizeof buf);
    fprintf(stderr, "%8d  '", t);
    for (int i = 0; i < n && n <= (int)sizeof buf; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n') fputs("\\n", stderr);
        else if (c == '\t') fputs("\\t", stderr);
        else if (c == '\r') fputs("\\r", stderr);
        else if (c < 0x20 || c == 0x7F) fprintf(stderr, "\\x%02x", c);
        else fputc(c, stderr); /* partial UTF-8 shows as the terminal likes */
    }
    fputs("'\n", stderr);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    bool parse_special = false, bos = false, ids_only = false;
    mu_args a = {argc, 1, argv, "tokenize"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, "-m", "--model")) {
            if (!mu_arg_str(&a, &model_path)) return 2;
        } else if (mu_arg_is(&a, "-p", "--prompt")) {
            if (!mu_arg_str(&a, &prompt)) return 2;
        } else if (mu_arg_is(&a, "-f", "--file")) {
            if (!mu_arg_str(&a, &file)) return 2;
        } else if (mu_arg_is(&a, NULL, "--parse-special")) {
            parse_special = true;
        } else if (mu_arg_is(&a, NULL, "--bos")) {
            bos = true;
        } else if (mu_arg_is(&a, NULL, "--ids-only") || mu_arg_is(&a, NULL, "--ids")) {
            ids_only = true;
        } else {
            mu_arg_unknown(&a);
            return 2;
        }
    }
    if (!mu_arg_require("tokenize", model_path, "-m MODEL")) return 2;
    if (!prompt == !file) {
        fprintf(stderr, "muser tokenize: give the text with -p or with --file, %s\n",
                prompt ? "not both" : "one of them");
        return 2;
    }
    if (prompt && !mu_tool_utf8_ok("tokenize", "the text", prompt, strlen(prompt))) return 1;
    size_t len = 0;
    char *text = file ? mu_tool_read_file(file, &len) : NULL;
    if (file && (!text || !mu_tool_utf8_ok("tokenize", file, text, len))) {
        free(text);
        return 1;
    }

    muser_model *m = NULL;
    if (muser_model_load_vocab(model_path, &m) != 0) {
        fprintf(stderr, "muser tokenize: %s\n", muser_last_error());
        free(text);
        return 1;
    }
    int rc = 0, cap = 256;
    muser_token *ids = malloc((size_t)cap * sizeof *ids);
    if (prompt) {
        int n = tokenize(m, prompt, strlen(prompt), bos, parse_special, &ids, &cap);
        if (n < 0) {
            fprintf(stderr, "muser tokenize: %s\n", muser_last_error());
            rc = 1;
        } else {
            for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
            putchar('\n');
            if (!ids_only) {
                fprintf(stderr, "%d token%s:\n", n, mu_plural_s(n));
                for (int i = 0; i < n; i++) print_piece(m, ids[i]);
            }
        }
    } else {
        /* llama.cpp's test-tokenizer-0 split: a final separator ends the
         * list, text after the last separator is one more string. */
        static const char sep[] = "\n__ggml_vocab_test__\n";
        const size_t sep_len = sizeof sep - 1;
        for (size_t pos = 0; pos < len && !rc;) {
            size_t end = pos;
            while (end < len && !(len - end >= sep_len && !memcmp(text + end, sep, sep_len))) end++;
            int n = tokenize(m, text + pos, end - pos, bos, parse_special, &ids, &cap);
            if (n < 0) {
                fprintf(stderr, "muser tokenize: %s\n", muser_last_error());
                rc = 1;
                break;
            }
            for (int i = 0; i < n; i++) printf(" %d", ids[i]);
            putchar('\n');
            pos = end < len ? end + sep_len : len;
        }
        free(text);
    }
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "muser tokenize: cannot write the output\n");
        rc = 1;
    }
    free(ids);
    muser_model_free(m);
    return rc;
}
