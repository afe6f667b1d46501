"""The report in a real browser: headless Chromium, driven over its DevTools protocol.

A GGUF whose tensor names, metadata and token strings carry <script>, </style>, "><img onerror=...>,
javascript: links and Markdown link/HTML injection goes through the whole DAG; its report
must run no script, open no dialog, log no console error and make no network request, and
show the hostile strings as text. The default model's report must render every figure.

Chromium is Debian's `chromium` (.ci/run installs it). It talks DevTools over a pipe
(--remote-debugging-pipe: NUL-separated JSON on fds 3 and 4), so no websocket library and
no port are needed. Without Chromium the tests are skipped, except under CI=true, where
that is a failure.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
import yaml
from workflow_helpers import QUICK_TIMING, ROOT, copy_project, sha256, snakemake, write_config

from bytesup.model import synthetic
from bytesup.model.synthetic import default_tokens, write_tiny_llama

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-pipe",
)

HOSTILE = [
    "<script>window.__pwned=1;alert(1)</script>",
    "</style><script>window.__pwned=2;alert(2)</script>",
    '"><img src=x onerror="window.__pwned=3;alert(3)">',
    "[click](javascript:alert(4))",
    "<a href='javascript:alert(5)'>x</a>",
    "![img](http://example.invalid/x.png)",
    "<iframe src=http://example.invalid/></iframe>",
    "<link rel=stylesheet href=http://example.invalid/x.css>",
    "<meta http-equiv=refresh content='0;url=http://example.invalid/'>",
    "</td></tr></table><script>alert(6)</script>",
    "| a | b | # heading `code` *em*",
    "carriage\rreturn, escape \x1b[31m, line separator \u2028, tab\t",
]
HOSTILE_TOKEN = " <script>window.__pwned=7;alert(7)</script>"  # the token the lessons follow
HOSTILE_TENSORS = [
    "<script>window.__pwned=8;alert(8)</script>",
    '"><img src=x onerror=alert(9)>.weight',
    "blk.0.[x](javascript:alert(10))",
]


class _WriterWithHostileTensors(synthetic.GGUFWriter):
    """gguf's writer, adding small F32 tensors with hostile names to what write_tiny_llama writes."""

    def write_header_to_file(self, *args, **kwargs):
        # listed after the model's tensors, so their data goes last (write_tiny_llama writes tensor by tensor)
        self._hostile = [np.full(32, i, dtype=np.float32) for i in range(len(HOSTILE_TENSORS))]
        for name, data in zip(HOSTILE_TENSORS, self._hostile):
            self.add_tensor_info(name, data.shape, data.dtype, data.nbytes)
        return super().write_header_to_file(*args, **kwargs)

    def close(self):
        for data in getattr(self, "_hostile", []):
            self.write_tensor_data(data)
        self._hostile = []
        super().close()


def chromium() -> str:
    """The browser, or skip (fail under CI=true) with the reason."""
    for name in filter(None, (os.environ.get("BYTESUP_CHROMIUM"), *CANDIDATES)):
        found = shutil.which(name)
        if found:
            return found
    reason = f"no Chromium found (looked for {', '.join(CANDIDATES)} on PATH; Debian: apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " and CI=true")
    pytest.skip(reason)


