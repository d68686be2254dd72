/* gen_common.h — what `muser run` and `muser chat` share: model lookup
 * (the bundled default), sampling options, and the end-of-run statistics. */
#ifndef MU_GEN_COMMON_H
#define MU_GEN_COMMON_H

#include <stdio.h>

#include "muser.h"
#include "tools/args.h"

typedef struct mu_gen_opts {
    const char *model_path;        /* NULL: the bundled model            */
    muser_session_params sp;
    muser_sampler_params samp;     /* filled from the model, then flags  */
    bool samp_set[9];              /* which sampler flags were given     */
    muser_sampler_params flags;    /* values of the given flags          */
    bool seed_random;              /* no --seed: samp.seed is random     */
    bool verbose;                  /* --verbose: the backend's device line */
    const char *draft_path;        /* --draft / -md: a DFlash drafter, or NULL */
    int draft_max;                 /* --draft-max: 0, the drafter's block - 1 */
} mu_gen_opts;

void mu_gen_opts_init(mu_gen_opts *o);
/* Handles -m and the sampling flags (--temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --presence-penalty,
 * --frequency-penalty, --seed), the drafter's (--draft, --draft-max) and
 * the session options. Returns true if
 * handled; false with a message on a bad value or unknown option. */
bool mu_gen_option(mu_args *a, mu_gen_opts *o);
/* With --verbose, the session's backend line on stderr (the device, its
 * paths, what it holds, the settings). */
void mu_gen_describe(const mu_gen_opts *o, const muser_session *s);
/* Loads the model (the bundled stories260K when none was given); applies
 * the model's sampling defaults under the user's flags; without --seed,
 * a random seed. */
int mu_gen_load(mu_gen_opts *o, muser_model **model);
/* Help lines with the defaults: -m, then (after the command's own) the
 * sampling and the session options; backends as for mu_tool_session_help,
 * seed_default: what happens without --seed. */
void mu_gen_help_model(FILE *out);
void mu_gen_help(FILE *out, const char *backends, const char *seed_default);

/* Speculative decoding (mu_gen_option takes --draft/-md FILE and
 * --draft-max N): the help lines; loading the drafter for model and attaching it
 * to the (empty) session s (nothing without --draft; *d NULL then); the
 * closing line: drafted, accepted, the mean accepted length, draft and
 * verify time. */
void mu_gen_draft_help(FILE *out);
int mu_gen_attach_drafter(const char *cmd, const mu_gen_opts *o, const muser_model *model, muser_session *s,
                          muser_drafter **d);
void mu_gen_print_spec_stats(const muser_session *s, FILE *out);

/* Ctrl-C sets a flag instead of ending the process, so a generation can
 * stop cleanly. once: the handler then reverts, so a second Ctrl-C ends the
 * process (a long prefill does not look at the flag). A blocked read
 * returns EINTR (no SA_RESTART). */
void mu_gen_catch_sigint(bool once);
bool mu_gen_interrupted(void);
void mu_gen_clear_interrupt(void);

/* Timing of one generation, printed on stderr. */
typedef struct mu_gen_stats {
    int prompt_tokens, gen_tokens;
    double prompt_s, gen_s;
    double bytes; /* bytes read by the decoded tokens */
    uint64_t seed; /* printed, so --seed repeats the run */
} mu_gen_stats;
void mu_gen_print_stats(const mu_gen_stats *st, FILE *out);

#endif
