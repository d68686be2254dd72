muser_c_test(gguf LABELS unit)
muser_c_test(parity LABELS parity TIMEOUT 1800 SOURCES tests/fixture.c)
muser_c_test(model LABELS unit SOURCES tests/tinymodel.c)
muser_c_test(kv LABELS unit)
# Prefill attention tiles: every token bit for bit its decode step (cpu_attn.c).
muser_c_test(attn LABELS unit SOURCES tests/fixture.c tests/tinymodel.c)
muser_sh_test(core LABELS cli)
muser_c_test(sample LABELS unit)
muser_sh_test(run LABELS cli)
muser_sh_test(chat LABELS cli)
muser_c_test(tp LABELS unit SOURCES tests/tinymodel.c)
muser_sh_test(formats LABELS cli)
# The CUDA session's GPU memory plan: plain arithmetic, no GPU needed.
muser_c_test(gpu_plan LABELS unit SOURCES tests/tinymodel.c)
# --gpu-layers without a GPU: layer views, the split backend with the CPU on
# both sides (bit for bit the CPU's logits at every split), the options.
muser_c_test(split LABELS unit SOURCES tests/fixture.c tests/tinymodel.c tests/tinydraft.c)
# --gpu-layers through the commands: the option's values and errors without
# a GPU; every split, --verbose, bench and auto with one (77 without).
muser_sh_test(gpu_layers LABELS cli cuda)
