"""Execute one lesson notebook with papermill (called by the lesson rules).

The notebook receives exactly the parameters its SPEC names (bytesup.lessons.spec): model,
model_sha256, the config keys it takes, and every input and output path by name. It runs into
its log file first, so a failed run leaves the partly executed notebook where the user can open
it; only a finished run is copied to the output.
"""

import json
import os
import sys
import shutil
from pathlib import Path

import papermill
from papermill.exceptions import PapermillExecutionError

sm = snakemake  # noqa: F821  (injected by Snakemake's script directive)

# The pinned kernel is 'python3' of the environment running the workflow: its kernel.json
# starts `python`, so this environment's bin folder goes first on PATH.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

files = {**dict(sm.input.items()), **dict(sm.output.items())}
parameters = {name: str(path) for name, path in files.items() if name not in ("notebook", "model_record")}
parameters.update(
    model=sm.wildcards.model,
    model_sha256=json.loads(Path(sm.input.model_record).read_text())["sha256"],
    **sm.params.settings,
)
partial = Path(sm.log.notebook)
partial.parent.mkdir(parents=True, exist_ok=True)
Path(sm.output.notebook).parent.mkdir(parents=True, exist_ok=True)

try:
    papermill.execute_notebook(
        sm.input.notebook,
        str(partial),
        parameters=parameters,
        kernel_name="python3",
        cwd=os.getcwd(),
        progress_bar=False,
        log_output=True,
    )
except PapermillExecutionError as err:
    sys.exit(
        f"lesson {sm.params.lesson} failed in cell {err.cell_index} "
        f"(execution count {err.exec_count}): {err.ename}: {err.evalue}; "
        f"the partly executed notebook is {partial}"
    )
shutil.copyfile(partial, sm.output.notebook)
