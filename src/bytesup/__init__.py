"""llm-bytes-up: the package behind the workflow.

Rules own paths; this package owns logic; notebooks are thin narrative over it.
"""

__version__ = "0.1.0"
