"""Citations read numbers from files; the report's text escapes whatever a GGUF holds."""

import json
import re

import pytest

from bytesup.report.citations import CitationError, Ledger, read_value
from bytesup.report.doc import Doc, esc_md
from bytesup.report.formats import format_value


@pytest.fixture
def files(tmp_path):
    metrics = tmp_path / "metrics.json"
    metrics.write_text(
        json.dumps(
            {
                "x_rms": 0.170812,
                "n": 4096,
                "dequant": {"Q8_0": {"ratio": 7.5}},
                "targets": [{"name": "t", "met": False}],
                "llama.block_count": 30,
            }
        )
    )
    claims = tmp_path / "claims.csv"
    claims.write_text("claim_id,measured,status\na,1.5,reproduced\nb,x,specimen differs\nc,3,reproduced\n")
    return metrics, claims


def test_read_value_json_and_csv_keys(files):
    metrics, claims = files
    assert read_value(metrics, "x_rms") == 0.170812
    assert read_value(metrics, "dequant/Q8_0/ratio") == 7.5
    assert read_value(metrics, "targets/0/met") is False
    assert read_value(metrics, "llama.block_count") == 30  # dots belong to the key
    assert read_value(claims, "0/measured") == 1.5
    assert read_value(claims, "1/measured") == "x"
    assert read_value(claims, "count/status=reproduced") == 2
    assert read_value(claims, "rows") == 3
    with pytest.raises(CitationError, match="no key 'missing'"):
        read_value(metrics, "missing")
    with pytest.raises(CitationError, match="no row 9"):
        read_value(claims, "9/measured")


def test_format_value():
    assert format_value(0.1708123) == "0.1708"  # the one rule: four significant digits
    assert format_value(12.8349) == "12.83" and format_value(2.0507) == "2.051"
    assert format_value(0.1708123, ".4g") == "0.1708"
    assert format_value(0.7612, "%") == "76.1 %"
    assert format_value(0.7612, ".1%") == "76.1 %"  # a percentage reads the same whatever its spec
    assert format_value(0.76123, ".2%") == "76.12 %"
    assert format_value(1537807.4, ".0f") == "1,537,807" and format_value(269318.06, ".1f") == "269,318.1"
    assert format_value(12, "d") == "12" and format_value(0.1234, ".2e") == "1.23e-01"
    # an exact zero is 0 in every notation; a tiny non-zero keeps its exponent
    assert format_value(0.0, ".1e") == format_value(0, ".3g") == "0" and format_value(3e-9, ".1e") == "3.0e-09"
    assert format_value(98362432) == "98,362,432"
    assert format_value(True) == "yes"
    assert format_value([7.0, -1.0]) == "[7, -1]"


@pytest.mark.parametrize(
    "value,text",
    [
        (53084160.0, "53,084,160"),  # a whole float is a count: no 5.30842e+07
        (123456.789, "123,457"),
        (1234.5678, "1,235"),
        (99.94, "99.94"),
        (-0.183733, "-0.1837"),
        (0.0854512, "0.08545"),
        (1e-06, "1e-06"),
        (0.0, "0"),
        (float("nan"), "nan"),
    ],
)
def test_floats_without_a_format_follow_one_rule_and_no_scientific_notation_above_a_thousandth(value, text):
    assert format_value(value) == text


def test_one_format_per_quantity_wherever_it_is_cited(tmp_path):
    lesson = tmp_path / "lesson"
    lesson.mkdir()
    (lesson / "metrics.json").write_text(json.dumps({"x_length": 12.8349, "size": 96577380, "gate_share": 0.4512}))
    (lesson / "table.csv").write_text("step,size,gate_share\n0,96577380,0.4512\n")
    (tmp_path / "other.json").write_text(json.dumps({"size": 96577380}))
    ledger = Ledger(formats={"": {}, str(lesson): {"size": "bytes", "x_length": ".1f"}})
    for name in ("metrics.json", "table.csv", "other.json"):
        ledger.add_source(str(tmp_path / name) if name == "other.json" else str(lesson / name), "r")
    metrics, table = str(lesson / "metrics.json"), str(lesson / "table.csv")
    assert ledger.cite(metrics, "size").text == "96.58 MB"  # a size, with its one prefix
    assert ledger.cite(table, "0/size").text == "96.58 MB"  # the same quantity, the same rule
    assert ledger.cite(str(tmp_path / "other.json"), "size").text == "96,577,380"  # another folder: the default
    assert ledger.cite(metrics, "size", ",d").text == "96,577,380"  # an explicit format wins
    # a bare precision gives way to the one rule for a number, wherever and however it is cited
    assert ledger.cite(metrics, "x_length").text == ledger.cite(metrics, "x_length", ".3f").text == "12.83"
    # a share, by its name, is a percentage in a sentence and in a table
    assert ledger.cite(metrics, "gate_share").text == ledger.cite(table, "0/gate_share").text == "45.1 %"


