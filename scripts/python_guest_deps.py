"""What a Python guest's build bundles besides its own code (used by scripts/build-python-guest.sh).

    python_guest_deps.py uses-numpy DIR [REQUIREMENTS]
        exit 0 when a .py file in DIR imports numpy or calls Tensor.as_numpy() (which needs no
        import in Triton), or REQUIREMENTS names numpy; else 1
    python_guest_deps.py requirements REQUIREMENTS CACHE_DIR NUMPY_VERSION
        installs REQUIREMENTS' pure-Python wheels for the guest into a directory cached by the
        file's content, and prints that directory; exit 1 with a message naming the requirement
        that cannot be bundled

Guests run componentize-py's CPython 3.14 on wasm32-wasi: only wheels tagged py3-none-any (or
py2.py3) can run there. numpy is the exception: it is built for the guest by
scripts/build-numpy-wasi.sh, so a numpy requirement (direct or through a dependency) is satisfied
by that build, and its version must match it.
"""

import ast
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

GUEST_PYTHON = "3.14"


def fail(message):
    print("build-python-guest: " + message, file=sys.stderr)
    sys.exit(1)


def _needs_numpy(source):
    """Whether module source imports numpy, or calls Tensor.as_numpy() (in Triton numpy is always
    there, so a model may get arrays from pb_utils without importing it)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # newer syntax than this interpreter's: a plain text search
        return re.search(r"^\s*(import\s+numpy\b|from\s+numpy\b|import\s+.*,\s*numpy\b)|\.as_numpy\s*\(",
                         source, re.M) is not None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "numpy" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "numpy":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "as_numpy":
            return True
    return False


def _requirement_name(line):
    """The project name of a requirements.txt line, or None for blanks, comments and options."""
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
        return None
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
    return m.group(0).lower().replace("_", "-") if m else None


def uses_numpy(directory, requirements=None):
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".py") and os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                source = f.read()
            if _needs_numpy(source):
                return True
    if requirements and os.path.isfile(requirements):
        with open(requirements) as f:
            if any(_requirement_name(line) == "numpy" for line in f):
                return True
    return False


def _stub_numpy_wheel(directory, version):
    """An empty numpy wheel of the guest build's version: lets pip resolve packages that depend
    on numpy without fetching a native one (the guest's numpy comes from build-numpy-wasi.sh)."""
    name = "numpy-%s-py3-none-any.whl" % version
    info = "numpy-%s.dist-info" % version
    files = {
        info + "/METADATA": "Metadata-Version: 2.1\nName: numpy\nVersion: %s\n" % version,
        info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: tessera\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def _cannot_bundle(output):
    """The requirement pip could not find a pure-Python wheel for, from its error output."""
    m = re.search(r"satisfies the requirement ([^\s(]+)", output)
    return (_requirement_name(m.group(1)) or m.group(1)) if m else None


def requirements(path, cache_dir, numpy_version):
    with open(path) as f:
        lines = f.read().splitlines()
    kept = []
    for line in lines:
        if _requirement_name(line) == "numpy":
            spec = line.split("#", 1)[0].strip()
            pinned = re.search(r"==\s*([^\s;,]+)", spec)
            if pinned and pinned.group(1) != numpy_version:
                fail("%s asks for %s, but Python guests bundle numpy %s (the version "
                     "scripts/build-numpy-wasi.sh builds for wasm32-wasi)" % (path, spec, numpy_version))
            continue  # the guest's own numpy build satisfies it
        kept.append(line)
    text = "\n".join(kept) + "\n"
    key = hashlib.sha256(("%s\n%s\n%s" % (GUEST_PYTHON, numpy_version, text)).encode()).hexdigest()[:16]
    site = os.path.join(cache_dir, key, "site")
    if os.path.isfile(os.path.join(site, ".complete")):
        print(site)
        return
    os.makedirs(os.path.dirname(site), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(site)) as tmp:
        req = os.path.join(tmp, "requirements.txt")
        with open(req, "w") as f:
            f.write(text)
        links = os.path.join(tmp, "links")
        os.makedirs(links)
        _stub_numpy_wheel(links, numpy_version)
        target = os.path.join(tmp, "site")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--no-compile", "--target", target, "--only-binary=:all:", "--platform", "any",
               "--implementation", "py", "--python-version", GUEST_PYTHON, "--abi", "none",
               "--find-links", links, "-r", req]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            name = _cannot_bundle(run.stdout + run.stderr)
            if name:
                fail("%s: %s has no pure-Python wheel (py3-none-any) for the guest's Python %s: only "
                     "pure-Python packages can be bundled into a Wasm guest, and numpy is the one "
                     "native package it has (see docs/wasm.md)" % (path, name, GUEST_PYTHON))
            fail("%s: pip could not install it for the guest:\n%s" % (path, (run.stdout + run.stderr).strip()))
        # the stub numpy stands for the guest's real one: keep neither its files nor its record
        for entry in os.listdir(target):
            if entry == "numpy" or re.match(r"numpy-[^-]+\.dist-info$", entry):
                shutil.rmtree(os.path.join(target, entry), ignore_errors=True)
        shutil.rmtree(os.path.join(target, "bin"), ignore_errors=True)
        frozen = sorted(e[:-len(".dist-info")] for e in os.listdir(target) if e.endswith(".dist-info"))
        with open(os.path.join(target, ".complete"), "w") as f:
            f.write("\n".join(frozen) + "\n")
        shutil.rmtree(site, ignore_errors=True)
        os.rename(target, site)
    print(site)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["uses-numpy"] and len(args) in (2, 3):
        sys.exit(0 if uses_numpy(*args[1:]) else 1)
    if args[:1] == ["requirements"] and len(args) == 4:
        requirements(*args[1:])
        sys.exit(0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
