/* sample.h — the sampler's internal entry points (the public ones are in
 * include/muser.h). */
#ifndef MU_SAMPLE_H
#define MU_SAMPLE_H

#include <stdbool.h>

#include "muser.h"

/* Chooses the token after these logits given a drafted guess, keeping the
 * sampler's distribution exactly (speculative rejection sampling with the
 * drafter's greedy choice as a point-mass proposal): greedy returns the
 * argmax after penalties; otherwise the draft is accepted with its
 * probability p(draft), else a token is drawn from p without the draft.
 * *accepted: the result is the draft. The token joins the penalty history,
 * as with muser_sampler_sample. */
muser_token mu_sampler_verify(muser_sampler *s, const float *logits, muser_token draft, bool *accepted);

/* The k (1 to MUSER_TOP_MAX, at most V) highest-ranked of V logits (value,
 * then lower id; NaN as -inf, and handed back as -inf) into vals[k],
 * ids[k], in no particular order. */
void mu_top_logits(const float *logits, int V, int k, float *vals, muser_token *ids);

#endif