class Browser:
    """Just enough of the DevTools protocol: one page, its events, evaluate."""

    def __init__(self, exe: str, timeout: float = 30):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="bytesup-chromium-")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # above 2..4 so the child's dup2 onto fds 3 and 4 cannot clobber one of them
        keep_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10)
        keep_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_chrome_r)
        os.close(from_chrome_w)

        def child():
            os.dup2(keep_r, 3)
            os.dup2(keep_w, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            close_fds=False,
            preexec_fn=child,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(keep_r)
        os.close(keep_w)
        self.write, self.read = to_chrome_w, from_chrome_r
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []
        self.session = None

    def _recv(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.read, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.poll() is not None else ""
                raise RuntimeError(f"Chromium closed the DevTools pipe: {err}")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def _event(self, message: dict) -> None:
        self.events.append(message)
        if message.get("method") == "Page.javascriptDialogOpening":  # answer it, or the page hangs
            self.send("Page.handleJavaScriptDialog", {"accept": False}, wait=False)

    def send(self, method: str, params: dict | None = None, wait: bool = True) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self.write, json.dumps(message).encode() + b"\0")
        if not wait:
            return {}
        ident, deadline = self.next_id, time.monotonic() + self.timeout
        while True:
            reply = self._recv(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._event(reply)

    def open(self, url: str, settle: float = 1.0) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.events.clear()
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self._event(self._recv(deadline))
        end = time.monotonic() + settle  # late events: image decoding, deferred errors
        while True:
            try:
                self._event(self._recv(end))
            except TimeoutError:
                break

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close", wait=False)
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            for fd in (self.write, self.read):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.proc.stderr:
                self.proc.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    # -- what the page did --------------------------------------------------------------------
    def of(self, method: str) -> list[dict]:
        return [e.get("params", {}) for e in self.events if e.get("method") == method]

    def dialogs(self) -> list[str]:
        return [p.get("message", "") for p in self.of("Page.javascriptDialogOpening")]

    def console_errors(self) -> list[str]:
        errors = [p["entry"]["text"] for p in self.of("Log.entryAdded") if p["entry"].get("level") == "error"]
        errors += [f"console.{p.get('type')}" for p in self.of("Runtime.consoleAPICalled")]
        errors += [p["exceptionDetails"].get("text", "") for p in self.of("Runtime.exceptionThrown")]
        return errors

    def requests(self) -> list[str]:
        return [p["request"]["url"] for p in self.of("Network.requestWillBeSent")]


@pytest.fixture
def browser():
    b = Browser(chromium())
    yield b
    b.close()


PAGE_FACTS = """JSON.stringify({
  pwned: window.__pwned === undefined ? null : window.__pwned,
  scripts: document.scripts.length,
  frames: document.querySelectorAll('iframe,frame,object,embed,link,base').length,
  handlers: Array.from(document.querySelectorAll('*')).filter(
      e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).length,
  hrefs: Array.from(document.querySelectorAll('[href]')).map(e => e.getAttribute('href'))
      .filter(h => !h.startsWith('#')),
  images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
  figures: document.querySelectorAll('figure').length,
  text: document.body.innerText,
})"""


def page_facts(browser: Browser, report_dir: Path, page: str = "index.html") -> dict:
    browser.open((report_dir / page).resolve().as_uri())
    return json.loads(browser.evaluate(PAGE_FACTS))


def assert_quiet(browser: Browser) -> None:
    assert browser.dialogs() == []
    assert browser.console_errors() == []
    assert [u for u in browser.requests() if not u.startswith(("file:", "data:"))] == []


def assert_figures_render(facts: dict) -> None:
    assert facts["images"], "the report has no figure"
    assert len(facts["images"]) == facts["figures"]
    assert all(complete and width > 0 and height > 0 for complete, width, height in facts["images"]), facts["images"]


# -- a hostile GGUF through the whole DAG ---------------------------------------------------


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    chromium()  # skip before spending the DAG's seconds
    project = copy_project(tmp_path_factory.mktemp("hostile-project"))
    metadata = {f"hostile.{i}": text for i, text in enumerate(HOSTILE)}
    metadata["general.name"] = HOSTILE[2]
    metadata["tokenizer.chat_template"] = "{% for m in messages %}" + HOSTILE[0] + HOSTILE[3] + "{% endfor %}"
    metadata[HOSTILE[0]] = HOSTILE[1]  # a hostile key, too
    tokens = default_tokens() + HOSTILE + [HOSTILE_TOKEN.replace(" ", "\u0120")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(synthetic, "GGUFWriter", _WriterWithHostileTensors)
        gguf = write_tiny_llama(project / "hostile.gguf", tokens=tokens, extra_metadata=metadata)
    write_config(
        project,
        model="hostile",
        token=HOSTILE_TOKEN,
        timing=QUICK_TIMING,
        report_date="2026-01-05",
        models={"hostile": {"source": "path", "path": str(gguf), "sha256": sha256(gguf)}},
    )
    snakemake(project)
    return project / "report" / "2026-01-05"


def assert_links_stay_in_the_archive(facts: dict, report_dir: Path, page: str = "index.html") -> None:
    """Every link that is no anchor is relative and lands on a file of the project (the archive)."""
    project = report_dir.parent.parent.resolve()
    for href in facts["hrefs"]:
        assert not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|/", href), href
        target = ((report_dir / page).parent / unquote(href.split("#", 1)[0])).resolve()
        assert target.is_relative_to(project) and target.is_file(), href


@pytest.mark.slow
def test_hostile_gguf_report_runs_nothing_and_fetches_nothing(hostile_report, browser):
    facts = page_facts(browser, hostile_report)
    assert_quiet(browser)
    assert facts["pwned"] is None
    assert (facts["scripts"], facts["frames"], facts["handlers"]) == (0, 0, 0)
    assert_links_stay_in_the_archive(facts, hostile_report)
    assert_figures_render(facts)
    # every other page of the report is as quiet, its links as local; the hostile strings are there, as text
    text = facts["text"]
    for page in json.loads((hostile_report / "manifest.json").read_text())["pages"]:
        facts = page_facts(browser, hostile_report, page)
        assert_quiet(browser)
        assert facts["pwned"] is None and (facts["scripts"], facts["frames"], facts["handlers"]) == (0, 0, 0)
        assert_links_stay_in_the_archive(facts, hostile_report, page)
        text += facts["text"]
    for hostile in (HOSTILE[0], HOSTILE[2], HOSTILE[3], HOSTILE_TOKEN.replace(" ", "\u0120"), *HOSTILE_TENSORS):
        assert hostile in text, hostile
    # each lesson's notebook page is as quiet (its outputs print the hostile metadata)
    for page in sorted((hostile_report / "notebooks").glob("*.html")):
        browser.open(page.resolve().as_uri())
        assert_quiet(browser)
        assert json.loads(browser.evaluate(PAGE_FACTS))["scripts"] == 0


LAYOUT = """JSON.stringify({
  page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
  nav: document.querySelector('nav.toc').getBoundingClientRect().toJSON(),
  main: document.querySelector('main').getBoundingClientRect().toJSON(),
  navShown: getComputedStyle(document.querySelector('nav.toc')).display != 'none',
  // a table wider than its box scrolls inside it; nothing is cut off without a way to reach it
  unscrollable: Array.from(document.querySelectorAll('table')).filter(t => {
      const box = t.parentElement, style = getComputedStyle(box);
      return t.getBoundingClientRect().width > box.clientWidth + 1 && style.overflowX != 'auto';}).length,
  tables: document.querySelectorAll('table').length,
  inScroll: document.querySelectorAll('.scroll > table').length,
  notesOpen: (document.querySelector('details.notes') || {}).open,
  // readable, not merely scrollable: no table wider than its box
  wider: Array.from(document.querySelectorAll('main table')).filter(
      t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 1).map(
      t => (t.caption ? t.caption.innerText : t.innerText).slice(0, 60)),
  height: document.documentElement.scrollHeight,
  rows: document.querySelectorAll('main table tbody tr').length,
  proseWords: Array.from(document.querySelectorAll('main p, main li, main blockquote, main dd')).filter(
      e => !e.closest('table, details')).map(e => e.innerText.split(/\\s+/).filter(Boolean).length)
      .reduce((a, b) => a + b, 0),
  tableWords: Array.from(document.querySelectorAll('main table')).map(
      e => e.innerText.split(/\\s+/).filter(Boolean).length).reduce((a, b) => a + b, 0),
  // headers and captions are words, not a file's column names or file names
  rawHeaders: Array.from(document.querySelectorAll('main th')).map(t => t.innerText).filter(h => /_/.test(h)),
  fileCaptions: Array.from(document.querySelectorAll('main caption, main figcaption')).map(c => c.innerText)
      .filter(c => /\\w\\.(csv|png|json)\\b|[a-z]_[a-z]/.test(c)),
})"""


def layout(browser: Browser, report_dir: Path, width: int, media: str = "screen", page: str = "index.html") -> dict:
    browser.open((report_dir / page).resolve().as_uri())
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    browser.send("Emulation.setEmulatedMedia", {"media": media})
    time.sleep(0.3)
    return json.loads(browser.evaluate(LAYOUT))


@pytest.mark.slow
def test_the_page_fits_narrow_and_wide_screens_and_prints(hostile_report, browser):
    wide = layout(browser, hostile_report, 1400)
    assert wide["page"][0] <= wide["page"][1]  # no sideways scrolling
    assert wide["nav"]["right"] <= wide["main"]["left"] and wide["nav"]["top"] == wide["main"]["top"]  # a sidebar
    assert wide["unscrollable"] == 0 and wide["tables"] == wide["inScroll"] > 0
    assert wide["wider"] == []  # every table fits its box
    assert wide["notesOpen"] is False  # the footnotes are folded
    assert wide["rawHeaders"] == [] and wide["fileCaptions"] == []
    narrow = layout(browser, hostile_report, 400)
    assert narrow["page"][0] <= 400, narrow["page"]
    assert narrow["nav"]["bottom"] <= narrow["main"]["top"]  # the contents at the top
    assert narrow["unscrollable"] == 0 and narrow["wider"] == []  # a row is a card: read, not scrolled
    printed = layout(browser, hostile_report, 800, media="print")
    assert printed["navShown"] is False  # the print stylesheet drops the contents


@pytest.mark.slow
def test_every_data_page_fits_a_phone_and_names_its_columns_in_words(hostile_report, browser):
    manifest = json.loads((hostile_report / "manifest.json").read_text())
    assert manifest["pages"]
    for page in manifest["pages"]:
        narrow = layout(browser, hostile_report, 400, page=page)
        assert narrow["page"][0] <= 400 and narrow["wider"] == [], (page, narrow["wider"])
        assert narrow["rawHeaders"] == [] and narrow["fileCaptions"] == [], page
        wide = layout(browser, hostile_report, 1400, page=page)
        assert wide["page"][0] <= wide["page"][1] and wide["unscrollable"] == 0, page  # a wide table scrolls in its box


@pytest.mark.slow
def test_a_cited_number_shows_its_key_and_hash_on_focus(hostile_report, browser):
    browser.open((hostile_report / "index.html").resolve().as_uri())
    tip = browser.evaluate("""(() => { const a = document.querySelector('main p a.cite'); a.focus();
        return [document.activeElement === a, getComputedStyle(a, '::after').content, a.dataset.tip]; })()""")
    focused, content, data = tip
    assert focused  # a link: reachable by keyboard and by a tap
    assert "sha256" in data and "\u2192" in data
    assert content in ("attr(data-tip)", f'"{data}"'), content  # the tooltip shows on focus, not only on hover
    unfocused = browser.evaluate("""(() => { document.activeElement.blur();
        return getComputedStyle(document.querySelector('main p a.cite'), '::after').content; })()""")
    assert unfocused in ("none", "normal")


@pytest.mark.slow
def test_hostile_gguf_report_markdown_and_verify(hostile_report):

    from bytesup.report.doc import esc_md
    from bytesup.report.verify import verify_path

    md = (hostile_report / "report.md").read_text()
    link = r'\]\(<([^<>\s]+)>(?: "(?:\\.|[^"\\])*")?\)'  # the report's own links: figures, numbers, contents
    targets = re.findall(link, md)
    figures = [t for t in targets if re.fullmatch(r"\.\./\.\./results/(?:timing/)?hostile/[^<>()\s]+\.png", t)]
    assert figures and all(t.startswith("#") or not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|/", t) for t in targets)
    rest = re.sub(link, "", md)
    assert "](" not in rest and "<" not in rest.replace("&lt;", "")
    assert esc_md(HOSTILE[2]) in md  # the file's general.name, in the summary (the metadata is on a data page)
    result = verify_path(hostile_report.parent / "2026-01-05.zip")
    assert result.ok, result.problems[:5]


# -- the default model ---------------------------------------------------------------------


@pytest.mark.slow
def test_default_model_report_renders_every_figure(default_gguf, tmp_path, browser):
    project = copy_project(tmp_path / "project")
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    name = config["model"]
    models = project / "resources" / "models"
    models.mkdir(parents=True)
    shutil.copy(default_gguf, models / f"{name}.gguf")  # the fetch rule's outputs, as a fetch leaves them
    record = default_gguf.with_suffix(".json")
    spec = config["models"][name]
    if record.is_file():
        shutil.copy(record, models / f"{name}.json")
    else:
        (models / f"{name}.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "file": f"{name}.gguf",
                    "source": spec["source"],
                    "sha256": spec["sha256"],
                    "size": spec["size"],
                    "sha256_checked": True,
                }
            )
        )
    write_config(project, timing=QUICK_TIMING, report_date="2026-01-06")
    snakemake(project, timeout=1800)
    report_dir = project / "report" / "2026-01-06"
    facts = page_facts(browser, report_dir)
    assert_quiet(browser)
    assert_figures_render(facts)
    manifest = json.loads((report_dir / "manifest.json").read_text())
    assert facts["figures"] == len([f for f in manifest["figures"] if f["page"] == "index.html"]) > 0
    assert (report_dir / "index.html").stat().st_size <= 1_500_000  # small enough for snakemake --report to embed
    assert_links_stay_in_the_archive(facts, report_dir)
    # the targets for the page a learner reads (issue 19): short, tables that fit, more prose than tables
    wide, narrow = layout(browser, report_dir, 1400), layout(browser, report_dir, 400)
    for shown in (wide, narrow):
        assert shown["page"][0] <= shown["page"][1] and shown["unscrollable"] == 0 and shown["wider"] == [], shown
        assert shown["rawHeaders"] == [] and shown["fileCaptions"] == []
    assert wide["height"] <= 20_000 and narrow["height"] <= 45_000, (wide["height"], narrow["height"])
    assert wide["rows"] <= 250 and wide["proseWords"] > wide["tableWords"], wide
    for page in manifest["pages"]:
        shown = layout(browser, report_dir, 400, page=page)
        assert shown["page"][0] <= 400 and shown["wider"] == [] and shown["rawHeaders"] == [], (page, shown)
    assert manifest["model"]["sha256"] == spec["sha256"]
    from bytesup.report.verify import verify_path

    result = verify_path(report_dir.parent / "2026-01-06.zip")
    assert result.ok, result.problems[:5]


def test_without_chromium_the_tests_skip_with_the_reason_and_fail_under_ci(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium found"):
        chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="and CI=true"):
        chromium()
