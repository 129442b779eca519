from .deep import DEEP  # noqa: F401  a relative import inside a subpackage
