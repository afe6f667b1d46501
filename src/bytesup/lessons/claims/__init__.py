"""Published numbers versus this run's numbers.

Every lesson ends the same way: for each number the course text prints, find the number this run
computed for the same thing, and say whether they agree. The verdict is one of three words:

    reproduced        the run's number rounds to what the course printed (whichever model ran)
    not reproduced    it should have matched and did not (or nothing was measured)
    specimen differs  the course's number is about its own model or machine, this run used a
                      different one, and its number is outside the claim's tolerance: agreement
                      was not expected; `measured` is still ours

A claim lists what its comparison needs in ``requires``: nothing for model-independent claims
(toy arithmetic, the course's own arithmetic on its published numbers), ``specimen`` for claims
about deepseek-coder-6.7b-instruct Q8_0, plus e.g. ``dgx-spark`` for timings on the course's
machine. The run states which of those hold (``run_context``); nothing is assumed.

"Reproduced" means "agrees to the precision printed": 0.1708 carries four decimals, so anything
within 0.00005 of it counts; 76 (%) carries none, so within 0.5. A claim may give an explicit
absolute tolerance instead.

Published numbers live in one YAML file per lesson, ``bytesup/lessons/claims/<lesson>.yaml``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from bytesup.errors import BytesupError

STATUSES = ("reproduced", "specimen differs", "not reproduced")
COLUMNS = ("claim_id", "lesson", "description", "published", "measured", "unit", "tolerance", "status")

# The course's specimen. Its sha256 is the hub's LFS hash of TheBloke/deepseek-coder-6.7B-instruct-GGUF,
# deepseek-coder-6.7b-instruct.Q8_0.gguf as last written (commit 1af42e2); the same pin as config/config.yaml.
SPECIMEN_NAME = "deepseek-coder-6.7b-instruct"
SPECIMEN_QUANT = "Q8_0"
SPECIMEN_FILE_TYPE = 7  # general.file_type of a "mostly Q8_0" GGUF (llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0)
SPECIMEN_SHA256: frozenset[str] = frozenset({"02cd6ce7ccec670cf6d3dd147932f13e584f9e964d5a3297a74b401b658471ae"})


class ClaimsError(BytesupError, ValueError):
    """A claims file or a published number that cannot be read."""


@dataclass(frozen=True)
class Claim:
    claim_id: str
    lesson: str
    description: str
    published: str  # exactly as the course prints it: "0.1708", "76 %", "[7, −1]", "1e-6"
    metric: str  # the key in the lesson's metrics dict that holds this run's value
    unit: str = ""
    requires: tuple[str, ...] = ()  # () = model-independent; ("specimen",) = about the course's model
    tolerance: float | None = None  # absolute; None = derived from the printed decimals
    scale: float = 1.0  # the metric is multiplied by this before comparing (fraction -> %: 100)
    label: str = ""  # a few words for the report's side-by-side table ("" : the metric's headline label)


@dataclass(frozen=True)
class Result:
    claim: Claim
    measured: float | list[float] | None  # already scaled to the claim's unit
    tolerance: float
    status: str

    def row(self) -> dict[str, str]:
        """One line of claims.csv, every field a string."""
        c = self.claim
        return {
            "claim_id": c.claim_id,
            "lesson": c.lesson,
            "description": c.description,
            "published": c.published,
            "measured": format_number(self.measured),
            "unit": c.unit,
            "tolerance": format(self.tolerance, ".3g"),
            "status": self.status,
        }


# --- reading a printed number --------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def _clean(text: str) -> str:
    # The course typesets minus as U+2212 and writes "≈", "about", "%", "×" and units around numbers.
    return text.replace("\u2212", "-").replace("\u2009", "").replace("\u202f", "")


def _numbers(text: str) -> list[str]:
    return [m.group(0) for m in _NUMBER.finditer(_clean(text))]


def parse_published(text: str) -> float | list[float]:
    """The value of a printed number; a bracketed list "[7, −1]" gives a list.

    Outside brackets a comma is a thousands separator ("11,008" is 11008).
    """
    s = _clean(str(text)).strip()
    if s.startswith("["):
        items = [_numbers(part) for part in s.strip("[]").split(",")]
        if not items or any(len(nums) != 1 for nums in items):
            raise ClaimsError(f"published value {text!r}: expected a list of numbers like [7, -1]")
        return [float(nums[0]) for nums in items]
    nums = _numbers(s.replace(",", ""))
    if len(nums) != 1:
        raise ClaimsError(f"published value {text!r}: expected exactly one number")
    return float(nums[0])


def _decimals(number: str) -> int:
    """How many decimal places a printed number carries, counting an exponent: 1e-6 -> 6."""
    mantissa, _, exponent = number.lower().partition("e")
    places = len(mantissa.partition(".")[2])
    return places - int(exponent or 0)


def printed_tolerance(text: str) -> float:
    """Half a unit in the last printed place: "0.1708" -> 5e-05, "76 %" -> 0.5, "1e-6" -> 5e-07.

    For a list the finest element sets it: "[1.33, −0.67, 0, 1.33]" -> 0.005 for every element
    (the 0 was printed at the same precision as its neighbours).
    """
    s = _clean(str(text)).strip()
    nums = _numbers(s) if s.startswith("[") else _numbers(s.replace(",", ""))
    if not nums:
        raise ClaimsError(f"published value {text!r}: no number in it")
    return 0.5 * 10.0 ** -max(_decimals(n) for n in nums)


def format_number(value) -> str:
    """How a measured value is written to claims.csv: up to 10 significant digits, lists bracketed."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_number(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value)
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".10g")


