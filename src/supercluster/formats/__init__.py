"""Foreign formats in and out: Hugging Face configs, Megatron-LM, torchtitan and DeepSpeed."""
