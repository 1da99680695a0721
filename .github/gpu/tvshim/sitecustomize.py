"""Environment shim for the H200 image only (torch 2.11, torchvision 0.26): datasets <= 5.1.0's torch
formatter does `from torchvision.io import VideoReader` once torchvision is imported, and
torchvision 0.26 has no VideoReader, so `speculators prepare-data` dies with ImportError before
vLLM is involved. This adds an empty VideoReader class when torchvision.io lacks one (no value is
ever an instance of it, which is what datasets checks). On PYTHONPATH only for those cells."""

import importlib.abc
import sys


class _AddVideoReader(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torchvision.io":
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            if not hasattr(module, "VideoReader"):
                module.VideoReader = type("VideoReader", (), {"__doc__": "placeholder: see sitecustomize"})

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AddVideoReader())
