/* utf8.c — UTF-8 classification and the GPT-2 byte <-> unicode map. */
#include "text/utf8.h"

#include <stdbool.h>

mu_utf8_kind mu_utf8_next(const uint8_t *s, size_t n, size_t *len, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *len = 1;
        *cp = b;
        return MU_UTF8_VALID;
    }
    size_t need;
    uint32_t c;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
        c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        c = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;      /* no overlong forms       */
        else if (b == 0xED) hi = 0x9F; /* no UTF-16 surrogates    */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        c = b & 0x07;
        if (b == 0xF0) lo = 0x90;      /* no overlong forms       */
        else if (b == 0xF4) hi = 0x8F; /* nothing past U+10FFFF   */
    } else {
        *len = 1; /* continuation byte, C0, C1 or F5..FF */
        return MU_UTF8_INVALID;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) {
            *len = i;
            return MU_UTF8_INCOMPLETE;
        }
        uint8_t x = s[i];
        if (i == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) {
            *len = i;
            return MU_UTF8_INVALID;
        }
        c = (c << 6) | (x & 0x3F);
    }
    *len = need;
    *cp = c;
    return MU_UTF8_VALID;
}

bool mu_utf8_valid(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (mu_utf8_next(p + i, n - i, &len, &cp) != MU_UTF8_VALID) return false;
        i += len;
    }
    return true;
}

int mu_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's map: the printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) spell
 * themselves; the other 68 bytes, in increasing order, take U+0100.. U+0143. */
static bool gpt2_prints_itself(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

#define GPT2_CP_LIMIT 0x144
static uint32_t byte_to_cp[256];
static int16_t cp_to_byte[GPT2_CP_LIMIT];
static bool gpt2_ready;

static void gpt2_init(void) {
    /* Idempotent and deterministic: racing threads write the same values. */
    uint32_t next = 0x100;
    for (unsigned b = 0; b < 256; b++) byte_to_cp[b] = gpt2_prints_itself(b) ? b : next++;
    for (unsigned c = 0; c < GPT2_CP_LIMIT; c++) cp_to_byte[c] = -1;
    for (unsigned b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    __atomic_store_n(&gpt2_ready, true, __ATOMIC_RELEASE);
}

uint32_t mu_gpt2_byte_to_cp(uint8_t b) {
    if (!__atomic_load_n(&gpt2_ready, __ATOMIC_ACQUIRE)) gpt2_init();
    return byte_to_cp[b];
}

int mu_gpt2_cp_to_byte(uint32_t cp) {
    if (!__atomic_load_n(&gpt2_ready, __ATOMIC_ACQUIRE)) gpt2_init();
    return cp < GPT2_CP_LIMIT ? cp_to_byte[cp] : -1;
}

long mu_gpt2_decode(const char *s, size_t n, char *out) {
    if (!__atomic_load_n(&gpt2_ready, __ATOMIC_ACQUIRE)) gpt2_init();
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    long o = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII spells itself or nothing */
            int b = cp_to_byte[p[i]];
            if (b < 0) return -1;
            out[o++] = (char)b;
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (mu_utf8_next(p + i, n - i, &len, &cp) != MU_UTF8_VALID) return -1;
        int b = mu_gpt2_cp_to_byte(cp);
        if (b < 0) return -1;
        out[o++] = (char)b;
        i += len;
    }
    return o;
}
