#include "util/progress.h"

#include <unistd.h>

#include "util/clock.h"
#include "util/error.h"

/* m:ss, or h:mm:ss from an hour on. */
static void clock_text(char *buf, size_t cap, double s) {
    long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void rate_text(char *buf, size_t cap, double bytes_per_s) {
    if (bytes_per_s >= 1e9) snprintf(buf, cap, "%.2f GB/s", bytes_per_s / 1e9);
    else snprintf(buf, cap, "%.0f MB/s", bytes_per_s / 1e6);
}

void mu_progress_format(char *buf, size_t cap, const char *label, uint64_t done, uint64_t total, double elapsed_s,
                        bool final) {
    char rate[32], when[32];
    const double per_s = elapsed_s > 0 ? (double)done / elapsed_s : 0;
    rate_text(rate, sizeof rate, per_s);
    if (final) {
        clock_text(when, sizeof when, elapsed_s);
        snprintf(buf, cap, "%s: %.2f GB in %s, %s", label, (double)done / 1e9, when, rate);
        return;
    }
    if (per_s > 0 && done <= total) clock_text(when, sizeof when, (double)(total - done) / per_s);
    else snprintf(when, sizeof when, "?");
    snprintf(buf, cap, "%s: %.2f / %.2f GB (%.0f%%), %s, %s left", label, (double)done / 1e9, (double)total / 1e9,
             total ? 100.0 * (double)done / (double)total : 100.0, rate, when);
}

void mu_progress_begin(mu_progress *p, FILE *out, const char *label, uint64_t total) {
    p->out = out;
    p->label = label;
    p->total = total;
    p->t0 = p->last = mu_now_seconds();
    p->show = total >= MU_PROGRESS_MIN_BYTES && !mu_is_quiet();
    p->tty = isatty(fileno(p->out));
    p->drawn = false;
}

void mu_progress_update(mu_progress *p, uint64_t done) {
    if (!p->show) return;
    const double now = mu_now_seconds();
    if (now - p->last < (p->tty ? MU_PROGRESS_TTY_S : MU_PROGRESS_PLAIN_S)) return;
    p->last = now;
    char line[256];
    mu_progress_format(line, sizeof line, p->label, done, p->total, now - p->t0, false);
    if (p->tty) fprintf(p->out, "\r%s\x1b[K", line); /* (erasing the rest of a longer line) */
    else fprintf(p->out, "%s\n", line);
    fflush(p->out);
    p->drawn = true;
}

void mu_progress_end(mu_progress *p) {
    if (!p->show || !p->drawn) return; /* a job that ended before its first line: its caller's summary says it */
    char line[256];
    mu_progress_format(line, sizeof line, p->label, p->total, p->total, mu_now_seconds() - p->t0, true);
    fprintf(p->out, p->tty ? "\r%s\x1b[K\n" : "%s\n", line);
    fflush(p->out);
}
