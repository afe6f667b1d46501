"""The file format: the reader (`file`), sizes and blocks, the dequantizers, the extract stage.
Imports only `bytesup.run` below it."""
