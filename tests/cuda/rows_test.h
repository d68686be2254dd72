/* rows_test.h — the B-row matvec's kernel test (tests/cuda/rows_test.c). */
#ifndef MU_ROWS_TEST_H
#define MU_ROWS_TEST_H

void test_matvec_rows_fast(void);
/* the f16 tensor-core batch (mu_cu_mmf_set) */
void test_mmf(void);

#endif
