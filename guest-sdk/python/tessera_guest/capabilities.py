"""A model's configuration values, the operator's secrets and its key-value store, through the
standard WASI interfaces the host grants per model (the server's docs/capabilities.md).

    from tessera_guest import capabilities

    api_key = capabilities.config_get("moderation_key")     # None when not granted
    cache = capabilities.Bucket("lookups")                   # keyvalue = memory | persistent
    cache.set("k", b"v"); cache.get("k"); cache.increment("calls")

Every failure raises CapabilityError with the host's reason (`PermissionError` subclass when
the model's config grants no key-value store).
"""

try:
    from componentize_py_types import Err
    from wit_world.imports import atomics as _atomics
    from wit_world.imports import wasi_config_store as _config
    from wit_world.imports import wasi_keyvalue_store as _kv
    AVAILABLE = True
except ImportError:  # plain CPython
    AVAILABLE = False

    class Err(Exception):
        pass


class CapabilityError(RuntimeError):
    """A wasi:config or wasi:keyvalue call the host refused."""


class NotGranted(CapabilityError, PermissionError):
    """The model's config grants no key-value store (parameter `keyvalue`)."""


def _error(err):
    value = getattr(err, "value", err)
    name = type(value).__name__
    if name.endswith("AccessDenied"):
        return NotGranted("this model has no key-value store: its config grants none (parameter 'keyvalue')")
    message = getattr(value, "value", None)
    return CapabilityError(message if isinstance(message, str) else name)


def _host():
    if not AVAILABLE:
        raise CapabilityError("no host: wasi:config and wasi:keyvalue exist only inside a component")


def config_get(key):
    """The value of `key` (a `config.<key>` parameter or a granted secret), or None."""
    _host()
    try:
        return _config.get(key)
    except Err as e:
        raise _error(e) from None


def config_items():
    """Every (key, value) the model has, as a dict."""
    _host()
    try:
        return dict(_config.get_all())
    except Err as e:
        raise _error(e) from None


class Bucket:
    """A bucket of the model's key-value store (created on its first write)."""

    def __init__(self, name):
        _host()
        try:
            self._bucket = _kv.open(name)
        except Err as e:
            raise _error(e) from None

    def _call(self, method, *args):
        try:
            return method(*args)
        except Err as e:
            raise _error(e) from None

    def get(self, key):
        """The bytes of `key`, or None."""
        return self._call(self._bucket.get, key)

    def set(self, key, value):
        """Sets `key` to `value` (bytes or str); refused past the model's quota."""
        if isinstance(value, str):
            value = value.encode()
        self._call(self._bucket.set, key, bytes(value))

    def delete(self, key):
        self._call(self._bucket.delete, key)

    def exists(self, key):
        return self._call(self._bucket.exists, key)

    def keys(self):
        """Every key of the bucket, in order."""
        keys, cursor = [], None
        while True:
            page = self._call(self._bucket.list_keys, cursor)
            keys.extend(page.keys)
            if page.cursor is None:
                return keys
            cursor = page.cursor

    def increment(self, key, delta=1):
        """Adds `delta` to the decimal number `key` holds (0 when none) and returns the sum."""
        return self._call(_atomics.increment, self._bucket, key, delta)
