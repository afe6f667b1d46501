"""Execute one lesson notebook with papermill (called by the lesson rules).

The notebook receives exactly the parameters its SPEC names (bytesup.lessons.spec): model,
model_sha256, the config keys it takes, and every input and output path by name. It runs into
its log file first, so a failed run leaves the partly executed notebook where the user can open
it; only a finished run is copied to the output. A failing cell or a dying kernel ends the job
with one line (bytesup.run.notebook_job).
"""

import json
import logging
import os
import shutil
import sys
from contextlib import nullcontext
from pathlib import Path

from bytesup.errors import BytesupError
from bytesup.run.joblog import as_the_user_knows
from bytesup.run.model_cache import reading_model
from bytesup.run.notebook_job import run_notebook

sm = snakemake  # noqa: F821  (injected by Snakemake's script directive)
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

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

# A lesson that maps the model checks it is the file the fetch recorded, before and after (run.model_cache).
opens_model = reading_model(files["model_gguf"], sm.input.model_record) if "model_gguf" in files else nullcontext()
try:
    with opens_model:
        run_notebook(sm.input.notebook, partial, lesson=sm.params.lesson, parameters=parameters, cwd=os.getcwd())
except BytesupError as err:
    # a local model's messages name the user's file, not the link or copy under resources/
    internal = files.get("model_gguf")
    sys.exit(as_the_user_knows(str(err), {str(internal): sm.params.shown}) if internal else str(err))
shutil.copyfile(partial, sm.output.notebook)
