"""Processes and clusters for the tests and the benches: real nodes (`python -m node run`) on
free ports with known tokens, meshes of them, prefilled journals, and nats-server clusters.

Both tests/ and bench/ import from here; bench/ never imports tests/.
"""
