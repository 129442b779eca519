"""Helpers of scripts/build-numpy-wasi.sh (numpy for componentize-py guests).

    numpy_wasi.py runtime SO OUT        componentize-py's embedded dylibs and sysconfigdata -> OUT
    numpy_wasi.py pyconfig TEMPLATE SYSCONFIGDATA OUT
    numpy_wasi.py sdist NAME VERSION SHA256 OUT_DIR

Each step exits non-zero with one line that says what failed.
"""

import hashlib
import importlib.util
import io
import json
import os
import re
import sys
import tarfile
import urllib.request

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# componentize-py keeps its runtime libraries zstd-compressed inside its extension module. Each
# is named here by a symbol only it exports (libc's must also lack CPython's symbols).
LIBRARIES = (
    ("libc.so", b"fdopendir"),
    ("libpython3.14.so", b"_PyToken_OneChar"),
    ("libc++abi.so", b"__cxa_bad_cast"),
    ("libc++.so", b"_ZNSt3__26__sortIRNS_6__lessIccEEPcEEvT0_S5_T_"),
)
SYSCONFIGDATA = "_sysconfigdata__wasi_wasm32-wasi.py"


def die(message):
    print("build-numpy-wasi: " + message, file=sys.stderr)
    sys.exit(1)


def runtime(so_path, out):
    """Decompresses every zstd frame of componentize-py's module and keeps the dylink libraries
    numpy links against, and the stdlib's sysconfigdata (the embedded CPython's build facts)."""
    import zstandard

    data = open(so_path, "rb").read()
    os.makedirs(out, exist_ok=True)
    found = set()
    pos = data.find(ZSTD_MAGIC)
    while pos != -1:
        try:
            buf = zstandard.ZstdDecompressor().decompressobj().decompress(data[pos:pos + 64_000_000])
        except zstandard.ZstdError:
            buf = b""
        if buf[:4] == b"\0asm" and b"dylink.0" in buf[:64]:
            for name, symbol in LIBRARIES:
                if name in found or symbol not in buf:
                    continue
                if name == "libc.so" and b"PyUnicode" in buf:
                    continue
                with open(os.path.join(out, name), "wb") as f:
                    f.write(buf)
                found.add(name)
                break
        elif buf[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(buf)) as t:
                for m in t.getmembers():
                    if m.name == SYSCONFIGDATA or m.name.endswith("/" + SYSCONFIGDATA):
                        m.name = SYSCONFIGDATA
                        t.extract(m, out)
                        found.add(SYSCONFIGDATA)
        pos = data.find(ZSTD_MAGIC, pos + 4)
    missing = [n for n, _ in LIBRARIES if n not in found] + ([] if SYSCONFIGDATA in found else [SYSCONFIGDATA])
    if missing:
        die("componentize-py's module %s holds no %s: is it version %s's?"
            % (so_path, ", ".join(missing), os.environ.get("CPY_VERSION", "?")))


# Macros starting with '_' are not recorded in sysconfigdata: their WASI values (CPython's
# configure.ac for wasm32-wasi).
UNDERSCORED = {
    "_WASI_EMULATED_SIGNAL": "1", "_WASI_EMULATED_GETPID": "1", "_WASI_EMULATED_PROCESS_CLOCKS": "1",
    "_Py_STACK_GROWS_DOWN": "1", "_GNU_SOURCE": "1", "_POSIX_C_SOURCE": "200809L",
    "_XOPEN_SOURCE": "700", "_XOPEN_SOURCE_EXTENDED": "1", "_DARWIN_C_SOURCE": "1",
    "_NETBSD_SOURCE": "1", "__BSD_VISIBLE": "1", "_PYTHONFRAMEWORK": '""', "_REENTRANT": "1",
}


def pyconfig(template, sysconfigdata, out):
    """pyconfig.h for the embedded CPython: the macro names of a pyconfig.h of the same minor
    version (any platform), each given the value the wasm32-wasi build recorded."""
    spec = importlib.util.spec_from_file_location("wasi_sysconfigdata", sysconfigdata)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = module.build_time_vars
    lines = ["/* pyconfig.h for wasm32-wasip2 (componentize-py's CPython), written by numpy_wasi.py */",
             "#ifndef Py_PYCONFIG_H", "#define Py_PYCONFIG_H"]
    seen = set()
    define = re.compile(r"#define ([A-Za-z_][A-Za-z0-9_]*)(?: (.*))?$")
    undef = re.compile(r"/\* #undef ([A-Za-z_][A-Za-z0-9_]*) \*/")
    for line in open(template):
        m = define.match(line.rstrip("\n")) or undef.match(line)
        if not m:
            continue
        name = m.group(1)
        if name in seen or name == "Py_PYCONFIG_H":
            continue
        seen.add(name)
        if name.startswith("_"):
            value = UNDERSCORED.get(name)
        else:
            value = values.get(name)
            if value == 0 and name != "HAVE_DECL_RTLD_MEMBER":
                value = None
            elif value is not None:
                value = str(value)
        lines.append("#define %s %s" % (name, value) if value is not None else "/* #undef %s */" % name)
    lines += ["#define %s %s" % (k, v) for k, v in UNDERSCORED.items() if k not in seen]
    lines.append("#endif /* Py_PYCONFIG_H */")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def sdist(name, version, sha256, out_dir):
    """The sdist NAME-VERSION.tar.gz from the package index pip uses (PIP_INDEX_URL, else pip's
    default), checked against SHA256. `pip download` of a meson-python sdist builds the whole
    package natively to read its metadata, so the index is read directly (PEP 691 JSON)."""
    index = os.environ.get("PIP_INDEX_URL")
    if not index:
        from pip._internal.models.index import PyPI
        index = PyPI.simple_url
    want = "%s-%s.tar.gz" % (name, version)
    url = "%s/%s/" % (index.rstrip("/"), name)
    try:
        req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        files = json.load(urllib.request.urlopen(req, timeout=120))["files"]
        entry = next((f for f in files if f["filename"] == want), None)
        if entry is None:
            die("the package index has no %s" % want)
        data = urllib.request.urlopen(entry["url"], timeout=600).read()
    except OSError as e:
        die("could not download %s from the package index: %s" % (want, e))
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        die("%s has sha256 %s, not the pinned %s" % (want, got, sha256))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, want), "wb") as f:
        f.write(data)


if __name__ == "__main__":
    commands = {"runtime": (runtime, 2), "pyconfig": (pyconfig, 3), "sdist": (sdist, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) - 2 != commands[sys.argv[1]][1]:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    fn, _ = commands[sys.argv[1]]
    fn(*sys.argv[2:])
