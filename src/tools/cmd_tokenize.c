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

#include "tools/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser tokenize -m MODEL [--parse-special] [--bos] (-p TEXT | --file INP) [--ids-only]\n"
            "\n"
            "  -m, --model FILE     a GGUF with tokenizer metadata (weights are not loaded)\n"
            "  -p, --prompt TEXT    tokenize TEXT; prints one line of space-separated ids\n"
            "  -f, --file INP       test vectors: strings joined by a line \"__ggml_vocab_test__\";\n"
            "                       prints one line of ids per string (llama.cpp .out format)\n"
            "      --parse-special  control tokens written in the text (e.g. <|eot|>) become their ids\n"
            "      --bos            add the BOS token first (the file's add_bos_token is not applied)\n"
            "      --ids-only       -p: print only the ids (no per-token listing on stderr)\n");
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_value) {
            model_path = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_value) {
            prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_value) {
            file = argv[++i];
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = true;
        } else if (!strcmp(a, "--bos")) {
            bos = true;
        } else if (!strcmp(a, "--ids-only")) {
            ids_only = true;
        } else {
            bool takes_value = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-p") || !strcmp(a, "--prompt") ||
                               !strcmp(a, "-f") || !strcmp(a, "--file");
            fprintf(stderr, "muser tokenize: %s '%s'\n\n", takes_value ? "missing value for" : "unknown argument", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || (!prompt == !file)) {
        fprintf(stderr, "muser tokenize: %s\n\n", !model_path ? "-m MODEL is required" : "give exactly one of -p TEXT and --file INP");
        usage(stderr);
        return 2;
    }

    muser_model *m = NULL;
    if (muser_model_load_vocab(model_path, &m) != 0) {
        fprintf(stderr, "muser tokenize: %s\n", muser_last_error());
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
                fprintf(stderr, "%d tokens:\n", n);
                for (int i = 0; i < n; i++) print_piece(m, ids[i]);
            }
        }
    } else {
        size_t len;
        char *text = read_all(file, &len);
        if (!text) {
            fprintf(stderr, "muser tokenize: cannot read '%s'\n", file);
            rc = 1;
        }
        /* llama.cpp's test-tokenizer-0 split: a final separator ends the
         * list, text after the last separator is one more string. */
        static const char sep[] = "\n__ggml_vocab_test__\n";
        const size_t sep_len = sizeof sep - 1;
        for (size_t pos = 0; text && pos < len && !rc;) {
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
