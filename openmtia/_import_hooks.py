"""Changes to other packages' modules, made right after a module is executed.

openmtia is loaded at the end of ``import torch``, before the modules it
adapts (Inductor's, FBGEMM's) are usually imported: ``after_import(name, fn)``
runs ``fn(module)`` once the module named ``name`` has been executed, or now
if it already has been.
"""
import importlib.abc
import importlib.machinery
import sys

_HOOKS = {}


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the hook."""

    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        after = _HOOKS.get(fullname)
        if after is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, after)
        return spec


def after_import(name, after):
    _HOOKS[name] = after
    if name in sys.modules:  # imported before openmtia: change it now
        after(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
