"""The report's sections besides the lessons: the summary, timing on this machine, the glossary,
the closing section for maintainers, and their data pages (data/timing.html, data/run.html).

Each function writes its own heading and cites what it shows through doc.ledger, reading only
the manifest and the files it lists, so `bytesup verify`, which renders the same pages, draws
them the same. The learner's sections speak to a learner; what only a maintainer needs (targets
met or missed, what was skipped and why, each job's resources, provenance) is in the closing
section and on data/run.html.
"""

from __future__ import annotations

from bytesup.lessons.claims import STATUSES as CLAIM_STATUSES
from bytesup.model.arch import UnsupportedArchitectureError, recipe_summary
from bytesup.report.citations import SELF, SHARE
from bytesup.report.doc import Doc, Link
from bytesup.report.formats import BYTES_CONVENTION
from bytesup.report.glossary import Glossary
from bytesup.report.lesson_page import DATA, DATA_ROWS, file_ref, title
from bytesup.report.tables import csv_table

CLAIMS_FILE = "claims.csv"  # inside the report folder: every lesson's claims, one table
TIMING_PAGE = f"{DATA}/timing.html"
RUN_PAGE = f"{DATA}/run.html"
UNITS = f"Units: {BYTES_CONVENTION}; shares are percentages; a rank counts from 1, the top."  # said once

# (label, key, format) of the timing jobs' headline numbers, with their units; a number without a
# format is written by the one rule (bytesup.report.formats).
TIMING_HEADLINES = [
    ("STREAM copy bandwidth (GB/s)", "stream_copy_gbps", None),
    ("STREAM triad bandwidth (GB/s)", "stream_triad_gbps", None),
    (
        "read ceiling: the best of copy, a threaded sum, a dot and a large gemv by rows or by columns (GB/s)",
        "read_ceiling_gbps",
        None,
    ),
    ("cold fp32 matvec, effective bandwidth (GB/s)", "matvec_cold_gbps", None),
    ("matvec bandwidth as a share of STREAM copy", "matvec_fraction_of_copy", "%"),
    ("matvec bandwidth as a share of the read ceiling", "matvec_fraction_of_read_ceiling", "%"),
    ("time for 256 tokens at once ÷ time for one", "matmul_ratio_256_over_1", None),
]
DECODE_HEADLINES = [
    ("decode, the project's NumPy decoder (tokens/s)", "decode_tokens_per_s", None),
    ("weights it reads per token, as float32", "decode_bytes_per_token", "bytes"),
    (
        "read ceiling in the same job: the best of copy, sum, dot and gemv by rows or columns (GB/s)",
        "decode_read_ceiling_gbps",
        None,
    ),
    ("its tokens/s ceiling at that read ceiling", "decode_ceiling_tokens_per_s", None),
    ("share of that ceiling reached", "decode_fraction_of_read_ceiling", "%"),
    ("llama.cpp on a float32 copy of the same model (tokens/s)", "llama_cpp_f32/decode_tokens_per_s", None),
    ("our tokens/s over llama.cpp's on that float32 copy", "decode_over_llama_cpp_f32", None),
    ("llama.cpp decode on the same file (tokens/s)", "llama_cpp/decode_tokens_per_s", None),
    ("llama.cpp: share of the quantized file's ceiling", "llama_cpp/decode_fraction_of_read_ceiling", "%"),
]
# The CPU (or GPU) job's numbers the timing section states in one sentence: (text before it, key, format).
TIMING_SENTENCE = (
    ("On this machine's {device} a copy moves ", "stream_copy_gbps", None),
    (" GB/s and the best read of the four reaches ", "read_ceiling_gbps", None),
    (" GB/s; a cold matvec reads its weights at ", "matvec_cold_gbps", None),
    (" GB/s, ", "matvec_fraction_of_read_ceiling", "%"),
)
TIMING_CONTEXT = [
    ("other processes' share of the CPU during timing", "other_processes_cpu_fraction", "%"),
    ("machine shared with other work", "machine_shared", None),
]
# The course's own measurements on its DGX Spark (lesson 3's claims), shown beside this run's.
COURSE_MACHINE_CLAIMS = (
    ("time for 256 tokens ÷ time for one", "timing.matmul_ratio_256_over_1"),
    ("cold matvec bandwidth (GB/s)", "timing.matvec_gbps"),
    ("memory bandwidth (GB/s): the course quotes a datasheet peak, this run measures STREAM copy", "timing.peak_gbps"),
)
PROVENANCE_FACTS = [
    ("report date", "date", None),
    ("report started", "report/started", None),
    ("report finished", "report/finished", None),
    ("first cited output: job started", "run/outputs_started", None),
    ("last cited output: job finished", "run/outputs_finished", None),
    ("git describe --always --dirty", "git_describe", None),
    ("config sha256 (canonical JSON)", "config_sha256", None),
    ("config", "config", "json"),
    ("model name", "model/name", None),
    ("model source", "model/source", None),
    ("model sha256", "model/sha256", None),
    ("model size", "model/size", "bytes"),
    ("Python", "machine/python", None),
    ("operating system", "machine/os", None),
    ("host name", "machine/hostname", None),
    ("CPU", "machine/cpu_model", None),
    ("logical CPUs", "machine/cores", None),
    ("memory", "machine/memory_bytes", "bytes"),
    ("load average (1, 5, 15 min) at report time", "machine/load_average", None),
]


