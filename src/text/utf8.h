/* utf8.h — UTF-8 helpers shared by the tokenizers and the detokenizer, and
 * the GPT-2 byte <-> unicode spelling that byte-level BPE vocabularies use.
 */
#ifndef MU_UTF8_H
#define MU_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length a lead byte announces (1 for ASCII, continuation and invalid
 * bytes; 2, 3 or 4 from the high bits only). This is how SentencePiece-style
 * tokenizers cut text into symbols, valid or not. */
static inline size_t mu_utf8_lead_len(uint8_t b) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[b >> 4];
}

/* What starts at s[0..n): */
typedef enum mu_utf8_kind {
    MU_UTF8_VALID,      /* a complete, well-formed sequence of *len bytes  */
    MU_UTF8_INCOMPLETE, /* a well-formed prefix cut short by the end of s */
    MU_UTF8_INVALID,    /* ill-formed: *len bytes (the maximal subpart) become one U+FFFD */
} mu_utf8_kind;

/* Classifies the sequence at s (n >= 1), following the Unicode "maximal
 * subpart" practice for replacement. On VALID, *cp is the code point. */
mu_utf8_kind mu_utf8_next(const uint8_t *s, size_t n, size_t *len, uint32_t *cp);

bool mu_utf8_valid(const char *s, size_t n);
/* Writes cp (<= 0x10FFFF) as UTF-8; returns the byte count (1..4). */
int mu_utf8_encode(uint32_t cp, char *out);

/* GPT-2 byte-level spelling: every byte is a printable code point. */
uint32_t mu_gpt2_byte_to_cp(uint8_t b);
/* The byte a code point spells, or -1 if it is not in the GPT-2 alphabet. */
int mu_gpt2_cp_to_byte(uint32_t cp);
/* Decodes GPT-2-spelled text into raw bytes (out holds at least n bytes).
 * Returns the byte count, or -1 if s has a character outside the alphabet
 * or is not valid UTF-8. */
long mu_gpt2_decode(const char *s, size_t n, char *out);

#endif
