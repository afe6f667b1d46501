"""`bytesup verify PATH`: does a report still say what its files say, word for word?

PATH is a report folder (report/<date>/) or its archive (report/<date>.zip, which unpacks into
llm-bytes-up-<date>/). Verify

1. re-hashes every file the manifest lists (size and sha256), and names files that are in the
   report folder or the archive but not in the manifest;
2. re-renders every page (index.html, report.md, the data pages data/*.html) from the manifest and
   the cited files, with the same code that wrote them (bytesup.report.render), and compares them
   byte for byte with what was shared:
   an edited word, label, caption, link, number or an added sentence fails, naming the first place
   that differs; the manifest's list of citations is compared with the re-rendered one, so a
   changed file is named with each number it changes;
3. re-renders each lesson's notebook page from its executed notebook and compares it the same way.

The words come from this package (lesson specs, narrative templates): verify with the version
that wrote the report (manifest.json, packages/bytesup and git_describe).

Cited paths are relative to a root: the archive's folder, or for a folder the project that holds
it (two levels up from report/<date>/), or --root. Files written into the report folder itself
(in_report) are relative to the folder.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from bytesup.errors import BytesupError
from bytesup.gguf.file import printable
from bytesup.report import build, notebook_pages, render
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
            section = f" (section '{printable(expected[start + len(marker):end])}')"
            break
    lo = max(0, at - CONTEXT)
    got, want = shown[lo:at + CONTEXT], expected[lo:at + CONTEXT]
    return f"{name}, line {line}{section}: shows \u201c{printable(got)}\u201d where the files give \u201c{printable(want)}\u201d"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _inside(root: Path, rel: str) -> Path | None:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        return None
    return root / p


def expected_report_files(manifest: dict) -> set[str]:
    """Every file a report folder holds, relative to it."""
    pages = manifest.get("pages") if isinstance(manifest.get("pages"), list) else []
    return (set(build.REPORT_FILES) | {f["path"] for f in manifest.get("files", []) if f.get("in_report")}
            | {str(p) for p in pages})


def verify_folder(report_dir: Path, root: Path | None = None, label: str | None = None,
                  root_given: bool = False) -> Result:
    report_dir = Path(report_dir)
    root_given = root_given or root is not None
    root = Path(root) if root is not None else report_dir.parent.parent
    result = Result(label or str(report_dir))
    problems = result.problems
    try:
        manifest = json.loads((report_dir / "manifest.json").read_text(encoding="utf-8"))
        html = (report_dir / "index.html").read_text(encoding="utf-8")
        md = (report_dir / "report.md").read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise VerifyError(f"{report_dir}: not a report folder (no {Path(err.filename).name})") from None
    except (OSError, ValueError) as err:
        raise VerifyError(f"{report_dir}: cannot read the report ({err})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("citations"), list) or "sources" not in manifest:
        raise VerifyError(f"{report_dir}/manifest.json: not a manifest of this bytesup version's reports"
                          f" (format {manifest.get('format') if isinstance(manifest, dict) else None!r},"
                          f" this version writes {build.FORMAT!r})")

    # 1. the files
    outside = [f for f in manifest.get("files", []) if not f.get("in_report")]
    if outside and not root_given and not any((_inside(root, f["path"]) or root / "-").is_file() for f in outside):
        raise VerifyError(f"{report_dir}: none of the {len(outside)} project files it cites are under {root}: the"
                          " folder was moved away from its project; pass --root PROJECT (the folder holding results/)")
    for entry in manifest.get("files", []):
        path = entry["path"]
        base = report_dir if entry.get("in_report") else root
        location = _inside(base, path)
        if location is None:
            problems.append(f"{path}: a cited path must stay inside the report or project")
            continue
        if not location.is_file():
            problems.append(f"{path}: missing (looked in {location})")
            continue
        if location.stat().st_size != entry["bytes"]:
            problems.append(f"{path}: {location.stat().st_size} bytes, the manifest says {entry['bytes']}")
        digest = _sha256(location)
        if digest != entry["sha256"]:
            problems.append(f"{path}: sha256 {digest[:12]}, the manifest says {entry['sha256'][:12]}"
                            " (the file changed)")
        result.files += 1
    expected = expected_report_files(manifest)
    for extra in sorted(p.relative_to(report_dir).as_posix() for p in report_dir.rglob("*") if p.is_file()):
        if extra not in expected:
            problems.append(f"{extra}: in the report folder but not in its manifest (an added file)")

    # 2. the pages, re-rendered from the manifest and the files
    inputs = {k: v for k, v in manifest.items() if k not in render.OUTPUTS}
    try:
        pages = render.render(inputs, report_dir, root)
    except (CitationError, OSError, ValueError, KeyError, TypeError) as err:
        problems.append(f"cannot re-render the report from its files: {printable(str(err))}")
        return result
    outputs = pages.outputs()
    result.numbers = len(outputs["citations"])
    result.figures = len(outputs["figures"])
    shared = {c["id"]: c for c in manifest["citations"] if isinstance(c, dict) and "id" in c}
    for c in outputs["citations"]:
        old = shared.get(c["id"])
        if old is None or (old.get("page"), old.get("file"), old.get("key")) != (c["page"], c["file"], c["key"]):
            continue
        if old.get("text") != c["text"]:
            problems.append(f"citation {c['id']} ({c['file']} \u2192 {c['key']}): the file gives {c['text']!r};"
                            f" the report shows {old.get('text')!r}")
    if {k: manifest.get(k) for k in render.OUTPUTS} != outputs and not any("citation" in p for p in problems):
        problems.append("manifest.json: its list of citations, footnotes, tables, figures or pages is not the one"
                        " the files give")
    for name, want in pages.files().items():
        if name == "index.html":
            shown = html
        elif name == "report.md":
            shown = md
        else:
            location = report_dir / name
            if not location.is_file():
                problems.append(f"{name}: missing (a page of the report)")
                continue
            shown = location.read_text(encoding="utf-8", errors="replace")
        diff = first_difference(name, shown, want)
        if diff:
            problems.append(diff)

    # 3. the notebook pages
    for lesson, page in manifest.get("notebooks", {}).items():
        notebook = manifest["sources"].get(f"lesson_{lesson}", {}).get("notebook")
        location = _inside(report_dir, page)
        if not notebook or location is None or not location.is_file():
            continue  # a missing page is named above
        try:
            want = notebook_pages.render(_inside(root, notebook), title(lesson), build.section_link(lesson))
        except ValueError as err:
            problems.append(str(err))
            continue
        diff = first_difference(page, location.read_text(encoding="utf-8", errors="replace"), want)
        if diff:
            problems.append(diff)
    return result


def _damaged(path: Path, why: object) -> VerifyError:
    return VerifyError(f"{path}: the archive is damaged ({printable(str(why))}); fetch or copy it again")


def _extract(archive: Path, dest: Path) -> list[str]:
    """Unpack, checking every member's CRC; returns the member names."""
    try:
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            for info in zf.infolist():
                p = PurePosixPath(info.filename)
                if p.is_absolute() or ".." in p.parts:
                    raise VerifyError(f"{archive}: member {info.filename!r} would land outside the archive's folder")
            bad = zf.testzip()
            if bad is not None:
                raise _damaged(archive, f"{bad} fails its checksum")
            zf.extractall(dest)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, ValueError) as err:
        raise _damaged(archive, err) from None
    return names


