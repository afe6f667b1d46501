"""What each lesson's section of the report leads with: its title, headline numbers
(label, metrics.json key, format) and figure captions. Numbers are read from the files; only
the labels live here."""

LESSON_HEADLINES = {
    "01_gguf_on_disk": {
        "title": "Lesson 1 \u00b7 What a model is on disk",
        "numbers": [
            ("file size (bytes)", "file_size", None),
            ("tensors", "tensor_count", None),
            ("metadata keys", "metadata_count", None),
            ("metadata bytes", "bytes_metadata", None),
            ("tensor-info bytes", "bytes_tensor_infos", None),
            ("padding bytes", "bytes_padding", None),
            ("tensor data bytes", "bytes_tensor_data", None),
            ("bytes unaccounted", "bytes_unaccounted", None),
            ("parameters", "parameters", None),
            ("average bits per weight", "bits_per_weight_overall", ".2f"),
            ("Q8_0 block decoded by hand, bit-exact with gguf-py", "q8_0_block_bit_exact_gguf_py", None),
            ("Q4_1 block decoded by hand, bit-exact with gguf-py", "q4_1_block_bit_exact_gguf_py", None),
        ],
        "figures": {
            "bytes_by_type.png": "Share of the file's parameters and of its tensor bytes per ggml type",
        },
    },
    "02_tokens_and_embeddings": {
        "title": "Lesson 2 \u00b7 Tokens and embeddings",
        "numbers": [
            ("token id", "token_id", None),
            ("stored in the vocabulary as", "token_vocab_form", None),
            ("row length", "row_length", ".4f"),
            ("row RMS", "row_rms", ".4f"),
            ("row decoded by hand, bit-exact with gguf-py", "row_bit_exact_gguf_py", None),
            ("nearest neighbour", "token_nearest", None),
            ("its cosine", "token_nearest_cosine", ".3f"),
            ("random token pairs: mean cosine", "random_pair_cosine_mean", ".3f"),
            ("random pairs, mean row subtracted: sd of cosine", "random_pair_centred_cosine_sd", ".3f"),
            ("nearest neighbours: median cosine", "nearest_cosine_median", ".3f"),
            ("two random 4096-vectors (default_rng(0)): a\u00b7b", "random_dot", ".2f"),
            ("a\u00b7a", "random_self_dot", ".2f"),
        ],
        "figures": {
            "cosine_random_vs_nearest.png": "Cosine between embedding rows: random token pairs, the same pairs "
            "with the mean row subtracted, and nearest neighbours",
        },
    },
    "03_ffn_by_hand": {
        "title": "Lesson 3 \u00b7 A layer is matrix multiplication",
        "numbers": [
            ("token id of the followed token", "token_id", None),
            ("RMS of its embedding x", "x_rms", ".4g"),
            ("length |x|", "x_length", ".4g"),
            ("first gate output, numpy", "gate_first", ".6f"),
            ("first gate output, plain Python loop", "gate_first_naive", ".6f"),
            ("gate values that are negative", "gate_negative_fraction", "%"),
            ("valves with |SiLU(g)| < 0.1", "silu_abs_below_0_1_fraction", "%"),
            ("valves with |SiLU(g)| < 0.01", "silu_abs_below_0_01_fraction", "%"),
            ("length of the FFN output |out|", "out_length", ".3g"),
            ("cosine(x, y) across the block", "cosine_x_y", ".3f"),
            ("angle between x and y (degrees)", "angle_deg", ".1f"),
        ],
        "figures": {
            "gate_histogram.png": "Block 0's gate values g for the followed token, and the SiLU valve each one sets",
            "flops_per_token.png": "FLOPs per token for one whole block, by step: the matvecs dominate",
        },
    },
}

