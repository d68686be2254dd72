# The HTTP server: request parsing and response shapes (C), the real
# server process against the official openai npm client (tests/server).
# The request parser's libFuzzer target: fuzz.cmake.
muser_c_test(serve LABELS unit)
muser_sh_test(serve LABELS server TIMEOUT 900)

