"""The dated report: build, the document model, citations, verify, provenance, notebook pages,
job resources. Sits above the lessons; nothing below imports it."""
