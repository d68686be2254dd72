muser_c_test(chat LABELS unit)