# -- the summary -------------------------------------------------------------------------------


def summary(doc: Doc, run: dict, manifest: dict) -> None:
    L = doc.ledger
    rec = run["model_record"]
    doc.heading(2, "Summary", anchor="summary", toc="Summary")
    gpus = manifest["machine"].get("gpus") or []
    gpu = [L.cite(SELF, "machine/gpus/0/name")] if gpus else ["none"]
    meta = run["sources"].get("extract", {}).get("metadata")
    named = (
        [", named ", L.cite(meta, "metadata/general.name"), " in its metadata"]
        if meta and L.has(meta, "metadata/general.name")
        else []
    )
    doc.para(
        "This report recomputes the numbers of the LLM Basics course from the weights of one model file, ",
        L.cite(rec, "name"),
        " (from ",
        L.cite(rec, "source"),
        ", ",
        L.cite(rec, "size", "bytes"),
        *named,
        "), on ",
        L.cite(SELF, "machine/cpu_model"),
        " with ",
        L.cite(SELF, "machine/cores"),
        " logical CPUs (GPU: ",
        *gpu,
        "), on ",
        L.cite(SELF, "date"),
        ".",
    )
    doc.para(
        "Each lesson opens with the course's numbers beside this model's, then explains what they show;"
        " its full tables and every number it computed are on its data page, one click away. Every number"
        " links to the file it was read from (in the shared archive) and shows that file, its key and its"
        " sha256 when pointed at; the command bytesup verify re-reads them all and re-renders every page,"
        " word for word."
    )
    doc.para(UNITS)
    _architecture(doc, run)
    rows = []
    for lesson, files in run["lessons"].items():
        if "claims_csv" in files and doc.ledger.data(files["claims_csv"]):
            rows.append(
                [Link(title(lesson), f"#{lesson}")]
                + [L.cite(CLAIMS_FILE, f"count/lesson={lesson}&status={s}") for s in CLAIM_STATUSES]
            )
    if rows:
        rows.append(["all lessons"] + [L.cite(CLAIMS_FILE, f"count/status={s}") for s in CLAIM_STATUSES])
        doc.table(["lesson", *CLAIM_STATUSES], rows, caption="The course's numbers, lesson by lesson")
        doc.para("Every lesson's claims in one table: ", *file_ref(doc, CLAIMS_FILE), " in this report's folder.")
    refused = run.get("refused", {})
    if refused:
        doc.para(
            "Lessons that did not run for this model: ",
            ", ".join(title(lesson) for lesson in refused),
            " (each section says why).",
        )
    else:
        doc.para("Every lesson of the course ran for this model.")
    doc.para(
        "What the extract stage read from the file (its architecture, counts and shape keys, and the hash it"
        " checked) is on ",
        Link("the run's data page", doc.page_href(RUN_PAGE, "model-file")),
        ".",
    )


