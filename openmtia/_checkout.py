"""Telling an unbuilt source checkout from the package (imports no torch).

From the repository's root, Python finds the checkout's openmtia/ before the
installed package (the current directory comes first on sys.path). Unless it
was built in place (pip install -e), that folder has no openmtia._C; torch's
device autoload would then fail `import torch` itself. numpy and torch detect
this case and say "you are importing from the source directory": so does this.
"""
import importlib.machinery
import os
import sys
import warnings


def unbuilt_checkout_message():
    """The message for an unbuilt source checkout, or None (built: an install,
    or a checkout built in place; or not a checkout: a missing extension then
    fails as it would)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if any(os.path.exists(os.path.join(here, "_C" + s)) for s in importlib.machinery.EXTENSION_SUFFIXES):
        return None
    root = os.path.dirname(here)
    if not (os.path.isfile(os.path.join(root, "setup.py")) and os.path.isdir(os.path.join(root, "csrc"))):
        return None
    return (f"openmtia: you are importing openmtia from its source directory, {root}, which is not built "
            f"(openmtia/_C is missing): Python looks in the current directory before the installed package. "
            f"mtia is unavailable in this process. Run Python from another directory, or build the checkout "
            f"in place: pip install --no-build-isolation -e .")


def refuse_unbuilt_checkout(message):
    """Inside `import torch` (its device autoload), a RuntimeWarning, so that
    torch still imports, without mtia; an explicit `import openmtia`, an
    ImportError."""
    torch = sys.modules.get("torch")
    if getattr(getattr(torch, "__spec__", None), "_initializing", False):
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        return
    raise ImportError(message)
