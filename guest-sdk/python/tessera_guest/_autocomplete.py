"""pb_utils.ModelConfig: what a model's `auto_complete_config(auto_complete_model_config)` gets.

The host calls the guest's `auto-complete-config` export at load with the model's config as JSON
(what config.pbtxt gave, or only the name when there is none); the model adds inputs and outputs,
sets the batch size, dynamic batching or the transaction policy, and the host validates what
comes back as Triton does.
"""

import json

_TENSOR_KEYS = ("name", "data_type", "dims", "optional")


class ModelConfig:
    """Triton's auto-complete view of a model config (its method names and checks)."""

    def __init__(self, model_config):
        if isinstance(model_config, str):
            model_config = json.loads(model_config) if model_config else {}
        self._model_config = dict(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self):
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 0:
            raise ValueError("max_batch_size must be a non-negative integer, got %r" % (max_batch_size,))
        current = int(self._model_config.get("max_batch_size", 0) or 0)
        if current not in (0, max_batch_size):
            raise ValueError(
                "configuration specified max_batch_size %d, but in auto-complete-config function for "
                "model '%s' specified max_batch_size %d" % (current, self._model_config.get("name", ""),
                                                            max_batch_size))
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        if not self._model_config.get("dynamic_batching"):
            self._model_config["dynamic_batching"] = {}

    def set_model_transaction_policy(self, transaction_policy_dict):
        if not isinstance(transaction_policy_dict, dict):
            raise ValueError("model transaction policy must be a dict")
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError("model transaction property '%s' is not supported (only 'decoupled')" % key)
        policy = self._model_config.setdefault("model_transaction_policy", {})
        decoupled = bool(transaction_policy_dict.get("decoupled", False))
        if policy.get("decoupled") and not decoupled:
            raise ValueError("configuration specified decoupled %s, but auto-complete-config set it to %s"
                             % (policy["decoupled"], decoupled))
        policy["decoupled"] = decoupled

    def add_input(self, input):
        self._add("input", input)

    def add_output(self, output):
        self._add("output", output)

    def _add(self, kind, tensor):
        if not isinstance(tensor, dict):
            raise ValueError("%s for model '%s' must be a dict" % (kind, self._model_config.get("name", "")))
        for key in tensor:
            if key not in _TENSOR_KEYS:
                raise ValueError("%s '%s' has the property '%s', which auto-complete does not support"
                                 % (kind, tensor.get("name", ""), key))
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError("%s '%s' is missing the '%s' property" % (kind, tensor.get("name", ""), key))
        dims = [int(d) for d in tensor["dims"]]
        existing = next((t for t in self._model_config[kind] if t.get("name") == tensor["name"]), None)
        if existing is None:
            entry = {"name": tensor["name"], "data_type": tensor["data_type"], "dims": dims}
            if "optional" in tensor:
                entry["optional"] = bool(tensor["optional"])
            self._model_config[kind].append(entry)
            return
        # already in the config: fill what it leaves open, refuse what contradicts it
        have_type = existing.get("data_type") or "TYPE_INVALID"
        if have_type == "TYPE_INVALID":
            existing["data_type"] = tensor["data_type"]
        elif have_type != tensor["data_type"]:
            raise ValueError("unable to change the data_type of %s '%s' from %s to %s"
                             % (kind, tensor["name"], have_type, tensor["data_type"]))
        have_dims = existing.get("dims")
        if not have_dims:
            existing["dims"] = dims
        elif [int(d) for d in have_dims] != dims:
            raise ValueError("unable to change the dims of %s '%s' from %s to %s"
                             % (kind, tensor["name"], list(have_dims), dims))


def complete(model_class, config_json):
    """The config JSON the model's auto_complete_config makes of `config_json` (unchanged when
    the model has none)."""
    fn = getattr(model_class, "auto_complete_config", None)
    if fn is None:
        return config_json
    config = ModelConfig(config_json)
    result = fn(config)
    if not isinstance(result, ModelConfig):
        raise TypeError("auto_complete_config must return the ModelConfig it was given, got %s"
                        % type(result).__name__)
    return json.dumps(result.as_dict())
