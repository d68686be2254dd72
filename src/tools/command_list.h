/* The subcommands: MU_COMMAND(name, function, one-line help). No include
 * guard: included with different MU_COMMAND definitions. */
MU_COMMAND("run", cmd_run, "complete a prompt, streaming the text (the bundled model by default)")
MU_COMMAND("chat", cmd_chat, "interactive chat in the Muse Glimmer format (reasoning shown dimmed)")
MU_COMMAND("tokenize", cmd_tokenize, "text to token ids with a model's tokenizer (test-vector files too)")
MU_COMMAND("parity", cmd_parity, "compare logits with a reference file (or the float64 reference)")
MU_COMMAND("inspect", cmd_inspect, "show a GGUF file: metadata, tensors, layer kinds, bytes per token")
MU_COMMAND("synth", cmd_synth, "write a synthetic Muse Glimmer model (nano, micro, 30b presets)")
MU_COMMAND("serve", cmd_serve, "OpenAI-compatible HTTP server: chat, completions, streaming, tools, prompt caching")
MU_COMMAND("quantize", cmd_quantize, "convert an f32/f16/bf16 GGUF to another format or mix")
MU_COMMAND("version", cmd_version, "print the version")
MU_COMMAND("bench", cmd_bench, "decode and prefill speed, GB/s against the measured memory bandwidth, --profile")
