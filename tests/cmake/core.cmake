muser_c_test(gguf LABELS unit)
