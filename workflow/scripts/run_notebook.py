"""Execute one lesson notebook with papermill (called by the lesson rules).

The notebook runs into its log file first, so a failed run leaves the partly executed
notebook where the user can open it; only a finished run is copied to the output.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import papermill
from papermill.exceptions import PapermillExecutionError

sm = snakemake  # noqa: F821  (injected by Snakemake's script directive)

# The pinned kernel is 'python3' of the environment running the workflow: its kernel.json
# starts `python`, so this environment's bin folder goes first on PATH.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

parameters = {name: str(path) for name, path in sm.input.items() if name != "notebook"}
parameters.update(
    out_dir=sm.params.out_dir,
    model=sm.params.model,
    model_sha256=json.loads(Path(sm.input.model_record).read_text())["sha256"],
    token=sm.params.token,
    seed=int(sm.params.seed),
)
partial = Path(sm.log.notebook)
partial.parent.mkdir(parents=True, exist_ok=True)
Path(sm.params.out_dir).mkdir(parents=True, exist_ok=True)

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
