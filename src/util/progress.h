/* progress.h — the progress line of a long job (writing or uploading
 * gigabytes): done / total, percent, rate and time left, on stderr.
 *
 * On a terminal the line redraws itself in place (\r) a few times a
 * second; anywhere else (a log file, a pipe, CI) a plain line is printed
 * every MU_PROGRESS_PLAIN_S seconds, so logs hold no carriage returns.
 * Jobs under MU_PROGRESS_MIN_BYTES, and every job under MUSER_QUIET, show
 * nothing: a bar that flashes by says nothing.
 */
#ifndef MU_PROGRESS_H
#define MU_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MU_PROGRESS_MIN_BYTES (256ull << 20)
#define MU_PROGRESS_TTY_S 0.25
#define MU_PROGRESS_PLAIN_S 5.0

typedef struct mu_progress {
    FILE *out;
    const char *label;  /* "synth", "cuda: uploading weights", ...    */
    uint64_t total;     /* bytes                                      */
    double t0, last;    /* monotonic seconds: start, last line        */
    bool show, tty, drawn;
} mu_progress;

/* Starts the clock; lines go to out (stderr). */
void mu_progress_begin(mu_progress *p, FILE *out, const char *label, uint64_t total);
/* done bytes so far: prints a line when one is due. */
void mu_progress_update(mu_progress *p, uint64_t done);
/* After a line was shown: the last one (the total and the time taken). */
void mu_progress_end(mu_progress *p);

/* One line without its ending: "label: 1.20 / 17.00 GB (7%), 512 MB/s,
 * 0:31 left", or when final "label: 17.00 GB in 0:34, 500 MB/s". */
void mu_progress_format(char *buf, size_t cap, const char *label, uint64_t done, uint64_t total, double elapsed_s,
                        bool final);

#endif
