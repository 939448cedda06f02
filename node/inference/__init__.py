"""Inference as a governed capability (docs/inference.md): the models an operator names, the
chat requests agents make of them, the providers' streaming formats, and the metering, limits
and traces around each call. `node/runtime/host.py`'s `infer` is a thin call into
`service.InferenceService`."""
