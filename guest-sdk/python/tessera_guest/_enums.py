"""Cheaper WIT enum conversions inside a guest.

componentize-py turns a WIT enum (`data-type`, `error-code`, `log-level`) into a Python
`enum.Enum` and converts every value that crosses: into the guest by calling the class with the
discriminant (`DataType(11)`), out of it by reading the member's `.value`. Both run interpreted
standard-library code (`EnumType.__call__` then `Enum.__new__`; `.value` is an `enum.property`),
about 0.45 and 0.16 µs in a guest, and a request of add_sub crosses four.

`install(classes)` gives those classes a metaclass whose call with one `int` looks the member up
at once (anything else takes `EnumType.__call__`'s way), and a `.value` that reads the member's
`_value_` in C. Nothing else about the classes changes; other enums are untouched.
"""

import enum
import operator


class _FastEnumType(enum.EnumType):
    def __call__(cls, value, *args, **kwargs):
        if value.__class__ is int and not args and not kwargs:
            member = cls._value2member_map_.get(value)
            if member is not None:
                return member
        return super().__call__(value, *args, **kwargs)


_VALUE = property(operator.attrgetter("_value_"), doc="The member's value.")


def install(classes):
    """Makes the conversions of these enum classes cheaper (idempotent; classes with another
    metaclass than EnumType, or with a member called `value`, are left alone)."""
    for cls in classes:
        if type(cls) is enum.EnumType and "value" not in cls.__members__:
            cls.__class__ = _FastEnumType
            cls.value = _VALUE


def enum_classes(*modules):
    """The enum classes componentize-py generated in `modules`."""
    return [v for m in modules if m is not None for v in vars(m).values()
            if isinstance(v, type) and issubclass(v, enum.Enum) and v.__module__ == m.__name__]
