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
    "00_vectors_neurons_nonlinearity": {
        "title": "Lesson 4 \u00b7 Vectors, neurons and nonlinearity",
        "numbers": [
            ("a\u00b7b", "vec_dot_ab", ".1f"),
            ("angle between a and b (degrees)", "vec_angle_ab_deg", ".2f"),
            ("stretch then rotate, S R (row vectors, x W)", "stretch_then_rotate_flat", None),
            ("MLP output for [1, 2]", "mlp_pos_output", None),
            ("MLP output for [1, \u22122]", "mlp_neg_output", None),
            ("fold: residual of the best affine fit, with ReLU", "fold_relu_affine_residual_rms", ".3f"),
            ("fold: residual of the best affine fit, without ReLU", "fold_linear_affine_residual_rms", ".1e"),
            ("linear pieces seen", "fold_gate_patterns", "d"),
            ("Llama 3 8B MLP ops per token per layer", "llama3_8b_mlp_ops_per_layer", ",d"),
            ("Llama 3 8B MLP ops per token, 32 layers", "llama3_8b_mlp_ops_per_token", ",d"),
            ("Llama 3.1 405B MLP ops per token (exercise)", "llama31_405b_mlp_ops_per_token", ",d"),
            ("405B tokens/s at 5e14 ops/s (exercise)", "llama31_405b_mlp_tokens_per_s", ".0f"),
        ],
        "figures": {
            "activations.png": "ReLU, GELU, SiLU and tanh, with SiLU's minimum marked",
            "composition.png": "A grid stretched by S, then turned by R (row vectors, x W); the single matrix S R lands "
            "on the same points",
            "fold.png": "Random points through the 2\u21923\u21922 MLP: input, output without ReLU (one affine map), "
            "output with ReLU (folded)",
        },
    },
    "03b_what_the_ffn_stores": {
        "title": "Lesson 5 \u00b7 What the FFN stores",
        "numbers": [
            ("slots in block 0", "slots_per_layer", ",d"),
            ("regrouping \u03a3 a\u1d62v\u1d62 vs W_down\u00b7h, relative difference", "regroup_rel_diff", ".1e"),
            ("top slot for the token", "top_slot", "d"),
            ("its coefficient", "top_slot_coefficient", ".3f"),
            ("slots needed for 90 % of the output", "slots_for_90pct_of_output", "d"),
            ("model parameters", "model_total", ",d"),
            ("FFN share of the model", "model_ffn_share", ".1%"),
            ("FFN share of a block", "model_block_ffn_share", ".1%"),
            ("Llama-3-8B parameters", "llama3_8b_total", ",d"),
            ("Llama-3-8B FFN share", "llama3_8b_ffn_share", ".1%"),
            ("rank-one edit: relative error at k*", "rome_target_rel_err", ".1e"),
            ("median relative drift of other keys, C = I", "rome_relative_drift_median", ".3f"),
            ("median relative drift of other keys, ROME's C", "rome_cov_relative_drift_median", ".4f"),
            ("target token's rank before the edit", "rome_target_rank_before", ",d"),
            ("target token's rank after the edit", "rome_target_rank_after", ",d"),
        ],
        "figures": {
            "slot_coefficients.png": "Block 0 coefficients a\u1d62 for the token, the top ones marked, and the error "
            "of rebuilding the FFN output from the largest terms",
            "rome_drift.png": "Rank-one edit of block 0's W_down: each key's drift against its overlap with k*",
            "parameter_shares.png": "Parameter shares by part: this model, Llama-3-8B and GPT-2 small",
        },
    },
    "capstone_decode_is_memory_bound": {
        "title": "Lesson 7 \u00b7 Why decode is memory-bound",
        "numbers": [
            ("bytes read per generated token, this model (GB)", "model_bytes_per_token_gb", ".4f"),
            ("FFN share of those bytes", "model_ffn_share_of_bytes", ".1%"),
            ("tokens/s ceiling at STREAM copy bandwidth", "model_ceiling_stream_copy_tps", ".0f"),
            ("tokens/s ceiling at cold matvec bandwidth", "model_ceiling_matvec_cold_tps", ".0f"),
            ("deepseek-coder-6.7b Q8_0: bytes per token (GB)", "deepseek_q8_0_bytes_per_token_gb", ".2f"),
            ("deepseek-coder-6.7b Q8_0: ceiling on this machine (tokens/s)", "deepseek_q8_0_ceiling_stream_copy_tps", ".1f"),
            ("deepseek-coder-6.7b Q8_0: ceiling at the DGX Spark's quoted peak (tokens/s)",
             "deepseek_q8_0_ceiling_course_peak_tps", ".1f"),
            ("Llama-3-8B bf16: bytes per token (GB)", "llama3_8b_bf16_bytes_per_token_gb", ".2f"),
            ("Llama-3-8B bf16: FFN bytes per token (GB)", "llama3_8b_bf16_ffn_bytes_per_token_gb", ".2f"),
            ("CPU roofline ridge (FLOP/byte)", "roofline_cpu_ridge_intensity", ".2f"),
            ("CPU measured peak (GFLOP/s)", "roofline_cpu_peak_gflops", ".0f"),
            ("time for 256 tokens / time for 1", "timing_matmul_ratio_256_over_1", ".1f"),
        ],
        "figures": {
            "bytes_per_token.png": "Bytes one generated token reads (batch 1, weights only), by tensor group: this "
            "model, deepseek-coder-6.7b Q8_0 and Llama-3-8B bf16",
            "roofline.png": "This run's timing sweep on a roofline: measured STREAM copy bandwidth (sloped roof) and "
            "the sweep's best GFLOP/s (flat roof, a measured peak)",
        },
    },
}