# --- the verdict ---------------------------------------------------------------------------


def _as_measured(value, scale: float):
    """The metric as plain floats in the claim's unit; None when there is nothing usable."""
    if value is None or isinstance(value, (str, bool)):
        return None
    if isinstance(value, Mapping):
        return None
    if hasattr(value, "tolist"):  # numpy scalar or array
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        out = [_as_measured(v, scale) for v in value]
        return None if any(v is None or isinstance(v, list) for v in out) else out
    value = float(value) * scale
    return None if math.isnan(value) else value


def _agrees(measured, published, tolerance: float) -> bool:
    # A hair of slack so that 0.17085 printed as 0.1708 is not lost to binary rounding.
    slack = tolerance * (1 + 1e-9)
    if isinstance(published, list):
        return (
            isinstance(measured, list)
            and len(measured) == len(published)
            and all(abs(m - p) <= slack for m, p in zip(measured, published))
        )
    return not isinstance(measured, list) and abs(measured - published) <= slack


def check(claim: Claim, measured, context: Iterable[str] = ()) -> Result:
    """Compare one claim with this run's value of its metric.

    ``context`` holds the flags that are true for this run ("specimen", "dgx-spark", ...).
    """
    value = _as_measured(measured, claim.scale)
    tolerance = claim.tolerance if claim.tolerance is not None else printed_tolerance(claim.published)
    agrees = value is not None and _agrees(value, parse_published(claim.published), tolerance)
    if agrees:
        status = "reproduced"  # another model that agrees within the tolerance agrees: 9 tensors are 9
    elif not set(claim.requires) <= set(context):
        status = "specimen differs"
    else:
        status = "not reproduced"  # including "nothing was measured": never assume agreement
    return Result(claim, value, tolerance, status)


def check_all(claims: Iterable[Claim], metrics: Mapping, context: Iterable[str] = ()) -> list[Result]:
    """Check every claim against ``metrics[claim.metric]`` (missing metric = nothing measured)."""
    context = frozenset(context)
    return [check(c, metrics.get(c.metric), context) for c in claims]


def write_csv(results: Sequence[Result], path: str | Path) -> Path:
    """claims.csv with exactly COLUMNS, one row per claim, in the claims file's order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in results:
            writer.writerow(r.row())
    return path


def summary(results: Iterable[Result]) -> dict[str, int]:
    """How many claims got each status, e.g. for a notebook's last line."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in results:
        counts[r.status] += 1
    return counts


# --- which run is this? --------------------------------------------------------------------


def _squash(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower())


