"""One list names every read model and where it lives; the node hosts exactly that list."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import projections
from node.app import build_app
from node.context import CONTEXT
from projections.models import READ_MODELS, Storage
from tests.support import make_config


def read_model_classes() -> set[type]:
    """Every class in projections/ with a read model's shape: a `name`, and a fold."""
    found = set()
    for module in pkgutil.iter_modules(projections.__path__):
        loaded = importlib.import_module(f"projections.{module.name}")
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            if cls.__module__ != loaded.__name__ or cls.__name__.startswith("_"):
                continue
            named = isinstance(getattr(cls, "name", None), str) and cls.name
            if named and (hasattr(cls, "apply") or hasattr(cls, "fold")):
                found.add(cls)
    return found


def test_every_read_model_is_listed_once_with_the_storage_its_shape_says():
    listed = [m.kind for m in READ_MODELS]
    assert len(listed) == len(set(listed))
    # a model's parts (the approvals' tables of the tasks model) are folded by their model
    parts = {type(p) for m in READ_MODELS for p in getattr(m.kind(), "parts", ())}
    assert set(listed) | parts == read_model_classes()
    for model in READ_MODELS:
        on_disk = hasattr(model.kind, "bind") and hasattr(model.kind, "fold")
        assert (model.storage is Storage.DISK) == on_disk, model


def test_the_node_hosts_exactly_the_listed_models_where_the_list_says(tmp_path):
    ctx = build_app(make_config(tmp_path))[CONTEXT]
    try:
        in_memory = {type(p) for p in ctx.projections}
        on_disk = {type(m) for m in ctx.store.indexer}
        assert in_memory == {m.kind for m in READ_MODELS if m.storage is Storage.MEMORY}
        assert on_disk == {m.kind for m in READ_MODELS if m.storage is Storage.DISK}
    finally:
        ctx.store.close_sync()
