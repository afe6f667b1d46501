"""Lesson 4, "Vectors, neurons and nonlinearity" (course the vectors chapter and the neurons lesson): all of it by hand.

Nothing here reads a model. Every number is either small arithmetic the texts do by hand, or
arithmetic on the published Llama 3 configurations (bytesup.model.param_counts), so every claim of this
lesson must reproduce on any run.

Convention. The vectors chapter writes a layer as ``xW``: the input is a row vector, ``W`` has shape
[inputs, outputs], and output j is x dotted with column j. Applying W1 then W2 is x W1 W2, so the
single matrix that does both is the product W1 @ W2, first map on the left. The matrix called
"rotation by 45 degrees" is the textbook one, [[cos, -sin], [sin, cos]]; multiplied on the right
of a row vector it turns the plane clockwise. With these two choices, stretch-then-rotate is
S @ R = [[1.41, -1.41], [0.35, 0.35]], the matrix the text prints. (The neurons lesson warns that code
also writes layers as W x with W shaped [outputs, inputs]; the neuron examples below use that
form, one row per neuron, as the neurons lesson does.)

Arithmetic is float64: these are toys, and the printed values are round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from bytesup.lessons import claims as claims_mod
from bytesup.lessons import figure, legend_below
from bytesup.lessons.spec import COMPANION, Headline, LessonSpec
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.layers import gelu, matvec, matvec_naive, relu, silu, tanh
from bytesup.model.vectors import angle_deg, cosine, dot, dot_naive, length

SPEC = LessonSpec(
    id="00_vectors_neurons_nonlinearity",
    title="Vectors, neurons and nonlinearity",
    kind=COMPANION,
    position=0,
    source=(
        'Background from two other courses: chapter 2 of part 1 of a linear-algebra course, "Vectors and the functions that move them", and lesson 4 of a neural-networks course, "Neurons, matrices and nonlinearity"'
    ),
    tables=("mlp_by_hand.csv", "llama3_numbers.csv"),
    key_tables=("mlp_by_hand.csv",),
    key_figures=("activations.png",),
    figures={
        "activations.png": "ReLU, GELU, SiLU and tanh, with SiLU's minimum marked",
        "composition.png": "A grid stretched by S, then turned by R (row vectors, x W); the single matrix S R lands on the same points",
        "fold.png": "Random points through the 2→3→2 MLP: input, output without ReLU (one affine map), output with ReLU (folded)",
    },
    headlines=(
        Headline("vec_dot_ab", "a·b", fmt=".1f"),
        Headline("vec_angle_ab_deg", "angle between a and b", unit="degrees", fmt=".2f"),
        Headline("stretch_then_rotate_flat", "stretch then rotate, S R (row vectors, x W)"),
        Headline("mlp_pos_output", "MLP output for [1, 2]"),
        Headline("mlp_neg_output", "MLP output for [1, −2]"),
        Headline("fold_relu_affine_residual_rms", "fold: residual of the best affine fit, with ReLU", fmt=".3f"),
        Headline("fold_linear_affine_residual_rms", "fold: residual of the best affine fit, without ReLU", fmt=".1e"),
        Headline("fold_gate_patterns", "linear pieces seen", fmt="d"),
        Headline("llama3_8b_mlp_ops_per_layer", "Llama 3 8B MLP ops per token per layer", fmt=",d"),
        Headline("llama3_8b_mlp_ops_per_token", "Llama 3 8B MLP ops per token, all its layers", fmt=",d"),
        Headline("llama31_405b_mlp_ops_per_token", "Llama 3.1 405B MLP ops per token (exercise)", fmt=",d"),
        Headline("llama31_405b_mlp_tokens_per_s", "405B tokens/s at 5e14 ops/s (exercise)", fmt=".0f"),
    ),
    config_keys=("seed",),
)

# --- 1. vectors: add, scale, length, dot, angle ------------------------------------------------

A, B = np.array([2.0, 1.0]), np.array([1.0, 2.5])
# the 3-D "by hand" vectors: b is nearly aligned with a, c is turned 90 degrees in a's plane,
# d points along an axis a does not use at all
A3 = np.array([1.0, 2.0, 0.0])
B3, C3, D3 = np.array([2.0, 1.0, 0.0]), np.array([-2.0, 1.0, 0.0]), np.array([0.0, 0.0, 3.0])


def vector_toys() -> dict:
    """The vectors chapter, sections 2.1-2.2."""
    len_a, len_b, cos_ab = length(A), length(B), cosine(A, B)
    return {
        "vec_sum": A + B,
        "vec_scaled": 3 * A,
        "vec_length_a": len_a,
        "vec_length_a_squared": dot(A, A),  # 5: the length is sqrt(5)
        "vec_length_b": len_b,
        "vec_dot_ab": dot(A, B),
        "vec_dot_ab_naive": dot_naive(A, B),
        "vec_cosine_ab": cos_ab,
        "vec_angle_ab_deg": angle_deg(A, B),
        # the widget multiplies its rounded display values back together: 2.24 x 2.69 x 0.75
        "vec_dot_from_rounded": round(float(len_a), 2) * round(float(len_b), 2) * round(float(cos_ab), 2),
        "vec_dot_from_lengths": len_a * len_b * cos_ab,  # unrounded: a.b = |a||b|cos exactly
        "vec3_dot_ab": dot(A3, B3),
        "vec3_dot_ac": dot(A3, C3),
        "vec3_dot_ad": dot(A3, D3),
        "vec3_angle_ac_deg": angle_deg(A3, C3),
        "vec3_angle_ad_deg": angle_deg(A3, D3),
    }


# --- 2. a matrix is a function; two of them are one ---------------------------------------------

STRETCH = np.array([[2.0, 0.0], [0.0, 0.5]])


def rotation(degrees: float) -> np.ndarray:
    """The textbook rotation matrix [[cos, -sin], [sin, cos]].

    As ``W @ x`` on a column vector it turns counter-clockwise; as ``x @ W`` on a row vector, the
    text's convention, the same numbers turn clockwise.
    """
    t = math.radians(degrees)
    return np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])


def apply_rows(x, W) -> np.ndarray:
    """xW for a row vector x, or for every row of a stack X: output j = x . (column j of W)."""
    return np.asarray(x) @ np.asarray(W)


def apply_rows_naive(x: Sequence[float], W) -> list[float]:
    """The same, written as the text's formula: (output j) = sum over i of x_i * W_ij."""
    W = np.asarray(W, dtype=float).tolist()
    if len(W) != len(x):
        raise ValueError(f"xW: x has {len(x)} elements but W has {len(W)} rows")
    return [sum(x[i] * W[i][j] for i in range(len(x))) for j in range(len(W[0]))]