def _architecture(doc: Doc, run: dict) -> None:
    """The model's architecture as its file names it, and the recipe the lessons followed for it."""
    L = doc.ledger
    meta = run["sources"].get("extract", {}).get("metadata")
    if not meta or not L.has(meta, "metadata/general.architecture"):
        return
    arch = str(L.read(meta, "metadata/general.architecture"))
    try:
        recipe = f"The recipe the lessons that run the network follow: {recipe_summary(arch)}."
    except UnsupportedArchitectureError:
        recipe = "bytesup.model.arch has no recipe for it: the lessons that run the network are not run for this model."
    doc.para(
        "Architecture (general.architecture in the file): ", L.cite(meta, "metadata/general.architecture"), ". ", recipe
    )


def model_file(doc: Doc, run: dict) -> None:
    """What the extract stage read from the GGUF: architecture, counts, shape keys, the hash it checked."""
    L = doc.ledger
    extract = run["sources"].get("extract", {})
    meta, index, tensors = extract.get("metadata"), extract.get("index"), extract.get("tensors_csv")
    facts = [
        ("architecture", meta, "metadata/general.architecture"),
        ("name in the file", meta, "metadata/general.name"),
        ("GGUF version", meta, "gguf/version"),
        ("metadata keys", meta, "gguf/metadata_count"),
        ("tensors", tensors, "rows"),
    ]
    arch = (
        L.read(meta, "metadata/general.architecture") if meta and L.has(meta, "metadata/general.architecture") else None
    )
    if isinstance(arch, str) and "/" not in arch:
        facts += [
            (label, meta, f"metadata/{arch}.{key}")
            for label, key in (
                ("blocks", "block_count"),
                ("embedding length", "embedding_length"),
                ("feed-forward length", "feed_forward_length"),
                ("vocabulary", "vocab_size"),
            )
        ]
    facts.append(("sha256 the extract stage checked", index, "gguf/sha256"))
    rows = [[label, L.cite(path, key)] for label, path, key in facts if path and L.has(path, key)]
    if rows:
        doc.heading(2, "The model file", anchor="model-file", toc="The model file")
        doc.table(["quantity", "value"], rows)


# -- timing ------------------------------------------------------------------------------------


def _present(doc: Doc, path: str, table: list) -> list:
    return [(label, key, fmt) for label, key, fmt in table if doc.ledger.has(path, key)]


def timing(doc: Doc, timing_files: dict, lessons: dict) -> None:
    """The timing on this machine, in short: the sweep's figure, the course's machine beside this one,
    the headline numbers; every table on data/timing.html."""
    L = doc.ledger
    doc.heading(2, "Timing on this machine", anchor="timing", toc="Timing on this machine")
    if timing_files.get("sweep_png"):
        doc.figure(
            timing_files["sweep_png"],
            "Matvec (N = 1) against matmul on real FFN weights: median time and"
            " GFLOP/s per N, with this run's read ceiling (best of copy, sum, dot, gemv by rows or columns) and best GFLOP/s as lines",
        )
    _course_machine(doc, lessons)
    for path, device in ((timing_files.get("cpu_summary"), "CPU"), (timing_files.get("gpu_summary"), "GPU")):
        if path and not L.has(path, "skipped") and all(L.has(path, key) for _, key, _ in TIMING_SENTENCE):
            pieces = []
            for text, key, fmt in TIMING_SENTENCE:
                pieces += [text.format(device=device), L.cite(path, key, fmt)]
            doc.para(*pieces, " of that ceiling.")
    doc.para(
        "Every timing number and table (the sweep, STREAM, dequantization, prefill, the whole model's decode,"
        " the GPU's) is on ",
        Link("the timing data page", doc.page_href(TIMING_PAGE)),
        ".",
    )


