muser_sh_test(serve LABELS server TIMEOUT 900)
