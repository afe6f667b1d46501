"""`bytesup verify PATH`: does a report still say what its files say, word for word?

PATH is a report folder (report/<date>/) or its archive (report/<date>.zip, which unpacks into
llm-bytes-up-<date>/). Verify

1. re-hashes every file the manifest lists (size and sha256), and names files that are in the
   report folder or the archive but not in the manifest;
2. re-renders every page (index.html, report.md, the data pages data/*.html, the glossary) from the
   manifest and the cited files, with the same code that wrote them (bytesup.report.render), and
   compares them byte for byte with what was shared:
   an edited word, label, caption, link, number or an added sentence fails, naming the first place
   that differs; the manifest's list of citations is compared with the re-rendered one, so a
   changed file is named with each number it changes;
3. builds claims.csv again from the lessons' claims files it gathers, and compares it;
4. re-renders each lesson's notebook page from its executed notebook and compares it the same way.
(job_resources.csv is re-hashed only: the Snakemake records it comes from are not in the report.)

The words come from this package (lesson specs, narrative templates, labels.yaml, glossary.yaml): verify with the version
that wrote the report (manifest.json, packages/bytesup and git_describe).

Cited paths are relative to a root: the archive's folder, or for a folder the project that holds
it (two levels up from report/<date>/), or --root. Files written into the report folder itself
(in_report) are relative to the folder.

A shared report is untrusted input, validated before it is read: manifest.json against its schema
(bytesup.report.manifest), only regular files inside the root opened (bytesup.report.safe_read),
an archive's members streamed and hashed under caps, never unpacked whole (bytesup.report.archive).
Each refusal is one line.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bytesup.errors import BytesupError
from bytesup.gguf.file import printable
from bytesup.report import archive, build, notebook_pages, render, safe_read
from bytesup.report import manifest as manifest_mod
from bytesup.report.citations import CitationError
from bytesup.report.lesson_page import title

CONTEXT = 50  # characters shown either side of the first difference


class VerifyError(BytesupError):
    """PATH is not a report (no manifest, damaged archive, moved folder): one line for the user."""


@dataclass
class Result:
    report: str
    files: int = 0
    numbers: int = 0
    figures: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        what = f"{self.files} files, {self.numbers} cited values, {self.figures} figures"
        if self.ok:
            return f"verify: OK: {self.report}: {what} re-read; the report matches its files word for word"
        return f"verify: FAILED: {self.report}: {len(self.problems)} difference(s) in {what}"


def first_difference(name: str, shown: str, expected: str) -> str | None:
    """None when equal; else one line: where `shown` first departs from `expected`, in which section."""
    if shown == expected:
        return None
    at = next((i for i, (a, b) in enumerate(zip(shown, expected)) if a != b), min(len(shown), len(expected)))
    line = expected.count("\n", 0, at) + 1
    section = ""
    for marker in ('id="', "\n## "):
        start = expected.rfind(marker, 0, at)
        if start != -1:
            end = expected.find('"' if marker == 'id="' else "\n", start + len(marker))
            section = f" (section '{printable(expected[start + len(marker) : end])}')"
            break
    lo = max(0, at - CONTEXT)
    got, want = shown[lo : at + CONTEXT], expected[lo : at + CONTEXT]
    return f"{name}, line {line}{section}: shows \u201c{printable(got)}\u201d where the files give \u201c{printable(want)}\u201d"


def _page(path: Path) -> str:
    return safe_read.read_capped(path, archive.MAX_PAGE_BYTES).decode("utf-8")


def _named(manifest: dict, report_dir: Path, root: Path):
    """(its key in the manifest, base folder, path) of every file verify or the page's renderer reads."""
    for i, entry in enumerate(manifest["files"]):
        yield f"files/{i}/path", report_dir if entry["in_report"] else root, entry["path"]
    for rule, outputs in manifest["sources"].items():
        for name, path in outputs.items():
            yield f"sources/{rule}/{name}", root, path
    for lesson, page in manifest.get("notebooks", {}).items():
        yield f"notebooks/{lesson}", report_dir, page
    for i, page in enumerate(manifest.get("pages", [])):
        yield f"pages/{i}", report_dir, page
    if manifest.get("job_resources"):
        yield "job_resources", report_dir, manifest["job_resources"]
    yield "(the claims table)", report_dir, build.CLAIMS_FILE


