/* parity.h — how close two sets of logits are: the numbers `muser parity`
 * prints and the parity tests assert. */
#ifndef MU_PARITY_H
#define MU_PARITY_H

#include <stdint.h>

typedef struct mu_parity {
    int positions;
    double max_abs;       /* max |ours - ref| over every logit            */
    double rms;           /* RMS of ours - ref                            */
    double mean_kl;       /* mean over positions of KL(ref || ours)       */
    double max_kl;
    double top1;          /* fraction of positions with the same argmax   */
    double top1_decisive; /* same, over positions where the reference's
                             top-1 leads its top-2 by >= 0.5             */
    int decisive;         /* how many positions are decisive              */
} mu_parity;

#define MU_DECISIVE_MARGIN 0.5

void mu_parity_compare(const float *ref, const float *ours, int positions, int n_vocab, mu_parity *out);
/* Argmax with ties to the lowest id. */
int mu_argmax(const float *x, int n);

#endif
