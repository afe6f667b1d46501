"""The network: architectures, weights, forward pass, tokenizer, generation."""
