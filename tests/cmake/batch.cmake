# Batched decode across sessions (muser_batch_decode) against one-token feeds.
muser_c_test(batch LABELS unit SOURCES tests/tinymodel.c tests/fixture.c)
