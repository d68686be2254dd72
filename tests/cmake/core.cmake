muser_c_test(gguf LABELS unit)
muser_c_test(parity LABELS parity TIMEOUT 1800)
