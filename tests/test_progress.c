/* test_progress.c — the progress line: rate, percent and time left in each
 * unit range, and plain lines (no carriage return) when the output is not
 * a terminal. */
#include <string.h>

#include "testlib.h"
#include "util/error.h"
#include "util/progress.h"

static void expect_line(uint64_t done, uint64_t total, double elapsed, bool final, const char *want) {
    char line[256];
    mu_progress_format(line, sizeof line, "job", done, total, elapsed, final);
    CHECKF(!strcmp(line, want), "got '%s', want '%s'", line, want);
}

int main(void) {
    expect_line(1000000000, 4000000000, 2.0, false, "job: 1.00 / 4.00 GB (25%), 500 MB/s, 0:06 left");
    expect_line(3000000000, 4000000000, 1.0, false, "job: 3.00 / 4.00 GB (75%), 3.00 GB/s, 0:00 left");
    expect_line(1000000, 10000000000, 1.0, false, "job: 0.00 / 10.00 GB (0%), 1 MB/s, 2:46:39 left");
    expect_line(0, 4000000000, 0.5, false, "job: 0.00 / 4.00 GB (0%), 0 MB/s, ? left");
    expect_line(4000000000, 4000000000, 8.0, true, "job: 4.00 GB in 0:08, 500 MB/s");
    expect_line(4000000000, 4000000000, 95.0, true, "job: 4.00 GB in 1:35, 42 MB/s");

    /* Not a terminal: nothing before the first interval, then whole lines. */
    mu_set_quiet(0);
    FILE *f = tmpfile();
    mu_progress p;
    mu_progress_begin(&p, f, "job", 1ull << 30);
    CHECK(p.show && !p.tty);
    mu_progress_update(&p, 1ull << 28);
    CHECK(ftell(f) == 0);
    p.last -= MU_PROGRESS_PLAIN_S; /* as if the interval had passed */
    mu_progress_update(&p, 1ull << 29);
    mu_progress_end(&p);
    char text[512] = {0};
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CHECKF(n > 0 && !strchr(text, '\r'), "'%s'", text);
    CHECKF(strstr(text, "job: 0.54 / 1.07 GB (50%)") == text, "'%s'", text);
    CHECKF(strstr(text, "left\njob: 1.07 GB in ") != NULL, "'%s'", text);
    CHECK(n > 0 && text[n - 1] == '\n');

    /* Small jobs and quiet runs show nothing. */
    f = tmpfile();
    mu_progress_begin(&p, f, "job", 1 << 20);
    p.last -= MU_PROGRESS_PLAIN_S;
    mu_progress_update(&p, 1 << 19);
    mu_progress_end(&p);
    CHECK(ftell(f) == 0);
    mu_set_quiet(1);
    mu_progress_begin(&p, f, "job", 1ull << 30);
    p.last -= MU_PROGRESS_PLAIN_S;
    mu_progress_update(&p, 1 << 19);
    CHECK(ftell(f) == 0);
    fclose(f);
    return tl_finish("progress");
}
