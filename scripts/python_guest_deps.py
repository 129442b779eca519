"""What a Python guest's build bundles besides its own code (used by scripts/build-python-guest.sh).

    python_guest_deps.py uses-numpy DIR [REQUIREMENTS]
        exit 0 when a .py file in DIR (or below it) imports numpy or calls Tensor.as_numpy() (which needs no
        import in Triton), or REQUIREMENTS names numpy; else 1
    python_guest_deps.py uses-requests DIR [REQUIREMENTS]
        exit 0 when a .py file in DIR (or below it) imports requests or urllib3 and REQUIREMENTS does
        not name requests; else 1
    python_guest_deps.py bundle-requests OUT_DIR
        copies requests and the packages it imports (pure Python, as the builder's environment has
        them: tests/requirements.txt pins them) into OUT_DIR
    python_guest_deps.py requirements [--offline] REQUIREMENTS CACHE_DIR NUMPY_VERSION
        installs REQUIREMENTS' pure-Python wheels for the guest into a directory cached by the
        file's content, and prints that directory; exit 1 with a message naming the requirement
        that cannot be bundled. --offline: install nothing, only print the directory a fetch made
        (exit 1 if there is none)

requirements.txt is an upload, so it is data, never instructions: each line must be a package
name with an optional exact version, extras, an environment marker and `--hash=` options
(`name`, `name[extra]==1.2; python_version >= "3.8" --hash=sha256:...`). Anything pip would
read as an option (`-r`, `-c`, `--index-url`, `--find-links`, `--no-binary`, ...), URLs, paths
and version ranges are refused with a message naming the line and never its text. pip then sees
only the lines rebuilt from what was parsed, and installs only wheels (`--only-binary=:all:`:
no sdist's build backend ever runs) from its configured index.

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


def _imports(source, names):
    """Whether module source imports a top-level module in `names`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # newer syntax than this interpreter's: a plain text search
        alt = "|".join(re.escape(n) for n in names)
        return re.search(r"^\s*(import\s+(%s)\b|from\s+(%s)\b|import\s+.*,\s*(%s)\b)" % (alt, alt, alt),
                         source, re.M) is not None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in names for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in names:
            return True
    return False


def _needs_numpy(source):
    """Whether module source imports numpy, or calls Tensor.as_numpy() (in Triton numpy is always
    there, so a model may get arrays from pb_utils without importing it)."""
    if _imports(source, ("numpy",)):
        return True
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return re.search(r"\.as_numpy\s*\(", source) is not None
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "as_numpy"
               for node in ast.walk(tree))