def _course_machine(doc: Doc, lessons: dict) -> None:
    """The course's DGX Spark figures beside this machine's, both read from lesson 3's claims.csv."""
    claims = lessons.get("03_ffn_by_hand", {}).get("claims_csv")
    if not claims:
        return
    L = doc.ledger
    index = {row["claim_id"]: i for i, row in enumerate(L.data(claims))}
    picked = [(label, index[cid]) for label, cid in COURSE_MACHINE_CLAIMS if cid in index]
    if picked:
        note = L.note(claims, None, "table")
        doc.table(
            ["quantity", "the course, DGX Spark CPU", "this machine"],
            [
                [label, L.cite(claims, f"{i}/published", note=note), L.cite(claims, f"{i}/measured", note=note)]
                for label, i in picked
            ],
            note=note,
            caption="The course's machine beside this one",
        )


def write_timing_page(doc: Doc, timing_files: dict) -> None:
    L = doc.ledger
    doc.heading(1, "Timing on this machine \u00b7 data")
    doc.para(
        "Every timing table of this run, for ",
        Link("the report's timing section", doc.page_href("index.html", "timing")),
        ".",
    )
    jobs = (
        ("cpu_summary", "CPU", "cpu", TIMING_HEADLINES, ("sweep_csv", "stream_csv", "dequant_csv")),
        ("decode_summary", "The whole model, decoding", "decode", DECODE_HEADLINES, ("prefill_csv",)),
    )
    for name, heading, anchor, headlines, tables in jobs:
        path = timing_files.get(name)
        if not path or L.has(path, "skipped"):
            continue
        doc.heading(2, heading, anchor=anchor, toc=heading)
        note = L.note(path, None, "table")
        numbers = [
            [label, L.cite(path, key, fmt, note=note)]
            for label, key, fmt in _present(doc, path, headlines + TIMING_CONTEXT)
        ]
        doc.table(["quantity", "value"], numbers, note=note, caption=f"The {anchor} timing job's numbers")
        for table in tables:
            if timing_files.get(table):
                csv_table(doc, timing_files[table], DATA_ROWS)
    gpu = timing_files.get("gpu_summary")
    if gpu and not L.has(gpu, "skipped"):
        doc.heading(2, "GPU", anchor="gpu", toc="GPU")
        if L.has(gpu, "machine/name"):
            doc.para("Device: ", L.cite(gpu, "machine/name"), ".")
        rows = [[label, L.cite(gpu, key, fmt)] for label, key, fmt in _present(doc, gpu, TIMING_HEADLINES)]
        rows += [
            [
                label.replace("NumPy decoder", "decoder's torch twin").replace("STREAM copy", "device copy"),
                L.cite(gpu, key, fmt),
            ]
            for label, key, fmt in _present(doc, gpu, DECODE_HEADLINES[:5])
        ]
        doc.table(["quantity", "value"], rows, caption="The GPU timing job's numbers")
        for name in ("gpu_sweep_csv", "gpu_stream_csv"):
            if timing_files.get(name):
                csv_table(doc, timing_files[name], DATA_ROWS)
    doc.notes()


# -- the glossary ------------------------------------------------------------------------------


def glossary(doc: Doc, words: Glossary) -> None:
    """glossary.html: every word a page links here the first time it uses it."""
    doc.heading(1, "Words used")
    doc.para(
        "The first time a page of ",
        Link("the report", doc.page_href("index.html")),
        " uses one of these words, it links here.",
    )
    doc.definitions([(anchor, term, [definition]) for anchor, term, definition in words.entries()])


# -- for maintainers ---------------------------------------------------------------------------