def grid(n: int = 11, lim: float = 1.0) -> np.ndarray:
    """Points of a square grid, one per row, to push through maps."""
    s = np.linspace(-lim, lim, n)
    X, Y = np.meshgrid(s, s)
    return np.column_stack([X.ravel(), Y.ravel()])


def composition() -> dict:
    """Stretch, then rotate 45 degrees: two maps, and the one matrix that does both."""
    S, R = STRETCH, rotation(45.0)
    SR = S @ R  # row vectors: x S R = x (S R), first map on the left
    P = grid()
    # identity leaves the grid alone; [[1, 0], [0, 0]] flattens it onto a line (rank 1)
    flatten = np.array([[1.0, 0.0], [0.0, 0.0]])
    return {
        "stretch": S,
        "rotation_45": R,
        "stretch_then_rotate": SR,
        "stretch_then_rotate_flat": SR.ravel(),  # [[a, b], [c, d]] as [a, b, c, d], for the claim
        "rotate_then_stretch_flat": (R @ S).ravel(),  # the other order: a different map
        "stretch_then_rotate_ccw_flat": (S @ R.T).ravel(),  # counter-clockwise for row vectors
        "composition_max_abs_diff": np.abs(apply_rows(apply_rows(P, S), R) - apply_rows(P, SR)).max(),
        "composition_naive_max_abs_diff": max(
            abs(a - b) for p in P for a, b in zip(apply_rows_naive(apply_rows_naive(list(p), S), R), apply_rows(p, SR))
        ),
        "flatten_rank": int(np.linalg.matrix_rank(apply_rows(P, flatten))),
        "grid_rank": int(np.linalg.matrix_rank(P)),
        "rotation_keeps_length_max_abs_diff": np.abs(
            np.linalg.norm(apply_rows(P, R), axis=1) - np.linalg.norm(P, axis=1)
        ).max(),
    }


