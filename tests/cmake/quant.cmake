muser_c_test(quant LABELS unit)
muser_c_test(quant_formats LABELS unit)
