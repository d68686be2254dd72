muser_c_test(quant LABELS unit)
