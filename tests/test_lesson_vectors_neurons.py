"""Lesson 4: the by-hand examples, the composition convention, the fold, Llama 3's numbers, and the notebook."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from bytesup.lessons import claims, plain
from bytesup.lessons import vectors_neurons as lesson


@pytest.fixture(scope="module")
def m():
    return lesson.compute(seed=0)


def test_vectors_by_hand(m):
    assert plain(m["vec_sum"]) == [3.0, 3.5] and plain(m["vec_scaled"]) == [6.0, 3.0]
    assert m["vec_dot_ab"] == 4.5 and m["vec_dot_ab_naive"] == 4.5
    assert m["vec_length_a"] == pytest.approx(math.sqrt(5)) and m["vec_length_a_squared"] == 5.0
    assert m["vec_length_b"] == pytest.approx(math.sqrt(7.25))
    assert m["vec_cosine_ab"] == pytest.approx(4.5 / math.sqrt(5 * 7.25))
    # the angle is 41.63 degrees; the text's widget shows 41 (it drops decimals)
    assert m["vec_angle_ab_deg"] == pytest.approx(math.degrees(math.atan2(2.5, 1) - math.atan2(1, 2)))
    assert math.floor(m["vec_angle_ab_deg"]) == 41
    assert m["vec_dot_from_rounded"] == pytest.approx(2.24 * 2.69 * 0.75)
    assert m["vec_dot_from_lengths"] == pytest.approx(4.5, abs=1e-12)
    assert (m["vec3_dot_ab"], m["vec3_dot_ac"], m["vec3_dot_ad"]) == (4.0, 0.0, 0.0)
    assert m["vec3_angle_ac_deg"] == 90.0 and m["vec3_angle_ad_deg"] == 90.0


def test_composition_convention_gives_the_printed_matrix(m):
    S, R = lesson.STRETCH, lesson.rotation(45)
    s = math.sqrt(0.5)
    np.testing.assert_allclose(m["stretch_then_rotate"], [[2 * s, -2 * s], [0.5 * s, 0.5 * s]], atol=1e-15)
    assert np.round(m["stretch_then_rotate"], 2).tolist() == [[1.41, -1.41], [0.35, 0.35]]
    # the other order and the counter-clockwise row rotation are different matrices
    assert np.round(m["rotate_then_stretch_flat"], 2).tolist() == [1.41, -0.35, 1.41, 0.35]
    assert np.round(m["stretch_then_rotate_ccw_flat"], 2).tolist() == [1.41, 1.41, -0.35, 0.35]
    # row vectors: the textbook matrix turns [1, 0] clockwise
    assert np.allclose(lesson.apply_rows([1.0, 0.0], R), [s, -s])
    assert lesson.apply_rows_naive([1.0, 2.0], S) == [2.0, 1.0]
    assert m["composition_max_abs_diff"] == 0.0 and m["composition_naive_max_abs_diff"] < 1e-15
    assert (m["flatten_rank"], m["grid_rank"]) == (1, 2)
    assert m["rotation_keeps_length_max_abs_diff"] < 1e-15
    with pytest.raises(ValueError, match="rows"):
        lesson.apply_rows_naive([1.0, 2.0, 3.0], S)


def test_neurons_and_layers(m):
    n = lesson.neuron([2, 1, 0.5], [0.5, -1, 2], 1.0)
    assert n == {"products": [1.0, -1.0, 1.0], "sum": 1.0, "pre_activation": 2.0, "output": 2.0}
    assert m["neuron_output_dot"] == 2.0 and m["neuron_no_activation_negative"] == -2.0
    assert lesson.neuron([2, 1, 0.5], [0.5, -1, 2], -3.0)["output"] == 0.0  # ReLU silences it
    assert (m["layer_q1"], m["layer_q2"]) == (2.0, 7.0)
    assert plain(m["layer_output"]) == [2.0, 7.0] and m["layer_output_naive"] == [2.0, 7.0]
    assert m["shape_rule_2x3_3x2"] == [2, 2]
    assert (m["detector_fires_pre"], m["detector_fires_out"]) == (2.25, 2.25)
    assert (m["detector_silent_pre"], m["detector_silent_out"]) == (-1.0, 0.0)
    assert m["relu_of_double_minus4"] == 0.0 and m["relu_linearity_gap"] > 0 and m["matrix_linearity_gap"] == 0.0
    with pytest.raises(ValueError, match="3 inputs but 2 weights"):
        lesson.neuron([1, 2, 3], [1, 2], 0.0)


def test_mlp_by_hand(m):
    np.testing.assert_allclose(m["mlp_pos_h"], [0.5, 1.5, -0.5], atol=1e-15)
    np.testing.assert_allclose(m["mlp_pos_gates"], [0.5, 1.5, 0.0], atol=1e-15)
    np.testing.assert_allclose(m["mlp_pos_output"], [0.8, 1.6], atol=1e-15)
    np.testing.assert_allclose(m["mlp_neg_h"], [0.5, -2.5, 2.3], atol=1e-15)
    np.testing.assert_allclose(m["mlp_neg_gates"], [0.5, 0.0, 2.3], atol=1e-15)
    np.testing.assert_allclose(m["mlp_neg_output"], [1.65, -1.05], atol=1e-15)
    assert m["mlp_pos_naive_max_abs_diff"] == 0.0 and m["mlp_neg_naive_max_abs_diff"] == 0.0
    # without the ReLU the MLP is one affine map x M + c
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(m["mlp_neg_output_linear"], x @ m["mlp_linear_single_matrix"] + m["mlp_linear_offset"])
    rows = lesson.mlp_table()
    assert len(rows) == 6 and [r["gate_a"] for r in rows] == pytest.approx([0.5, 1.5, 0.0, 0.5, 0.0, 2.3])


def test_fold_is_seeded_and_measures_the_bend():
    f0, f0b, f1 = lesson.fold(0), lesson.fold(0), lesson.fold(1)
    np.testing.assert_array_equal(f0["X"], f0b["X"])
    assert not np.array_equal(f0["X"], f1["X"])
    assert f0["X"].shape == (2000, 2) and np.abs(f0["X"]).max() <= 3.0
    fm = f0["metrics"]
    assert fm["fold_linear_affine_residual_rms"] < 1e-12  # one affine map explains the linear version
    assert fm["fold_relu_affine_residual_rms"] > 0.1  # nothing affine explains the folded one
    assert fm["fold_gate_patterns"] == 7  # three lines cut the square into 7 regions
    # ReLU outputs are sums of non-negative gates times W_out rows: every gate output is >= 0
    assert (f0["gates"] >= 0).all()
    assert lesson.fold(0, n=10)["metrics"]["fold_points"] == 10


def test_activations(m):
    assert m["silu_min"] == pytest.approx(-0.2784645, abs=1e-7) and m["silu_argmin"] == pytest.approx(
        -1.27846, abs=1e-5
    )
    assert m["gelu_min"] == pytest.approx(-0.17, abs=0.001) and m["relu_min"] == 0.0
    assert m["tanh_at_6"] < 1 and m["tanh_at_1"] == pytest.approx(math.tanh(1))


def test_llama_numbers(m):
    assert m["llama3_8b_embedding_numbers"] == 128256 * 4096 == 525_336_576
    assert m["llama31_405b_embedding_numbers"] == 2_101_346_304
    assert m["llama3_8b_mlp_numbers"] == 2 * 4096 * 14336 == 117_440_512
    assert m["llama31_405b_mlp_numbers"] == 1_744_830_464
    assert m["llama3_8b_mlp_ops_per_layer"] == 234_881_024
    assert m["llama3_8b_mlp_ops_per_token"] == 7_516_192_768
    assert m["llama3_8b_total_params"] == 8_030_261_248
    assert m["llama3_8b_embedding_share"] == pytest.approx(0.06542, abs=1e-5)
    # exercise 2: 405B, 126 layers, gate ignored as in the text
    assert m["llama31_405b_mlp_ops_per_token"] == 126 * 4 * 16384 * 53248 == 439_697_276_928
    assert m["llama31_405b_mlp_ops_per_param"] == 2.0
    assert m["llama31_405b_mlp_tokens_per_s"] == pytest.approx(5e14 / 439_697_276_928)
    assert m["llama31_405b_swiglu_ops_per_token"] == 2 * 126 * 3 * 16384 * 53248
    assert (m["shape_4096_to_128"], m["shape_4096_to_14336"]) == (128, 14336)
    assert m["gpt_ffn_numbers_per_layer"] == 134_217_728
    assert m["gpt_ffn_share_of_block_no_bias"] == pytest.approx(2 / 3)
    assert m["swiglu_params_over_two_matrix_params"] == pytest.approx(1.0)
    table = lesson.llama_table()
    assert table[0] == {"quantity": "Width C", "Llama 3 8B": 4096, "Llama 3.1 405B": 16384, "how": "published"}


def test_exercise_quarter_turn(m):
    assert plain(m["ex_w_times_e1"]) == [0.0, 1.0] and plain(m["ex_w_times_e2"]) == [-1.0, 0.0]
    assert plain(m["ex_w_times_p"]) == [-3.0, 2.0]
    assert m["ex_w_angle_deg"] == 90.0 and m["ex_w_keeps_length"] is True
    assert plain(m["ex_w_squared"]) == [[-1.0, 0.0], [0.0, -1.0]]


@pytest.mark.parametrize("model", ["smollm2-135m", "deepseek-coder-6.7b-instruct-q8_0"])
def test_every_claim_is_model_independent_and_reproduced(m, model):
    results = lesson.evaluate_claims(m, model=model)
    assert len(results) >= 60
    assert {r.claim.metric for r in results} <= set(m)
    assert all(not r.claim.requires for r in results)
    bad = [(r.claim.claim_id, r.claim.published, r.measured) for r in results if r.status != "reproduced"]
    assert not bad, bad


def test_figures_are_deterministic(tmp_path):
    from bytesup.lessons import save_figure

    a = save_figure(lesson.plot_fold(lesson.fold(0, 200)), tmp_path / "a.png").read_bytes()
    b = save_figure(lesson.plot_fold(lesson.fold(0, 200)), tmp_path / "b.png").read_bytes()
    assert a == b and a[:8] == b"\x89PNG\r\n\x1a\n"
    save_figure(lesson.plot_activations(), tmp_path / "act.png")
    save_figure(lesson.plot_composition(), tmp_path / "comp.png")


NOTEBOOK = Path(__file__).resolve().parents[1] / "workflow" / "notebooks" / "00_vectors_neurons_nonlinearity.ipynb"


def test_run_returns_the_tables_it_computed_once():
    metrics, tables = lesson.run(seed=3, n_points=50)
    assert set(tables) == {"fold", "mlp_by_hand", "llama3_numbers"}
    assert tables["fold"]["X"].shape == (50, 2) and tables["mlp_by_hand"] == lesson.mlp_table()
    assert metrics["fold_points"] == 50 and metrics["seed"] == 3


def test_the_notebook_does_the_by_hand_steps_in_its_cells_with_numpy():
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in (
        "dot_ab = a @ b",
        "SR = S @ R",
        "products = weights * inputs",
        "h = x @ W_in + b_in",
        "a = np.maximum(h, 0.0)",
        "y = a @ W_out",
    ):
        assert step in code, step
    assert "matplotlib.use" not in code and "show(" not in code


@pytest.mark.slow  # a whole notebook again: make test runs every notebook once (test_notebooks)
def test_the_notebook_on_the_tiny_run_computes_what_the_package_does(standalone, finished_tiny):
    """The shared standalone run (tests/test_notebooks.py checks what every lesson's must do)."""
    seed = yaml.safe_load((finished_tiny / "config" / "config.yaml").read_text())["seed"]
    out = standalone(lesson.SPEC.id)
    got = json.loads((out / "x_metrics.json").read_text())
    want = plain(lesson.compute(seed=seed))
    for key in want:
        assert got[key] == want[key], key
    assert got["seed"] == seed and got["model"] == "tiny"
    with (out / "x_claims.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(claims.COLUMNS) and {r["status"] for r in rows} == {"reproduced"}
