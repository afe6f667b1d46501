"""The workflow's own needs, below everything else: files and hashing, paths, locks, job logs,
notebook jobs, fetching. Nothing here knows what a model is; it imports no other wing."""