def _skipped(doc: Doc, run: dict) -> list[list]:
    """What did not run or was not measured, and why, each as the pieces of one line."""
    L = doc.ledger
    items = [[f"{title(lesson)}: {why}."] for lesson, why in run.get("refused", {}).items()]
    timing_files = run["timing"]
    for label, name, key in (
        ("GPU timing", "gpu_summary", "skipped"),
        ("CPU timing", "cpu_summary", "skipped"),
        ("Whole-model decode", "decode_summary", "skipped"),
        ("Whole-model decode on the GPU", "gpu_summary", "decode_skipped"),
        ("llama.cpp decode", "decode_summary", "llama_cpp/skipped"),
        ("llama.cpp on a float32 copy", "decode_summary", "llama_cpp_f32/skipped"),
    ):
        path = timing_files.get(name)
        if path and isinstance(L.read(path, key) if L.has(path, key) else None, str):
            items.append([f"{label}: not measured: ", L.cite(path, key), "."])
    for lesson, files in run["lessons"].items():
        metrics = files.get("metrics_json")
        data = L.data(metrics) if metrics else {}
        for key, value in data.items() if isinstance(data, dict) else ():
            if key.endswith("skipped") and isinstance(value, str) and value:
                items.append([f"{title(lesson)}: a part not run: ", L.cite(metrics, key), "."])
    return items


def maintainers(doc: Doc, run: dict, manifest: dict) -> None:
    """The closing section: targets, what was skipped and why, each job's resources, provenance."""
    L = doc.ledger
    doc.heading(2, "For maintainers", anchor="maintainers", toc="For maintainers")
    doc.para(
        "The workflow's own engineering, for whoever runs and maintains it: the performance targets, what"
        " did not run and why, each job's time and memory, and where the run came from."
    )
    targets = _target_list(doc, run["timing"])
    if targets:
        met = [L.cite(path, f"targets/{i}/name") for path, i, target in targets if target.get("met")]
        missed = [L.cite(path, f"targets/{i}/name") for path, i, target in targets if not target.get("met")]
        doc.para(
            "Performance targets met: ",
            *(_joined(met) if met else ["none"]),
            "; not met: ",
            *(_joined(missed) if missed else ["none"]),
            ". Each goal beside its measurement is on ",
            Link("the run's data page", doc.page_href(RUN_PAGE, "targets")),
            ".",
        )
    skipped = _skipped(doc, run)
    if skipped:
        doc.para("Not run or not measured in this run:")
        doc.raw_list(skipped)
    jobs = manifest.get("job_resources")
    if jobs and L.data(jobs):
        doc.para(
            "Jobs: ",
            L.cite(jobs, "rows"),
            " benchmark records; over their declared memory: ",
            L.cite(jobs, "count/within_mem_mb=False"),
            ", over their declared runtime: ",
            L.cite(jobs, "count/within_runtime=False"),
            ".",
        )
    doc.para(
        "git describe: ",
        L.cite(SELF, "git_describe"),
        "; config sha256: ",
        L.cite(SELF, "config_sha256"),
        "; report finished: ",
        L.cite(SELF, "report/finished"),
        ". The machine, the packages, each job's resources and every file cited are on ",
        Link("the run's data page", doc.page_href(RUN_PAGE)),
        ".",
    )


def _joined(items: list) -> list:
    """Citations as the pieces of one comma-separated run of text."""
    out = []
    for item in items:
        out += [", "] if out else []
        out.append(item)
    return out


def _target_list(doc: Doc, timing_files: dict) -> list[tuple[str, int, dict]]:
    """(file, index, target) of each of the CPU and decode jobs' targets."""
    L = doc.ledger
    out = []
    for name in ("cpu_summary", "decode_summary"):
        path = timing_files.get(name)
        targets = L.read(path, "targets") if path and L.has(path, "targets") else []
        out += [(path, i, target) for i, target in enumerate(targets if isinstance(targets, list) else [])]
    return out


def _targets(doc: Doc, timing_files: dict) -> list[tuple[list, list]]:
    """The targets as table cells (name, goal, measured, met, note), each cited from its file, and their styles."""
    L = doc.ledger
    out = []
    for path, i, target in _target_list(doc, timing_files):
        share = "%" if SHARE.search(str(target.get("name", ""))) else None  # a goal for a share is one too
        measured = (
            L.cite(path, f"targets/{i}/measured", share) if target.get("measured") is not None else "not measured"
        )
        note = L.cite(path, f"targets/{i}/note") if target.get("note") else ""  # why not measured, or out of reach
        row = [L.cite(path, f"targets/{i}/name"), L.cite(path, f"targets/{i}/target", share), measured,
               L.cite(path, f"targets/{i}/met"), note]  # fmt: skip
        out.append((row, ["", "", "", "met-yes" if target.get("met") else "met-no", ""]))
    return out