def verify_path(path: str | Path, root: str | Path | None = None) -> Result:
    """Verify a report folder or archive (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        return verify_folder(path, Path(root) if root else None)
    if path.is_file():
        with open(path, "rb") as fh:
            magic = fh.read(4)
        if zipfile.is_zipfile(path):
            with tempfile.TemporaryDirectory(prefix="bytesup-verify-") as tmp:
                names = _extract(path, Path(tmp))
                found = sorted(Path(tmp).glob("*/report/*/manifest.json"))
                if len(found) != 1:
                    raise VerifyError(f"{path}: expected one llm-bytes-up-<date>/report/<date>/manifest.json inside,"
                                      f" found {len(found)}")
                report_dir = found[0].parent
                top = report_dir.parent.parent
                result = verify_folder(report_dir, top, label=f"{path} ({report_dir.relative_to(tmp)})")
                manifest = json.loads((report_dir / "manifest.json").read_text(encoding="utf-8"))
                prefix = report_dir.relative_to(top).as_posix()
                wanted = {f"{top.name}/{prefix}/{name}" for name in expected_report_files(manifest)}
                wanted |= {f"{top.name}/{f['path']}" for f in manifest.get("files", []) if not f.get("in_report")}
                for extra in sorted(n for n in names if not n.endswith("/") and n not in wanted
                                    and not n.startswith(f"{top.name}/{prefix}/")):
                    result.problems.append(f"{extra}: in the archive but not in the report's manifest (an added file)")
                return result
        if magic[:2] == b"PK" or path.suffix == ".zip":
            raise _damaged(path, "no readable zip directory: truncated or overwritten")
    if not path.exists():
        raise VerifyError(f"{path}: no such file or folder")
    raise VerifyError(f"{path}: neither a report folder nor a .zip archive")
