/* The subcommands: MU_COMMAND(name, function, one-line help). No include
 * guard: included with different MU_COMMAND definitions. */
MU_COMMAND("version", cmd_version, "print the version")
MU_COMMAND("tokenize", cmd_tokenize, "text to token ids with a model's tokenizer (test-vector files too)")
