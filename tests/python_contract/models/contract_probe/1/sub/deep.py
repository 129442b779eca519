from .. import helper  # a relative import up out of the subpackage

DEEP = "deep+" + helper.VALUE
