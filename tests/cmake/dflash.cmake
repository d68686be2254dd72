# DFlash drafters and speculative decoding (issue 36).
muser_c_test(dflash LABELS unit SOURCES tests/tinymodel.c tests/tinydraft.c)
muser_c_test(spec LABELS unit SOURCES tests/tinymodel.c tests/tinydraft.c)
muser_sh_test(dflash LABELS cli)
# The same through the commands on CUDA (77 without a GPU).
muser_sh_test(dflash_cuda LABELS cuda)
# The trained drafter of the bundled stories260K: greedy identity and its mean accepted length.
muser_sh_test(dflash_stories LABELS cli)
