/* chat.h — the Muse Glimmer chat format: prompt rendering and output parsing.
 *
 * Rendering reproduces shared/spec/muse-glimmer.jinja exactly as Python
 * jinja2 renders it with the HF/llama.cpp `tojson` (json.dumps with
 * ensure_ascii=False, default ", "/": " separators, key order kept), but in
 * plain C. Where the template would raise, we fail with MUSER_EINVAL; the
 * few deliberate extensions are listed at chat_render().
 *
 * Parsing splits generated text (special tokens shown) into reasoning,
 * visible answer and ATEM tool calls, either all at once or incrementally.
 */
#ifndef MU_CHAT_H
#define MU_CHAT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "muser.h"
#include "util/buf.h"

/* ---- JSON with Python semantics ------------------------------------------ */

/* Parses JSON like Python's json.loads: numbers keep their source text (in
 * the cJSON node's valuestring) so that 1 and 1.0 stay distinct and big
 * integers stay exact; with duplicate keys the last value wins at the
 * first key's position; numbers must follow the strict JSON grammar.
 * Fails with MUSER_EINVAL and a message giving the byte offset. */
int chat_json_parse(const char *text, size_t len, cJSON **out);

/* Appends json.dumps(v, ensure_ascii=False) (", " and ": " separators) when
 * python_style, else compact, strict JSON ("," and ":"; a float beyond
 * double range, which json.dumps writes as Infinity, as null). Numbers
 * print as Python prints the parsed value: ints exactly, floats as repr(),
 * so 1e20 gives 1e+20. Nodes without source text (trees from cJSON_Parse) print integral
 * values below 1e16 as ints and others as floats. */
void chat_json_dump(mu_buf *b, const cJSON *v, bool python_style);

/* Appends what Python's str() / jinja2's {{ v }} prints for a scalar:
 * strings raw, True/False/None, numbers as above (inf for overflow). Returns
 * false for arrays and objects (their Python repr is not supported). */
bool chat_json_py_str(mu_buf *b, const cJSON *v);

/* Python truthiness of a JSON value (NULL, i.e. absent, is false). */
bool chat_json_truthy(const cJSON *v);

/* ---- rendering -------------------------------------------------------------- */

typedef struct chat_render_opts {
    bool add_generation_prompt;
    const char *reasoning_strength; /* NULL or "": "high" (not validated)   */
    const char *current_date;       /* NULL or "": today, local time         */
    const char *knowledge_cutoff;   /* NULL or "": "2026-01-04"              */
    const char *bos_token;          /* NULL: "<|begin_of_text|>"             */
    const cJSON *tool_namespace_descriptions; /* object or NULL             */
} chat_render_opts;

/* Renders messages (array) and tools (array, or NULL / JSON null) into the
 * exact prompt text; *out is malloc'd. opts may be NULL (all defaults).
 *
 * Behaviour beyond the template (where it would raise or print nothing):
 * - tool_call.function.arguments may be a JSON *string* that parses to an
 *   object (OpenAI clients send it that way); it renders as that object.
 *   The template itself raises on strings.
 * - a message without a role, with an unknown role, or that is not an
 *   object fails (the template silently renders nothing for it).
 * - a tool definition without "description" renders "" and without
 *   "parameters" renders {} (llama.cpp's normalisation of OpenAI tools; the
 *   template's tojson would raise on the undefined value).
 * - a text part whose "text" is an array or object fails (jinja2 would
 *   print its Python repr). */
int chat_render(const cJSON *messages, const cJSON *tools, const chat_render_opts *opts,
                char **out);

/* ---- output parsing (ATEM) ----------------------------------------------- */

/* The parser's output types are public (muser.h); these are their names
 * inside the library. */
typedef muser_chat_tool_call chat_tool_call;
typedef muser_chat_delta chat_delta;
typedef muser_chat_result chat_result;

typedef struct chat_parser chat_parser;

/* tools: the request's OpenAI tool array (copied), or NULL. Parameters are
 * typed by each tool's JSON schema ("string" raw; "integer"/"number",
 * "boolean", "object", "array", "null" when the text fits, else the raw
 * string; a type list takes the first that fits). Without a declared type,
 * values that parse as JSON numbers, booleans, null, objects or arrays take
 * that type. Leniency: output without a header is answer text, an answer
 * running straight into <atem:function_calls> becomes a call, a tool
 * message holding a bare JSON object is a call, and special tokens other
 * than the protocol's are dropped from the text. */
int chat_parser_new(const cJSON *tools, chat_parser **out);
/* Feeds the next piece of generated text (the part after the prompt's
 * `<|start|>assistant`). delta may be NULL. */
int chat_parser_feed(chat_parser *p, const char *text, size_t len, chat_delta *delta);
/* Ends the stream: flushes what was held back (into delta, may be NULL) and
 * fills result, valid until chat_parser_free. Further feeds are ignored. */
int chat_parser_finish(chat_parser *p, chat_delta *delta, chat_result *result);
void chat_parser_free(chat_parser *p);

#endif