def test_format_value_shows_non_printable_characters_escaped():
    # a browser reads "\r" as "\n"; shown escaped, the report says exactly what the file holds
    assert format_value("a\rb") == "a\\rb"
    assert format_value(["x\n", "\x1b[31m"]) == "[x\\n, \\x1b[31m]"
    assert format_value("Ġcat") == "Ġcat"
    assert format_value("a long text", "cut:6") == "a lon\u2026"
    assert format_value({"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'


def test_ledger_records_sha_rule_and_each_citation(files):
    metrics, _ = files
    ledger = Ledger()
    ledger.add_source(str(metrics), "lesson_03_ffn_by_hand")
    ledger.add_source("never_cited.json", "r")  # hashed when first cited: a file never cited need not exist
    c = ledger.cite(str(metrics), "x_rms", ".4g")
    src = ledger.source(str(metrics))
    assert len(src.sha256) == 64 and src.bytes == metrics.stat().st_size
    assert (c.id, c.text, c.value) == (1, "0.1708", 0.170812)
    with pytest.raises(CitationError, match="not an input of the report rule"):
        ledger.cite("elsewhere.json", "x")


HOSTILE = [
    "<script>alert(1)</script>",
    "</style><script>alert(2)</script>",
    '"><img src=x onerror=alert(3)>',
    "[click](javascript:alert(4))",
    "![img](http://example.invalid/x.png)",
    "<a href='javascript:alert(5)'>x</a>",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_is_inert_in_html_and_markdown(files, text):
    metrics, _ = files
    ledger = Ledger(root=metrics.parent)
    ledger.add_source(metrics.name, "r")
    doc = Doc(ledger, text)
    doc.heading(2, text)
    doc.para(text, ledger.cite(metrics.name, "x_rms"))
    doc.table([text], [[text]])
    html = doc.render_html()
    body = html.split("</style>", 1)[1]
    assert "<script" not in body and "<img" not in body and "<a href='javascript" not in body
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    md = doc.render_md()
    # the one link is the cited number's, to its file; no link or image of the hostile text survives
    links = re.findall(r'\]\(<([^>]*)>(?: "(?:\\.|[^"\\])*")?\)', md)
    assert links == ["../../metrics.json"], links
    stripped = re.sub(r'\]\(<[^>]*>(?: "(?:\\.|[^"\\])*")?\)', "", md)
    assert "<" not in stripped.replace("&lt;", "")
    assert "](" not in stripped
    assert esc_md(text) in md


@pytest.mark.parametrize(
    "value,fmt,text",
    [
        (96577380, "bytes", "96.58 MB"),  # one decimal prefix, the one the size calls for
        (0.09657738, "bytes:GB", "96.58 MB"),  # stored in GB, written as every size is
        (7162576896, "bytes", "7.163 GB"),
        (23040, "bytes", "23.04 kB"),
        (612, "bytes", "612 bytes"),
        (188.74368, "bytes:MB", "188.7 MB"),
        ([0.5, 0.25], "%", "[50.0 %, 25.0 %]"),  # a list: each element by the rule
        ("no CUDA device", "%", "no CUDA device"),  # a text is shown as it is, whatever the format
        (576.0, "d", "576"),
    ],
)
def test_one_rule_per_unit(value, fmt, text):
    assert format_value(value, fmt) == text


def test_text_a_model_wrote_keeps_its_line_breaks_and_nothing_else_does():
    assert format_value(" Paris.\n\nThe answer", "text") == " Paris.\n\nThe answer"
    assert format_value(" Paris.\n\nThe answer") == " Paris.\\n\\nThe answer"
    assert format_value("a\rb\nc", "text") == "a\\rb\nc"  # a carriage return is still shown escaped


def test_the_glossary_links_a_term_at_its_first_use_on_a_page():
    from bytesup.report.glossary import block_size, load

    words = load()
    linked: set[str] = set()
    parts = words.split("The KV cache grows; a KV cache, decoded by decode.", linked)
    assert parts == [
        "The ",
        ("KV cache", "g-kv-cache"),
        " grows; a KV cache, decoded by ",
        ("decode", "g-decode"),
        ".",
    ]  # the first use only, whole words only
    assert words.split("and the KV cache again", linked) == ["and the KV cache again"]  # once per page
    assert words.split("two K-quants", set()) == ["two ", ("K-quants", "g-k-quant")]  # another form, one entry
    anchors = [a for a, _, _ in words.entries()]
    assert len(anchors) == len(set(anchors)) and {"g-stream", "g-roofline", "g-rome", "g-logit-lens"} <= set(anchors)
    # a quant type's size is gguf-py's, not typed: Q8_0 keeps 32 weights in 34 bytes
    assert block_size("Q8_0") == "Q8_0 keeps 32 weights in 34 bytes: 8.5 bits per weight."
    assert dict((t, d) for _, t, d in words.entries())["Q4_1"].endswith(block_size("Q4_1"))