def is_specimen(model: str = "", sha256: str = "", metadata: Mapping | None = None) -> bool:
    """Is this run's model the course's specimen, deepseek-coder-6.7b-instruct Q8_0?

    Decided from what the run passes in, in this order:
    1. a sha256, when the specimen's checksum is known (SPECIMEN_SHA256): equal or not;
    2. the GGUF metadata: general.name names the model and general.file_type is 7 (Q8_0);
    3. the model's name (config key or file name) names both the model and Q8_0.
    Anything else is not the specimen.
    """
    if sha256 and SPECIMEN_SHA256:
        return sha256.lower() in SPECIMEN_SHA256
    want = _squash(SPECIMEN_NAME)
    if metadata is not None:
        name = metadata.get("general.name")
        file_type = metadata.get("general.file_type")
        if isinstance(name, str) and want in _squash(name) and file_type == SPECIMEN_FILE_TYPE:
            return True
    squashed = _squash(model)
    return want in squashed and _squash(SPECIMEN_QUANT) in squashed


def run_context(
    model: str = "", sha256: str = "", metadata: Mapping | None = None, extra: Iterable[str] = ()
) -> frozenset[str]:
    """The flags claims may require: "specimen" when is_specimen(...), plus ``extra``."""
    flags = set(extra)
    if is_specimen(model, sha256, metadata):
        flags.add("specimen")
    return frozenset(flags)


# --- the claims files ----------------------------------------------------------------------


_CLAIM_KEYS = frozenset(
    {"claim_id", "description", "published", "metric", "unit", "requires", "tolerance", "scale", "label"}
)


def claims_from_dict(data: Mapping, source: str = "<claims>") -> list[Claim]:
    """Build Claims from the parsed YAML: {lesson: ..., claims: [{claim_id, metric, published, ...}]}."""
    lesson = data.get("lesson")
    entries = data.get("claims")
    if not isinstance(lesson, str) or not isinstance(entries, list):
        raise ClaimsError(f"{source}: needs a 'lesson' string and a 'claims' list")
    out, seen = [], set()
    for i, e in enumerate(entries):
        where = f"{source}: claims[{i}]"
        if not isinstance(e, Mapping):
            raise ClaimsError(f"{where}: each claim is a mapping of keys to values")
        unknown = set(e) - _CLAIM_KEYS
        if unknown:
            raise ClaimsError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("claim_id", "description", "published", "metric"):
            if not isinstance(e.get(key), str) or not e[key]:
                raise ClaimsError(f"{where}: '{key}' must be a non-empty string (quote numbers)")
        if e["claim_id"] in seen:
            raise ClaimsError(f"{where}: duplicate claim_id {e['claim_id']!r}")
        seen.add(e["claim_id"])
        parse_published(e["published"])  # fail here, not in the middle of a run
        out.append(
            Claim(
                claim_id=e["claim_id"],
                lesson=lesson,
                description=" ".join(e["description"].split()),
                published=e["published"],
                metric=e["metric"],
                unit=str(e.get("unit", "")),
                requires=tuple(e.get("requires", ())),
                tolerance=None if e.get("tolerance") is None else float(e["tolerance"]),
                scale=float(e.get("scale", 1.0)),
                label=" ".join(str(e.get("label", "")).split()),
            )
        )
    return out


def load_claims(lesson: str) -> list[Claim]:
    """The published claims of one lesson, from bytesup/lessons/claims/<lesson>.yaml."""
    ref = resources.files("bytesup.lessons").joinpath("claims", f"{lesson}.yaml")
    if not ref.is_file():
        raise ClaimsError(f"no claims file for lesson {lesson!r} (looked for bytesup/lessons/claims/{lesson}.yaml)")
    return claims_from_dict(yaml.safe_load(ref.read_text(encoding="utf-8")), source=f"claims/{lesson}.yaml")


def published_value(lesson: str, claim_id: str) -> float | list[float]:
    """A number as the course prints it, read from the lesson's claims file (never retyped)."""
    for c in load_claims(lesson):
        if c.claim_id == claim_id:
            return parse_published(c.published)
    raise ClaimsError(f"claims/{lesson}.yaml has no claim {claim_id!r}")