def linear_check(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, y: np.ndarray, c: float = 2.0) -> float:
    """How far f is from linear on one example: |f(c x + y) - (c f(x) + f(y))|, largest element."""
    return float(np.abs(f(c * x + y) - (c * f(x) + f(y))).max())


def identity(z):
    """No bend at all: the 'activation' that leaves a layer linear."""
    return np.asarray(z)


# --- 3. neurons, and a layer of them -------------------------------------------------------------

NEURON_INPUTS = [2.0, 1.0, 0.5]
NEURON_WEIGHTS = [0.5, -1.0, 2.0]
NEURON_BIAS = 1.0
LAYER_INPUT = [1.0, 2.0, 0.0]
LAYER_WEIGHTS = [[2.0, 0.0, 1.0], [1.0, 3.0, 0.0]]  # one row per neuron
# the single-detector widget of the vectors chapter: weight row [1, 0.5], bias -0.5
DETECTOR_W, DETECTOR_B = [1.0, 0.5], -0.5


def neuron(inputs: Sequence[float], weights: Sequence[float], bias: float, activation: Callable = relu) -> dict:
    """One neuron in its four steps: products, their sum, plus the bias, then the activation."""
    if len(inputs) != len(weights):
        raise ValueError(f"neuron: {len(inputs)} inputs but {len(weights)} weights")
    products = [w * x for w, x in zip(weights, inputs)]  # step 1: one volume knob per input
    total = sum(products)  # step 2: one verdict
    pre = total + bias  # step 3: shift by the threshold of doubt
    out = float(activation(pre))  # step 4: squash
    return {"products": products, "sum": total, "pre_activation": pre, "output": out}


def neuron_toys() -> dict:
    """The neurons lesson's neuron and two-neuron layer, and the vectors chapter's single-detector widget."""
    n = neuron(NEURON_INPUTS, NEURON_WEIGHTS, NEURON_BIAS)
    W = np.array(LAYER_WEIGHTS)
    fires = neuron([2.0, 1.5], DETECTOR_W, DETECTOR_B)
    silent = neuron([-1.0, 1.0], DETECTOR_W, DETECTOR_B)
    no_act = neuron(NEURON_INPUTS, NEURON_WEIGHTS, -3.0, activation=identity)
    return {
        "neuron_products": n["products"],
        "neuron_sum": n["sum"],
        "neuron_pre_activation": n["pre_activation"],
        "neuron_output": n["output"],
        "neuron_output_dot": relu(dot(np.array(NEURON_WEIGHTS), np.array(NEURON_INPUTS)) + NEURON_BIAS),
        # the same neuron with its bias pushed to -3 and no squash lets a negative through
        "neuron_no_activation_negative": no_act["output"],
        # a layer: each neuron asks its own question of the same input (no bias, no squash)
        "layer_q1": neuron(LAYER_INPUT, LAYER_WEIGHTS[0], 0.0, activation=identity)["output"],
        "layer_q2": neuron(LAYER_INPUT, LAYER_WEIGHTS[1], 0.0, activation=identity)["output"],
        "layer_output": matvec(W, np.array(LAYER_INPUT)),
        "layer_output_naive": matvec_naive(W, LAYER_INPUT),
        "shape_rule_2x3_3x2": list((np.ones((2, 3)) @ np.ones((3, 2))).shape),
        "detector_fires_pre": fires["pre_activation"],
        "detector_fires_out": fires["output"],
        "detector_silent_pre": silent["pre_activation"],
        "detector_silent_out": silent["output"],
        # "double -4 and you get 0 either way"
        "relu_of_double_minus4": float(relu(2 * -4.0)),
        "double_relu_of_minus4": 2 * float(relu(-4.0)),
        "relu_of_double_4": float(relu(2 * 4.0)),
        "relu_linearity_gap": linear_check(relu, np.array([-4.0, 1.0]), np.array([3.0, -2.0])),
        "matrix_linearity_gap": linear_check(lambda v: v @ STRETCH, np.array([-4.0, 1.0]), np.array([3.0, -2.0])),
    }


# --- 4. the MLP by hand: expand, bend, compress ---------------------------------------------------

