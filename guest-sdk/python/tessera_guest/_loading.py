"""Triton's model loading API (`pb_utils.load_model`, `unload_model`, `is_model_ready`) and
`pb_utils.get_model_dir`, for a sandboxed guest.

Loading and unloading models is repository control, which the server keeps from the code it
hosts: a guest may only call the models its `allowed_models` grant names. So the three calls
raise TritonModelException with Triton's UNSUPPORTED code and say what to do instead (load the
models through the repository API, or list them in the control mode's startup set). Triton, too,
allows them only in explicit control mode and not during `auto_complete_config` or `finalize`.
"""

from ._entry import GUEST_DIR
from ._errors import TritonError, TritonModelException

_REFUSAL = ("the model loading API (pb_utils.%s) is not available to a sandboxed model: load the "
            "models it calls through the server's repository API (POST /v2/repository/models/<name>/load)"
            " or at startup, and grant them to this model with its allowed_models parameter")


def load_model(model_name, config="", files=None):
    raise TritonModelException(_REFUSAL % "load_model", TritonError.UNSUPPORTED)


def unload_model(model_name, unload_dependents=False):
    raise TritonModelException(_REFUSAL % "unload_model", TritonError.UNSUPPORTED)


def is_model_ready(model_name, model_version=""):
    raise TritonModelException(_REFUSAL % "is_model_ready", TritonError.UNSUPPORTED)


def get_model_dir():
    """The version directory, as the guest sees it: readable under the `filesystem = read-only`
    grant (Triton's returns the version directory's path on the server)."""
    return GUEST_DIR
