"""The installed distribution's version."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("supercluster-planner")
except PackageNotFoundError:  # (run from a source tree that was not installed)
    __version__ = "0+unknown"
