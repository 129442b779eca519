"""A sibling module: imported relatively (`from . import helper`) and by name (`import helper`)."""

import os

VALUE = "helper"


def labels():
    """The version directory's labels.txt, read relative to this file."""
    with open(os.path.join(os.path.dirname(__file__), "labels.txt")) as f:
        return f.read().split()
