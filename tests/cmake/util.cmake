muser_c_test(progress LABELS unit)