def _sources(directory):
    """The text of each .py file in `directory` and below it (no links, hidden directories or
    __pycache__)."""
    for parent, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            path = os.path.join(parent, name)
            if name.endswith(".py") and os.path.isfile(path) and not os.path.islink(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    yield f.read()


def _requirement_name(line):
    """The project name of a requirements.txt line, or None for blanks, comments and options."""
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
        return None
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
    return m.group(0).lower().replace("_", "-") if m else None


def _requirements_name(requirements, name):
    if requirements and os.path.isfile(requirements):
        with open(requirements) as f:
            return any(_requirement_name(line) == name for line in f)
    return False


def uses_numpy(directory, requirements=None):
    if any(_needs_numpy(source) for source in _sources(directory)):
        return True
    return _requirements_name(requirements, "numpy")


# What a Triton python environment has and a guest gets only when its code imports it: `requests`
# and what it imports, pure Python, copied from the builder's own environment (the versions
# tests/requirements.txt pins). charset_normalizer's compiled modules are left out (its .py
# fallbacks stay); certifi's bundle too: a guest opens no TLS connection.
REQUESTS_PACKAGES = ("requests", "urllib3", "idna", "certifi", "charset_normalizer")


def uses_requests(directory, requirements=None):
    """Whether the model's code imports requests or urllib3 and its requirements.txt does not
    bring requests itself."""
    if _requirements_name(requirements, "requests"):
        return False
    return any(_imports(source, ("requests", "urllib3")) for source in _sources(directory))


def bundle_requests(out):
    """Copies the .py files of REQUESTS_PACKAGES from this interpreter's environment into `out`."""
    import importlib.util

    for package in REQUESTS_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            fail("the model imports requests, which the guest build bundles from the builder's Python "
                 "environment, and %s is not installed there: run scripts/setup-python.sh" % package)
        root = list(spec.submodule_search_locations)[0]
        for parent, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                if name.endswith(".py"):
                    source = os.path.join(parent, name)
                    target = os.path.join(out, package, os.path.relpath(source, root))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copyfile(source, target)


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


MAX_REQUIREMENTS_BYTES = 64 * 1024
MAX_REQUIREMENTS = 200
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?"
_VERSION = r"[A-Za-z0-9](?:[A-Za-z0-9.+!_-]{0,62})"
_MARKER_VARIABLES = ("python_version", "python_full_version", "implementation_name",
                     "implementation_version", "platform_python_implementation", "platform_system",
                     "platform_machine", "platform_release", "platform_version", "sys_platform",
                     "os_name", "extra")
_MARKER_TOKEN = re.compile(r"""\s*(?:(?P<var>[a-z_]+)|(?P<op>===|==|!=|<=|>=|~=|<|>|\(|\))|"""
                           r"""(?P<str>"[A-Za-z0-9._+*-]{0,64}"|'[A-Za-z0-9._+*-]{0,64}'))""")
_REQUIREMENT = re.compile(r"(?P<name>%s)(?:\[(?P<extras>%s(?:\s*,\s*%s)*)\])?(?:\s*==\s*(?P<version>%s))?$"
                          % (_NAME, _NAME, _NAME, _VERSION))
_HASH = re.compile(r"--hash=(sha256|sha384|sha512):[0-9a-f]{32,128}$")


class Refused(Exception):
    """A requirements.txt line that is not plain data; the message never quotes the line."""


def _check_marker(marker):
    pos = 0
    words = 0
    while pos < len(marker):
        if marker[pos:].strip() == "":
            break
        m = _MARKER_TOKEN.match(marker, pos)
        if not m or m.end() == pos:
            raise Refused("its environment marker is not a plain comparison of marker variables and strings")
        var = m.group("var")
        if var is not None and var not in _MARKER_VARIABLES + ("and", "or", "in", "not"):
            raise Refused("its environment marker names something other than a marker variable")
        pos = m.end()
        words += 1
    if words == 0:
        raise Refused("its environment marker is empty")


def parse_requirement(text):
    """One logical requirements.txt line (comments removed) as the line pip will see."""
    hashes = []
    parts = text.split()
    while parts and parts[-1].startswith("--hash="):
        token = parts.pop()
        if not _HASH.match(token):
            raise Refused("a --hash option must be --hash=sha256:<hex> (or sha384, sha512)")
        hashes.append(token)
    spec = " ".join(parts)
    if spec.startswith("-"):
        raise Refused("pip options are refused: a line may only name a package")
    if "://" in spec or "@" in spec:
        raise Refused("URLs and direct references are refused: name the package and its version")
    marker = None
    if ";" in spec:
        spec, marker = spec.split(";", 1)
        _check_marker(marker)
    spec = spec.strip()
    if "/" in spec or "\\" in spec or spec.startswith("."):
        raise Refused("paths are refused: name the package and its version")
    m = _REQUIREMENT.match(spec)
    if not m:
        if re.match(_NAME + r"\s*(\[[^]]*\])?\s*(<|>|!=|~=|===|=)", spec):
            raise Refused("only an exact version (name==version) is accepted")
        raise Refused("it is not a requirement: only name, name==version and name[extras]==version")
    line = m.group("name")
    if m.group("extras"):
        line += "[%s]" % ",".join(e.strip() for e in m.group("extras").split(","))
    if m.group("version"):
        line += "==" + m.group("version")
    if marker is not None:
        line += " ; " + marker.strip()
    return " ".join([line] + list(reversed(hashes)))


def parse_requirements(path):
    """The file's requirements as pip will see them; exits naming the first line refused."""
    name = os.path.basename(path)
    if os.path.getsize(path) > MAX_REQUIREMENTS_BYTES:
        fail("%s is larger than %d KiB" % (name, MAX_REQUIREMENTS_BYTES // 1024))
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        fail("%s is not UTF-8 text" % name)
    parsed = []
    logical, first = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not logical:
            first = number
        if "\0" in line or any(ord(c) < 32 and c != "\t" for c in line):
            fail("%s line %d: control characters are refused" % (name, number))
        # pip's comments: '#' at the start or after whitespace
        line = re.sub(r"(^|\s)#.*$", "", line)
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        if logical.strip():
            try:
                parsed.append(parse_requirement(logical.strip()))
            except Refused as e:
                fail("%s line %d: %s (options, URLs, paths and ranges are refused; see docs/wasm.md)"
                     % (name, first, e))
        logical = ""
    if logical.strip():
        fail("%s line %d: the file ends inside a continued line" % (name, first))
    if len(parsed) > MAX_REQUIREMENTS:
        fail("%s names more than %d requirements" % (name, MAX_REQUIREMENTS))
    return parsed


def _cannot_bundle(output):
    """The requirement pip could not find a pure-Python wheel for, from its error output."""
    m = re.search(r"satisfies the requirement ([^\s(]+)", output)
    return (_requirement_name(m.group(1)) or m.group(1)) if m else None


def requirements(path, cache_dir, numpy_version, offline=False):
    kept = []
    for line in parse_requirements(path):
        if _requirement_name(line) == "numpy":
            pinned = re.search(r"==\s*([^\s;,]+)", line)
            if pinned and pinned.group(1) != numpy_version:
                fail("%s asks for numpy %s, but Python guests bundle numpy %s (the version "
                     "scripts/build-numpy-wasi.sh builds for wasm32-wasi)"
                     % (os.path.basename(path), pinned.group(1), numpy_version))
            continue  # the guest's own numpy build satisfies it
        kept.append(line)
    text = "\n".join(kept) + "\n"
    key = hashlib.sha256(("%s\n%s\n%s" % (GUEST_PYTHON, numpy_version, text)).encode()).hexdigest()[:16]
    site = os.path.join(cache_dir, key, "site")
    if os.path.isfile(os.path.join(site, ".complete")):
        print(site)
        return
    if offline:
        fail("%s: its wheels were not fetched before this offline build" % os.path.basename(path))
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
               "--no-input", "--no-compile", "--target", target, "--only-binary=:all:", "--platform", "any",
               "--implementation", "py", "--python-version", GUEST_PYTHON, "--abi", "none",
               "--find-links", links, "-r", req]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            name = _cannot_bundle(run.stdout + run.stderr)
            if name:
                fail("%s: %s has no pure-Python wheel (py3-none-any) for the guest's Python %s: only "
                     "pure-Python packages can be bundled into a Wasm guest, and numpy is the one "
                     "native package it has (see docs/wasm.md)" % (os.path.basename(path), name, GUEST_PYTHON))
            lines = [l for l in (run.stdout + run.stderr).splitlines() if l.strip()]
            # pip's own error lines, and the last line of a traceback when pip itself failed
            errors = [l for l in lines if l.startswith("ERROR:")][-5:]
            if lines and lines[-1] not in errors:
                errors.append(lines[-1])
            fail("%s: pip could not install it for the guest:\n%s" % (os.path.basename(path), "\n".join(errors)))
        # the stub numpy stands for the guest's real one: keep neither its files nor its record
        for entry in os.listdir(target):
            if entry == "numpy" or re.match(r"numpy-[^-]+\.dist-info$", entry):
                shutil.rmtree(os.path.join(target, entry), ignore_errors=True)
        shutil.rmtree(os.path.join(target, "bin"), ignore_errors=True)
        frozen = sorted(e[:-len(".dist-info")] for e in os.listdir(target) if e.endswith(".dist-info"))
        with open(os.path.join(target, ".complete"), "w") as f:
            f.write("\n".join(frozen) + "\n")
        if os.path.isfile(os.path.join(site, ".complete")):
            print(site)  # a concurrent fetch finished first: keep its site, drop this one
            return
        shutil.rmtree(site, ignore_errors=True)
        os.rename(target, site)
    print(site)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["uses-numpy"] and len(args) in (2, 3):
        sys.exit(0 if uses_numpy(*args[1:]) else 1)
    if args[:1] == ["uses-requests"] and len(args) in (2, 3):
        sys.exit(0 if uses_requests(*args[1:]) else 1)
    if args[:1] == ["bundle-requests"] and len(args) == 2:
        bundle_requests(args[1])
        sys.exit(0)
    if args[:1] == ["requirements"] and len(args) in (4, 5):
        offline = args[1] == "--offline"
        rest = args[2:] if offline else args[1:]
        if len(rest) == 3:
            requirements(*rest, offline=offline)
            sys.exit(0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
