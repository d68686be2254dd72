/* ref_draft.h — the float64 reference of a DFlash drafter's block pass. */
#ifndef MU_REF_DRAFT_H
#define MU_REF_DRAFT_H

#include "model/dflash.h"

/* Logits [n][d->m.hp.n_vocab] of the block tokens block[0..n) at positions
 * P .. P+n-1, after a context of P positions whose target features are
 * features [P][n_target_layers * n_embd] (each row: the target's captured
 * layer inputs, in target_layers order). */
int mu_ref_draft_logits(const mu_drafter *d, const float *features, int P, const muser_token *block, int n,
                        double *logits);

#endif