W_IN = np.array([[1.0, 0.0, 0.7], [0.0, 1.0, -0.7]])  # 2 x 3: one detector per column
B_IN = np.array([-0.5, -0.5, 0.2])
W_OUT = np.array([[1.0, 0.2], [0.2, 1.0], [0.5, -0.5]])  # 3 x 2: one write-back row per detector
MLP_INPUTS = ([1.0, 2.0], [1.0, -2.0])


def mlp(x, activation: Callable = relu, W_in=W_IN, b=B_IN, W_out=W_OUT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(h, a, y) for a row vector x, or every row of a stack: h = x W_in + b, a = act(h), y = a W_out."""
    h = np.asarray(x) @ W_in + b  # expand: one score per detector
    a = activation(h)  # bend: each detector gated on its own
    return h, a, a @ W_out  # compress: every open gate adds its row of W_out


def mlp_naive(x: Sequence[float], activation: Callable = relu) -> tuple[list, list, list]:
    """The same three steps as loops, exactly as the text works them by hand."""
    h = [sum(x[i] * W_IN[i][j] for i in range(2)) + B_IN[j] for j in range(3)]
    a = [float(activation(v)) for v in h]
    y = [sum(a[j] * W_OUT[j][k] for j in range(3)) for k in range(2)]
    return h, a, y


def mlp_toys() -> dict:
    out = {}
    for tag, x in zip(("pos", "neg"), MLP_INPUTS):
        h, a, y = mlp(np.array(x))
        hn, an, yn = mlp_naive(x)
        out.update(
            {
                f"mlp_{tag}_input": x,
                f"mlp_{tag}_h": h,
                f"mlp_{tag}_gates": a,
                f"mlp_{tag}_output": y,
                f"mlp_{tag}_output_naive": yn,
                f"mlp_{tag}_naive_max_abs_diff": float(np.abs(np.array(yn) - y).max()),
                f"mlp_{tag}_output_linear": mlp(np.array(x), identity)[2],  # no ReLU: one matrix
            }
        )
    out["mlp_neg_h2"], out["mlp_neg_h3"] = out["mlp_neg_h"][1], out["mlp_neg_h"][2]
    out["mlp_linear_single_matrix"] = W_IN @ W_OUT  # without the bend: x W_in W_out + b W_out
    out["mlp_linear_offset"] = B_IN @ W_OUT
    return out


def mlp_table() -> list[dict]:
    """The two worked inputs, one row per detector: score, gate, and what it writes back."""
    rows = []
    for x in MLP_INPUTS:
        h, a, y = mlp(np.array(x))
        for j in range(3):
            rows.append(
                {
                    "input": str(x),
                    "detector": j + 1,
                    "score_h": h[j],
                    "gate_a": a[j],
                    "writes": str((a[j] * W_OUT[j]).round(4).tolist()),
                    "output_y": str(y.round(4).tolist()),
                }
            )
    return rows


def fold(seed: int, n: int = 2000, lim: float = 3.0) -> dict:
    """The exercise: n random 2-vectors (uniform in [-lim, lim]^2) through the MLP, with and without ReLU.

    Without ReLU the MLP is one affine map, so an affine least-squares fit explains the outputs to
    rounding error. With ReLU it is not: the fit leaves a residual, and the points fall into as
    many linear pieces as there are distinct on/off patterns of the three detectors.
    """
    rng = np.random.default_rng(seed)
    X = rng.uniform(-lim, lim, size=(n, 2))
    _, a_lin, y_lin = mlp(X, identity)
    _, a, y = mlp(X, relu)
    design = np.column_stack([X, np.ones(n)])

    def affine_residual(Y):
        coef, *_ = np.linalg.lstsq(design, Y, rcond=None)
        return float(np.sqrt(np.mean((design @ coef - Y) ** 2)))

    patterns = {tuple(row) for row in (a > 0).astype(int).tolist()}
    return {
        "X": X,
        "y_linear": y_lin,
        "y_relu": y,
        "gates": a,
        "metrics": {
            "fold_points": n,
            "fold_input_range": lim,
            "fold_linear_affine_residual_rms": affine_residual(y_lin),
            "fold_relu_affine_residual_rms": affine_residual(y),
            "fold_gate_off_fraction": (a <= 0).mean(axis=0),
            "fold_gate_patterns": len(patterns),
            "fold_relu_output_std": y.std(axis=0),
            "fold_linear_output_std": y_lin.std(axis=0),
        },
    }


# --- 5. activations ------------------------------------------------------------------------------

ACTIVATIONS: dict[str, Callable] = {"ReLU": relu, "GELU": gelu, "SiLU": silu, "tanh": tanh}


def activation_metrics() -> dict:
    z = np.linspace(-6.0, 6.0, 1_200_001)  # step 1e-5
    out = {}
    for name, f in ACTIVATIONS.items():
        v = f(z)
        key = name.lower()
        out[f"{key}_min"] = v.min()
        out[f"{key}_argmin"] = z[np.argmin(v)]
        out[f"{key}_at_minus1"] = float(f(np.array(-1.0)))
        out[f"{key}_at_1"] = float(f(np.array(1.0)))
    out["tanh_at_6"] = float(tanh(np.array(6.0)))  # flat: a big push barely moves it
    return out


# --- 6. the numbers of Llama 3 -------------------------------------------------------------------

GPU_OPS_PER_S = 5e14  # the exercise's GPU: 5 x 10^14 useful operations per second


def mlp_numbers(a: configs.Architecture) -> dict:
    """The text's MLP arithmetic for one configuration: W_in + W_out only (the gate ignored)."""
    c, h = a.d_model, a.d_ff
    mlp_numbers_ = 2 * c * h
    expand = 2 * c * h  # [1, C] x [C, H]: a multiply and an add per weight
    compress = 2 * h * c
    per_layer = expand + compress
    ops_all = per_layer * a.n_layers
    params_all = mlp_numbers_ * a.n_layers
    counted = pc.count(a)  # the whole model, the gate matrix included
    return {
        "width": c,
        "hidden": h,
        "hidden_ratio": h / c,
        "vocab": a.vocab,
        "layers": a.n_layers,
        "embedding_numbers": a.vocab * c,
        "mlp_numbers": mlp_numbers_,
        "expand_ops": expand,
        "compress_ops": compress,
        "mlp_ops_per_layer": per_layer,
        "mlp_ops_per_token": ops_all,
        "mlp_params": params_all,
        "mlp_ops_per_param": ops_all / params_all,
        "mlp_tokens_per_s": GPU_OPS_PER_S / ops_all,
        # the real SwiGLU MLP has a third matrix, the gate: 3 x C x H per layer
        "swiglu_ops_per_token": 2 * counted["ffn_total"],
        "swiglu_params": counted["ffn_total"],
        "swiglu_tokens_per_s": GPU_OPS_PER_S / (2 * counted["ffn_total"]),
        "total_params": counted["total"],
        "embedding_share": a.vocab * c / counted["total"],
    }


def llama_metrics() -> dict:
    out = {}
    for prefix, a in (("llama3_8b", configs.LLAMA3_8B), ("llama31_405b", configs.LLAMA31_405B)):
        out.update({f"{prefix}_{k}": v for k, v in mlp_numbers(a).items()})
    # matrices change dimension: [4096] x [4096, 128] -> [128], [4096] x [4096, 14336] -> [14336]
    x = np.zeros(4096, dtype=np.float32)
    out["shape_4096_to_128"] = (x @ np.zeros((4096, 128), dtype=np.float32)).shape[0]
    out["shape_4096_to_14336"] = (x @ np.zeros((4096, 14336), dtype=np.float32)).shape[0]
    return out


def gpt_style_ffn(d: int = 4096) -> dict:
    """The neurons lesson's FFN: d -> 4d -> d, two matrices (biases too, GPT-style), and SwiGLU's narrower width."""
    a = configs.Architecture(
        "GPT-style",
        d_model=d,
        d_ff=4 * d,
        n_layers=1,
        vocab=0,
        n_heads=d // 128,
        n_kv_heads=d // 128,
        head_dim=128,
        gated_ffn=False,
        biases=True,
        norm_vectors=2,
    )
    c = pc.count(a)
    swiglu_hidden = 2 / 3 * 4 * d  # three matrices of d x (8d/3) hold what two of d x 4d hold
    return {
        "gpt_ffn_width": d,
        "gpt_ffn_hidden": 4 * d,
        "gpt_ffn_widening": 4 * d / d,
        "gpt_ffn_numbers_per_layer": 2 * d * 4 * d,
        "gpt_ffn_share_of_block": c["block_ffn_share"],
        "gpt_ffn_share_of_block_no_bias": 8 * d * d / (8 * d * d + 4 * d * d),
        "swiglu_hidden_keeps_params": swiglu_hidden,
        "swiglu_hidden_over_4d": swiglu_hidden / (4 * d),
        "swiglu_params_over_two_matrix_params": 3 * d * swiglu_hidden / (2 * d * 4 * d),
    }


def llama_table() -> list[dict]:
    """The vectors chapter's "Beacon's numbers" table, each cell recomputed from the configurations."""
    rows = []
    m8, m405 = mlp_numbers(configs.LLAMA3_8B), mlp_numbers(configs.LLAMA31_405B)
    for label, key, how in (
        ("Width C", "width", "published"),
        ("MLP hidden width", "hidden", "published"),
        ("hidden / C", "hidden_ratio", "= hidden / C"),
        ("Vocabulary V", "vocab", "published"),
        ("Layers", "layers", "published"),
        ("Embedding table W_E (numbers)", "embedding_numbers", "= V x C"),
        ("One MLP, W_in + W_out (numbers)", "mlp_numbers", "= 2 x C x hidden"),
        ("MLP ops per token per layer", "mlp_ops_per_layer", "= 2 x (2 x C x hidden)"),
        ("MLP ops per token, all layers", "mlp_ops_per_token", "x layers"),
        ("MLP ops per MLP parameter", "mlp_ops_per_param", "ops / params"),
        ("Tokens/s through the MLPs at 5e14 ops/s", "mlp_tokens_per_s", "5e14 / ops per token"),
        ("Same with SwiGLU's gate matrix", "swiglu_tokens_per_s", "5e14 / (2 x 3 x C x hidden x layers)"),
        ("All parameters", "total_params", "bytesup.model.param_counts"),
    ):
        rows.append({"quantity": label, "Llama 3 8B": m8[key], "Llama 3.1 405B": m405[key], "how": how})
    return rows


# --- 7. the exercise with W = [[0, 1], [-1, 0]] ------------------------------------------------

QUARTER_TURN = np.array([[0.0, 1.0], [-1.0, 0.0]])


def exercises() -> dict:
    W = QUARTER_TURN
    pts = {"e1": [1.0, 0.0], "e2": [0.0, 1.0], "p": [2.0, 3.0]}
    out = {f"ex_w_times_{k}": apply_rows(np.array(v), W) for k, v in pts.items()}
    out["ex_w_angle_deg"] = math.degrees(
        math.atan2(*apply_rows(np.array([1.0, 0.0]), W)[::-1])
    )  # +90: counter-clockwise
    out["ex_w_keeps_length"] = bool(
        np.isclose(length(apply_rows(np.array([2.0, 3.0]), W)), length(np.array([2.0, 3.0])))
    )
    out["ex_w_squared"] = W @ W  # [[-1, 0], [0, -1]]: a half turn, every vector flipped
    out["ex_w_squared_flat"] = (W @ W).ravel()
    return out


# --- the whole lesson ---------------------------------------------------------------------------


def run(seed: int = 0, n_points: int = 2000) -> tuple[dict, dict]:
    """(metrics, tables): every number of the lesson as a flat dict (numpy values; see lessons.plain),
    and what the notebook shows and writes, each computed once: "fold" (the fold's arrays),
    "mlp_by_hand" (mlp_table's rows) and "llama3_numbers" (llama_table's rows)."""
    m: dict = {"seed": seed}
    m.update(vector_toys())
    m.update(composition())
    m.update(neuron_toys())
    m.update(mlp_toys())
    folded = fold(seed, n_points)
    m.update(folded["metrics"])
    m.update(activation_metrics())
    m.update(llama_metrics())
    m.update(gpt_style_ffn())
    m.update(exercises())
    return m, {"fold": folded, "mlp_by_hand": mlp_table(), "llama3_numbers": llama_table()}


def compute(seed: int = 0, n_points: int = 2000) -> dict:
    """The metrics of ``run`` alone."""
    return run(seed, n_points)[0]


def evaluate_claims(metrics: Mapping, *, model: str = "", sha256: str = "", metadata: Mapping | None = None):
    """Every claim of this lesson is model-independent; the context is still computed, not assumed."""
    context = claims_mod.run_context(model, sha256, metadata)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures ------------------------------------------------------------------------------------


def plot_activations(lo: float = -4.0, hi: float = 4.0):
    """ReLU, GELU, SiLU and tanh on one axis: all bend, each differently."""
    z = np.linspace(lo, hi, 801)
    fig, ax = figure()
    ax.plot(z, z, color="0.75", lw=1, ls="--", label="identity (no bend)")
    for (name, f), style in zip(ACTIVATIONS.items(), ("-", "-", "-", "-.")):
        ax.plot(z, f(z), ls=style, lw=1.8, label=name)
    zs = float(z[np.argmin(silu(z))])
    ax.plot([zs], [float(silu(zs))], "o", color="C2", ms=4)
    ax.annotate(
        f"SiLU min {float(silu(zs)):.3f} at z = {zs:.2f}",
        (zs, float(silu(zs))),
        xytext=(-3.9, -1.45),
        arrowprops={"arrowstyle": "-", "color": "0.5"},
    )
    ax.axhline(0, color="k", lw=0.6)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlim(lo, hi)
    ax.set_ylim(-1.6, hi)
    ax.set_xlabel("z (the neuron's score before the activation)")
    ax.set_ylabel("activation(z)")
    ax.set_title("Four activations: ReLU, GELU, SiLU, tanh")
    legend_below(fig, ax, ncol=2)
    return fig


def plot_fold(f: Mapping, title: str = ""):
    """Inputs, outputs without the ReLU (one affine map), outputs with it (folded)."""
    X, y_lin, y = f["X"], f["y_linear"], f["y_relu"]
    colour = np.arctan2(X[:, 1], X[:, 0])  # each point keeps its input's colour through the maps
    fig, axes = figure(3, 1, figsize=(6.4, 12.0))  # one panel under the other: each as wide as a phone
    for ax, pts, name in zip(axes, (X, y_lin, y), ("input x", "output, no ReLU", "output, ReLU")):
        ax.scatter(pts[:, 0], pts[:, 1], c=colour, cmap="hsv", s=3, lw=0)
        ax.set_title(name)
        ax.set_aspect("equal")
    lim = float(np.abs(X).max())
    s = np.linspace(-lim, lim, 2)
    for j in range(3):  # each detector's boundary x . W_in[:, j] + b_j = 0, drawn on the input panel
        w1, w2 = W_IN[:, j]
        if abs(w2) > 1e-12:
            axes[0].plot(s, -(w1 * s + B_IN[j]) / w2, "k--", lw=0.8)
        else:
            axes[0].axvline(-B_IN[j] / w1, color="k", ls="--", lw=0.8)
    axes[0].set_xlim(-lim, lim)
    axes[0].set_ylim(-lim, lim)
    if title:
        fig.suptitle(title)
    return fig


def plot_composition():
    """A grid stretched, then rotated; in the last panel the product matrix, applied once, lands on the same points."""
    S, R = STRETCH, rotation(45.0)
    n = 9
    P = grid(n)

    def draw(ax, pts, **kw):  # the grid's rows and columns as lines: they stay straight under any matrix
        G = pts.reshape(n, n, 2)
        for k in range(n):
            ax.plot(G[k, :, 0], G[k, :, 1], color="C0", lw=0.7, **kw)
            ax.plot(G[:, k, 0], G[:, k, 1], color="C1", lw=0.7, **kw)

    fig, axes = figure(3, 1, figsize=(6.4, 13.0))  # one panel under the other: each as wide as a phone
    draw(axes[0], P)
    axes[0].set_title("grid x")
    draw(axes[1], P @ S)
    axes[1].set_title("x S (stretch)")
    draw(axes[2], P @ S @ R)
    once = P @ (S @ R)
    axes[2].plot(once[:, 0], once[:, 1], "o", mfc="none", mec="k", ms=3, mew=0.5, label="x (S R), one matrix")
    axes[2].set_title("(x S) R (then rotate)")
    for ax in axes:
        ax.plot([0], [0], "k+", ms=8)  # the origin never moves
        ax.set_xlim(-2.2, 2.2)
        ax.set_ylim(-2.2, 2.2)
        ax.set_aspect("equal")
    legend_below(fig, axes[2])
    SR = S @ R
    fig.suptitle(
        f"S R = [[{SR[0, 0]:.2f}, {SR[0, 1]:.2f}], [{SR[1, 0]:.2f}, {SR[1, 1]:.2f}]]\n(row vectors, x W: S first)"
    )
    return fig