def _refuse_unsafe(manifest: dict, report_dir: Path, root: Path) -> None:
    """One line, before anything is read, when the manifest names a file outside its root (a '..', an
    absolute path, a symlink out), one that is no regular file (a FIFO would hang the read, a device
    never end) or one larger than a report's file."""
    for key, base, rel in _named(manifest, report_dir, root):
        location = safe_read.inside(base, rel)
        if location is None:
            why = f"resolves outside {base}"
        elif kind := safe_read.not_regular(location):
            why = f"is {kind}"
        elif location.exists() and location.stat().st_size > archive.MAX_PAGE_BYTES:
            why = f"is over {archive.MAX_PAGE_BYTES:,} bytes"
        else:
            continue
        raise VerifyError(f"{report_dir}/manifest.json: {key} = {printable(rel)[:200]!r} {why}; verify reads"
                          " only regular files inside the report's root, so it stops here")  # fmt: skip


def expected_report_files(manifest: dict) -> set[str]:
    """Every file a report folder holds, relative to it."""
    pages = manifest.get("pages") if isinstance(manifest.get("pages"), list) else []
    return (
        set(build.REPORT_FILES)
        | {f["path"] for f in manifest.get("files", []) if f.get("in_report")}
        | {str(p) for p in pages}
    )


def verify_folder(
    report_dir: Path,
    root: Path | None = None,
    label: str | None = None,
    root_given: bool = False,
    hashed: dict | None = None,
) -> Result:
    """`hashed`: (sha256, bytes) by (in_report, path), for files an archive's reading hashed already."""
    report_dir = Path(report_dir)
    root_given = root_given or root is not None
    root = Path(root) if root is not None else report_dir.parent.parent
    result = Result(label or str(report_dir))
    problems = result.problems
    try:
        where = report_dir / "manifest.json"
        manifest = manifest_mod.parse(
            safe_read.read_capped(where, manifest_mod.MAX_BYTES, "a report's manifest"), str(where), build.FORMAT
        )
        html, md = _page(report_dir / "index.html"), _page(report_dir / "report.md")
    except FileNotFoundError as err:
        raise VerifyError(f"{report_dir}: not a report folder (no {Path(err.filename).name})") from None
    except (safe_read.UnsafeFileError, manifest_mod.ManifestError):
        raise
    except (OSError, ValueError) as err:
        raise VerifyError(f"{report_dir}: cannot read the report ({printable(str(err))})") from None

    # 1. the files
    outside = [f for f in manifest["files"] if not f["in_report"]]
    if (
        outside
        and not root_given
        and not any((safe_read.inside(root, f["path"]) or root / "-").is_file() for f in outside)
    ):
        raise VerifyError(
            f"{report_dir}: none of the {len(outside)} project files it cites are under {root}: the"
            " folder was moved away from its project; pass --root PROJECT (the folder holding results/)"
        )
    _refuse_unsafe(manifest, report_dir, root)
    for entry in manifest["files"]:
        path = entry["path"]
        location = safe_read.inside(report_dir if entry["in_report"] else root, path)
        try:
            digest, size = (
                hashed[entry["in_report"], path] if hashed is not None else safe_read.sha256_regular(location)
            )
        except (FileNotFoundError, KeyError):
            problems.append(f"{printable(path)}: missing (looked in {location})")
            continue
        except OSError as err:
            problems.append(f"{printable(path)}: {printable(str(err))}")
            continue
        if size != entry["bytes"]:
            problems.append(f"{path}: {size} bytes, the manifest says {entry['bytes']}")
        if digest != entry["sha256"]:
            problems.append(
                f"{path}: sha256 {digest[:12]}, the manifest says {entry['sha256'][:12]} (the file changed)"
            )
        result.files += 1
    expected = expected_report_files(manifest)
    for extra, kind in safe_read.listing(report_dir):
        if kind:
            problems.append(f"{printable(extra)}: {kind} in the report folder: not read")
        elif extra not in expected:
            problems.append(f"{printable(extra)}: in the report folder but not in its manifest (an added file)")

    # 2. the pages, re-rendered from the manifest and the files
    inputs = {k: v for k, v in manifest.items() if k not in render.OUTPUTS}
    try:
        pages = render.render(inputs, report_dir, root)
    except (CitationError, OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        problems.append(f"cannot re-render the report from its files: {printable(str(err))}")
        return result
    outputs = pages.outputs()
    result.numbers = len(outputs["citations"])
    result.figures = len(outputs["figures"])
    shared = {c["id"]: c for c in manifest["citations"]}
    for c in outputs["citations"]:
        old = shared.get(c["id"])
        if old is None or (old.get("page"), old["file"], old["key"]) != (c["page"], c["file"], c["key"]):
            continue
        if old["text"] != c["text"]:
            problems.append(
                f"citation {c['id']} ({c['file']} \u2192 {c['key']}): the file gives {c['text']!r};"
                f" the report shows {old['text']!r}"
            )
    if {k: manifest.get(k) for k in render.OUTPUTS} != outputs and not any("citation" in p for p in problems):
        problems.append(
            "manifest.json: its list of citations, footnotes, tables, figures or pages is not the one the files give"
        )
    for name, want in pages.files().items():
        if name in ("index.html", "report.md"):
            shown = html if name == "index.html" else md
        else:
            try:
                shown = _page(report_dir / name)
            except FileNotFoundError:
                problems.append(f"{name}: missing (a page of the report)")
                continue
            except (OSError, ValueError) as err:
                problems.append(f"{name}: {printable(str(err))}")
                continue
        diff = first_difference(name, shown, want)
        if diff:
            problems.append(diff)

    # 3. the report's own tables, built again from the files they gather
    claims = _claims_difference(manifest, report_dir, root)
    if claims:
        problems.append(claims)

    # 4. the notebook pages
    for lesson, page in manifest.get("notebooks", {}).items():
        notebook = manifest["sources"].get(f"lesson_{lesson}", {}).get("notebook")
        location = safe_read.inside(report_dir, page)
        if not notebook or location is None or not location.is_file():
            continue  # a missing page is named above
        try:
            want = notebook_pages.render(safe_read.inside(root, notebook), title(lesson), build.section_link(lesson))
            shown = safe_read.read_capped(location, archive.MAX_PAGE_BYTES).decode("utf-8", errors="replace")
        except (ValueError, OSError) as err:
            problems.append(printable(str(err)))
            continue
        diff = first_difference(page, shown, want)
        if diff:
            problems.append(diff)
    return result


def _claims_difference(manifest: dict, report_dir: Path, root: Path) -> str | None:
    """claims.csv against the table the lessons' claims files give (write_claims, as the report rule)."""
    shown = safe_read.inside(report_dir, build.CLAIMS_FILE)
    if shown is None or not shown.is_file():
        return None  # named above as missing
    lessons = {lesson: {"claims_csv": str(root / files["claims_csv"])}
               for lesson, files in render.by_kind(manifest["sources"])["lessons"].items() if "claims_csv" in files}  # fmt: skip
    try:
        with tempfile.TemporaryDirectory(prefix="bytesup-verify-") as tmp:
            build.write_claims(lessons, Path(tmp) / build.CLAIMS_FILE)
            want = (Path(tmp) / build.CLAIMS_FILE).read_text(encoding="utf-8")
        return first_difference(build.CLAIMS_FILE, _page(shown), want)
    except (OSError, ValueError) as err:
        return f"{build.CLAIMS_FILE}: cannot build it again from the lessons' claims ({printable(str(err))})"


def verify_path(path: str | Path, root: str | Path | None = None) -> Result:
    """Verify a report folder or archive (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        return verify_folder(path, Path(root) if root else None)
    if path.is_file():
        path = Path(os.path.realpath(path))  # the archive named on the command line may be a link to it
        with safe_read.open_regular(path) as fh:
            magic = fh.read(4)
        if zipfile.is_zipfile(path):
            with tempfile.TemporaryDirectory(prefix="bytesup-verify-") as tmp:
                got = archive.unpack(path, Path(tmp), build.FORMAT, expected_report_files)
                label = f"{path} ({got.report_dir.relative_to(tmp)})"
                result = verify_folder(got.report_dir, got.top, label=label, hashed=got.hashed)
                result.problems += sorted(got.added)
                return result
        if magic[:2] == b"PK" or path.suffix == ".zip":
            raise archive.damaged(path, "no readable zip directory: truncated or overwritten")
    if not path.exists():
        raise VerifyError(f"{path}: no such file or folder")
    raise VerifyError(f"{path}: neither a report folder nor a .zip archive")