def write_run_page(doc: Doc, run: dict, manifest: dict) -> None:
    """data/run.html: the run's facts, each job's resources, the targets and every file cited."""
    L = doc.ledger
    doc.heading(1, "The run \u00b7 data")
    doc.para(
        "Where this report came from, for ",
        Link("the report's closing section", doc.page_href("index.html", "maintainers")),
        ". Every value is read from the report's manifest.json, under the key shown.",
    )
    doc.heading(2, "The run", anchor="run", toc="The run")
    facts = list(PROVENANCE_FACTS)
    for i, _ in enumerate(manifest["machine"].get("blas") or []):
        facts += [
            (f"BLAS {i}: {part}", f"machine/blas/{i}/{key}", None)
            for part, key in (
                ("library", "internal_api"),
                ("version", "version"),
                ("threads in the report job", "num_threads"),
                ("threading layer", "threading_layer"),
            )
        ]
    for i, _ in enumerate(manifest["machine"].get("gpus") or []):
        facts += [
            (f"GPU {i}: {part}", f"machine/gpus/{i}/{key}", None)
            for part, key in (("name", "name"), ("driver", "driver"), ("memory (MiB)", "memory_mib"))
        ]
    facts += [(f"package {name}", f"packages/{name}", None) for name in manifest["packages"]]
    note = L.note(SELF, None, "table")
    rows = [[label, L.cite(SELF, key, fmt, note=note), key] for label, key, fmt in facts if L.has(SELF, key)]
    if not manifest["machine"].get("gpus"):
        rows.append(["GPU", "none (nvidia-smi found none on the machine that wrote the report)", "machine/gpus"])
    doc.table(["fact", "value", "key in manifest.json"], rows, note=note, caption="The run's facts")
    model_file(doc, run)
    targets = _targets(doc, run["timing"])
    if targets:
        doc.heading(2, "Performance targets", anchor="targets", toc="Performance targets")
        rows, css = zip(*targets)
        doc.table(["target", "goal", "measured", "met", "note"], list(rows), list(css), caption="Performance targets")
    jobs = manifest.get("job_resources")
    if jobs:
        doc.heading(2, "Jobs: time and memory", anchor="job-resources", toc="Jobs: time and memory")
        doc.para(
            "Snakemake's benchmark file of each job: wall time and peak resident memory (the job's processes"
            " summed, sampled every half second), beside the runtime and mem_mb its rule declares to a"
            " scheduler. A job over its declaration is marked."
        )

        def css(col: str, raw: str) -> str:
            if col in ("within_mem_mb", "within_runtime") and raw in ("True", "False"):
                return "met-yes" if raw == "True" else "met-no"
            return ""

        csv_table(doc, jobs, None, css=css)
    if "files" in manifest:
        doc.heading(2, "Files cited", anchor="files", toc="Files cited")
        note = L.note(SELF, None, "table")
        rows = []
        for i, f in enumerate(manifest["files"]):
            rows.append(
                [
                    L.cite(SELF, f"files/{i}/{k}", "bytes" if k == "bytes" else None, note=note)
                    for k in ("path", "bytes", "sha256", "rule")
                ]
                + [L.cite(SELF, f"files/{i}/job_finished", note=note) if f.get("job_finished") else ""]
            )
        doc.table(
            ["file", "size", "sha256", "rule", "written (Snakemake's record)"],
            rows,
            note=note,
            caption="Every file the report cites (each in the manifest under files/<row>/<column>; those"
            " inside this report's folder are marked there)",
        )
        if manifest.get("inputs_not_cited"):
            doc.para("Inputs of the report rule it does not cite: ", L.cite(SELF, "inputs_not_cited"), ".")
    doc.notes()
