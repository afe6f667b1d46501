"""Run one lesson notebook with papermill, so that every way it can fail ends in one line.

A cell that raises: the lesson, the cell, the error, and where the partly executed notebook is.
A kernel that dies (the OOM killer, a kill): the same one line, with the likely cause (memory)
instead of nbclient's 25-line traceback. A kernel that dies before running anything, as when the
port jupyter_client picked for it was taken in between ("Address already in use", about one start
in twenty on a loaded machine), is started again: nothing of the notebook ran, so nothing is lost.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import papermill
from nbclient.exceptions import DeadKernelError
from papermill.exceptions import PapermillExecutionError

from bytesup.errors import BytesupError

log = logging.getLogger(__name__)

STARTS = 3  # tries to start a kernel that dies before it runs a cell


class NotebookFailed(BytesupError, RuntimeError):
    """A lesson notebook did not finish; the message is one line naming the partial notebook."""


def _cells_started(partial: Path) -> list[tuple[int, int | None]]:
    """(index, execution count) of each cell the partial notebook shows as started."""
    try:
        cells = json.loads(Path(partial).read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return []
    return [
        (i, c.get("execution_count"))
        for i, c in enumerate(cells)
        if (c.get("metadata", {}).get("papermill") or {}).get("start_time")
    ]


def _died_at_start(err: BaseException, partial: Path) -> bool:
    """A kernel that died before it ran a single cell (its port was taken, most often)."""
    text = str(err)
    if "Address already in use" in text or "Kernel died before replying to kernel_info" in text:
        return True
    return isinstance(err, DeadKernelError) and not _cells_started(partial)


def run_notebook(source, partial, *, lesson: str, parameters: dict, cwd: str, kernel: str = "python3") -> None:
    """Execute ``source`` into ``partial`` with ``parameters``; raise NotebookFailed (one line) if it fails."""
    partial = Path(partial)
    for start in range(1, STARTS + 1):
        try:
            papermill.execute_notebook(
                str(source),
                str(partial),
                parameters=parameters,
                kernel_name=kernel,
                cwd=cwd,
                progress_bar=False,
                log_output=True,
            )
            return
        except PapermillExecutionError as err:
            raise NotebookFailed(
                f"lesson {lesson} failed in cell {err.cell_index} (execution count {err.exec_count}): "
                f"{err.ename}: {err.evalue}; the partly executed notebook is {partial}"
            ) from None
        except (DeadKernelError, RuntimeError, OSError) as err:
            if start < STARTS and _died_at_start(err, partial):
                log.warning(
                    "lesson %s: the kernel died before running a cell (%s); starting it again (%d of %d)",
                    lesson,
                    str(err).splitlines()[0] if str(err) else type(err).__name__,
                    start + 1,
                    STARTS,
                )
                continue
            if not isinstance(err, DeadKernelError):
                if _died_at_start(err, partial):
                    raise NotebookFailed(
                        f"lesson {lesson}: its kernel did not start in {STARTS} tries ({str(err).splitlines()[0]}); "
                        f"check that `python -m ipykernel` runs in this environment and run again"
                    ) from None
                raise
            started = _cells_started(partial)
            if not started:
                where = " before its first cell"
            else:  # a cell killed at once may not have received its execution count yet
                cell, count = started[-1]
                where = f" in cell {cell}" + (f" (execution count {count})" if count is not None else "")
            raise NotebookFailed(
                f"lesson {lesson} failed{where}: its kernel died, most likely out of memory (the OOM killer "
                f"ends the biggest process; `dmesg` says so) or killed; give the job more memory or lower "
                f"forward.resident_budget_mb in config/config.yaml; the partly executed notebook is {partial}"
            ) from None
