"""An API reference read from an installed Python package: pages from its docstrings and
signatures, so that the docs tool works offline with exactly the SDK that is installed.

`package_pages("modal")` imports the package, walks its public modules (no part of the
dotted name starts with "_"), and writes one page per public object:
* a module page: its docstring and a list of its members with their one-line summaries;
* a class page: its docstring, its constructor and a list of its public members;
* a page per public function, and per public method or property of a class (inherited
  ones included: `Volume.hydrate` is what a user calls; `object`'s and other builtins'
  are left out), with the signature from `inspect.signature` and the text from
  `inspect.getdoc`.
A page's path is the object's dotted name where it is first reached (the package's own
namespace before its submodules), so `modal.Function.map`, not `modal.functions...`; an
object re-exported elsewhere is listed there, not paged twice. Signatures that name a
private wrapped class (`modal._image._Image`, `'_Secret'`) name its public twin when the
package documents one.

Bounded: at most `max_modules` modules and `max_pages` pages, each page cut to
`max_page_chars`; what was cut or could not be imported is a problem, returned, not
hidden. Nothing is fetched: importing runs the installed package's own code, as using
it would, with its prints kept off crucible's stdout.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

from crucible.docs.sources import Page, SourceError

MAX_MODULES = 500
MAX_PAGES = 5000
MAX_PAGE_CHARS = 100_000
SIGNATURE_WIDTH = 88  # longer signatures are written one parameter per line

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# `modal._image._Image`, `modal.secret._Secret`, `'_Secret'`: a private class's name.
_PRIVATE_CLASS = re.compile(r"(?<![\w])(?:[A-Za-z_][\w]*\.)*_([A-Z]\w*)")


class PackageNotFound(SourceError):
    """A package that is not installed, or that cannot be imported; `hint`: what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def install_hint(name: str) -> str:
    """How to install package `name` where crucible runs: this Python's pip, with the pin
    of the crucible extra that names it (modal>=1.6: the `modal` extra), if one does."""
    dist = name.split(".")[0]
    pin, extra = dist, None
    try:
        for req in metadata.requires("crucible") or []:
            spec, _, marker = req.partition(";")
            if re.split(r"[\s<>=!~\[]", spec.strip(), maxsplit=1)[0].lower() == dist.lower():
                found = re.search(r'extra == "([^"]+)"', marker)
                if found and found.group(1) != "dev":
                    pin, extra = spec.strip(), found.group(1)
                    break
    except metadata.PackageNotFoundError:
        pass
    quoted = f"'{pin}'" if pin != dist else pin
    hint = f"install it where crucible runs: {sys.executable} -m pip install {quoted}"
    if extra:
        hint += (
            f" (crucible's {extra} extra; in a checkout of crucible: pip install -e '.[{extra}]')"
        )
    return hint


@dataclass
class _Walk:
    package: str
    max_pages: int
    max_page_chars: int
    pages: list[Page] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seen: dict[int, str] = field(default_factory=dict)  # id(object) -> its page path
    public_classes: dict[str, str] = field(default_factory=dict)  # "Image" -> "modal.Image"
    full: bool = False

    def add(self, path: str, kind: str, body: str) -> None:
        if len(self.pages) >= self.max_pages:
            if not self.full:
                self.problems.append(f"stopped at {self.max_pages} pages (max_pages)")
            self.full = True
            return
        text = f"# {path}\n\n*{kind}*\n\n{body.strip()}\n"
        if len(text) > self.max_page_chars:
            self.problems.append(f"{path}: cut to {self.max_page_chars} chars")
            text = text[: self.max_page_chars] + "\n… (cut)\n"
        headings = "\n".join(m.group(1) for m in re.finditer(r"^#{1,6}\s+(.+)$", text, re.M))
        self.pages.append(Page(path=path, title=path, text=text, headings=headings))

    def public_twin(self, sig: str) -> str:
        def swap(m: re.Match[str]) -> str:
            return self.public_classes.get(m.group(1), m.group(0))

        return _PRIVATE_CLASS.sub(swap, sig)


def package_version(name: str, module: ModuleType) -> str | None:
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version(name.split(".")[0])
    except metadata.PackageNotFoundError:
        return None


def import_package(name: str) -> ModuleType:
    """The installed package, imported; PackageNotFound with the reason otherwise."""
    if not _NAME.match(name):
        raise PackageNotFound(f"{name!r} is not a Python package name (dotted identifiers)")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise PackageNotFound(
                f"no installed package {name!r} in this Python ({exc})", install_hint(name)
            ) from exc
        raise PackageNotFound(f"package {name!r} cannot be imported: {exc}") from exc
    except Exception as exc:  # a package whose import crashes: its problem, said plainly
        raise PackageNotFound(
            f"package {name!r} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc


def _modules(root: ModuleType, limit: int, problems: list[str]) -> list[ModuleType]:
    mods = [root]
    path = getattr(root, "__path__", None)
    if path is None:
        return mods
    failed: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()):
        for info in pkgutil.walk_packages(path, root.__name__ + ".", onerror=failed.append):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            if len(mods) >= limit:
                problems.append(f"stopped at {limit} modules (max_modules)")
                break
            try:
                mods.append(importlib.import_module(info.name))
            except Exception as exc:  # one module that cannot import must not lose the rest
                problems.append(f"{info.name}: not imported: {type(exc).__name__}: {exc}"[:300])
    problems.extend(f"{name}: not walked (import failed)" for name in failed)
    return mods


def _members(module: ModuleType) -> list[tuple[str, Any]]:
    """The module's public names: its __all__, else what it defines itself."""
    names = getattr(module, "__all__", None)
    if not isinstance(names, list | tuple):
        names = [
            n
            for n, obj in vars(module).items()
            if getattr(obj, "__module__", None) == module.__name__
            and (inspect.isclass(obj) or inspect.isfunction(obj))
        ]
    out = []
    for n in names:
        if isinstance(n, str) and not n.startswith("_") and hasattr(module, n):
            out.append((n, getattr(module, n)))
    return out


def _summary(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ")[:200]


def _signature(obj: Any) -> inspect.Signature | None:
    """The signature, its string annotations evaluated where they resolve (a module with
    `from __future__ import annotations` would otherwise show every type in quotes)."""
    try:
        return inspect.signature(obj, eval_str=True)
    except Exception:  # an annotation that names what its module cannot see
        pass
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):  # builtins and C objects without one
        return None


def format_signature(name: str, sig: inspect.Signature | None, prefix: str = "def ") -> str:
    """`def name(params) -> ret`, one parameter per line when it would be long."""
    if sig is None:
        return f"{prefix}{name}(...)"
    flat = f"{prefix}{name}{sig}"
    if len(flat) <= SIGNATURE_WIDTH:
        return flat
    parts: list[str] = []
    kinds = inspect.Parameter
    seen_star = False
    params = list(sig.parameters.values())
    for i, p in enumerate(params):
        if p.kind == kinds.KEYWORD_ONLY and not seen_star:
            parts.append("*")
            seen_star = True
        if p.kind == kinds.VAR_POSITIONAL:
            seen_star = True
        parts.append(str(p))
        nxt = params[i + 1] if i + 1 < len(params) else None
        if p.kind == kinds.POSITIONAL_ONLY and (nxt is None or nxt.kind != kinds.POSITIONAL_ONLY):
            parts.append("/")
    ret = ""
    if sig.return_annotation is not inspect.Signature.empty:
        ret = " -> " + inspect.formatannotation(sig.return_annotation)
    body = "".join(f"    {part},\n" for part in parts)
    return f"{prefix}{name}(\n{body}){ret}"


def _code(text: str) -> str:
    return f"```python\n{text}\n```"


def _defining_class(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def _class_member(walk: _Walk, cls: type, path: str, name: str) -> str | None:
    """Page one member of a class; its line on the class page (None: not documented)."""
    owner = _defining_class(cls, name)
    if owner is None or owner.__module__ == "builtins":
        return None
    static = inspect.getattr_static(cls, name)
    member_path = f"{path}.{name}"
    if isinstance(static, property):
        doc = inspect.getdoc(static) or ""
        fsig = _signature(static.fget) if static.fget else None
        ret = fsig.return_annotation if fsig is not None else inspect.Signature.empty
        ann = "" if ret is inspect.Signature.empty else ": " + inspect.formatannotation(ret)
        walk.add(member_path, f"property of {path}", f"{_code(name + ann)}\n\n{doc}")
        return f"- `{name}` (property): {_summary(static)}"
    try:
        value = getattr(cls, name)
    except Exception:  # a descriptor that only works on instances
        value = None
    if inspect.isclass(value) or not callable(value):
        return f"- `{name}` (attribute)"
    deco = (
        "@staticmethod\n"
        if isinstance(static, staticmethod)
        else "@classmethod\n"
        if isinstance(static, classmethod)
        else ""
    )
    sig = walk.public_twin(format_signature(name, _signature(value)))
    walk.add(
        member_path, f"method of {path}", f"{_code(deco + sig)}\n\n{inspect.getdoc(value) or ''}"
    )
    return f"- `{name}`: {_summary(value)}"


def _class_page(walk: _Walk, cls: type, path: str) -> None:
    sig = _signature(cls)
    generic = sig is None or [p.kind for p in sig.parameters.values()] == [
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    ]
    head = f"class {cls.__name__}" if generic else format_signature(cls.__name__, sig, "class ")
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    lines = [_class_member(walk, cls, path, n) for n in sorted(dir(cls)) if not n.startswith("_")]
    members = "\n".join(line for line in lines if line)
    based = f"\n\nBases: {', '.join(bases)}" if bases else ""
    body = f"{_code(walk.public_twin(head))}{based}\n\n{inspect.getdoc(cls) or ''}"
    if members:
        body += f"\n\n## Members of {cls.__name__}\n\n{members}"
    walk.add(path, "class", body)


def _object_page(walk: _Walk, obj: Any, path: str) -> str:
    """Page a module member; what the module page says of it."""
    if id(obj) in walk.seen:
        return f"see {walk.seen[id(obj)]}"
    walk.seen[id(obj)] = path
    if inspect.isclass(obj):
        _class_page(walk, obj, path)
        return _summary(obj)
    if callable(obj):
        sig = walk.public_twin(format_signature(path.rsplit(".", 1)[-1], _signature(obj)))
        walk.add(path, "function", f"{_code(sig)}\n\n{inspect.getdoc(obj) or ''}")
        return _summary(obj)
    return f"{type(obj).__name__} value"


def package_pages(
    name: str,
    *,
    max_modules: int = MAX_MODULES,
    max_pages: int = MAX_PAGES,
    max_page_chars: int = MAX_PAGE_CHARS,
) -> tuple[list[Page], list[str], str]:
    """(pages, problems, source label such as "package:modal 1.6.4") of an installed package."""
    root = import_package(name)
    walk = _Walk(name, max_pages, max_page_chars)
    modules = _modules(root, max_modules, walk.problems)
    # First where each public class is reached, so signatures can name public twins.
    for module in modules:
        for member, obj in _members(module):
            if inspect.isclass(obj):
                walk.public_classes.setdefault(member, f"{module.__name__}.{member}")
    for module in modules:
        said = [
            f"- `{member}`: {_object_page(walk, obj, f'{module.__name__}.{member}')}"
            for member, obj in _members(module)
        ]
        doc = inspect.getdoc(module) or ""
        listing = "\n\n## Members\n\n" + "\n".join(said) if said else ""
        walk.add(module.__name__, "module", doc + listing)
    version = package_version(name, root)
    label = f"package:{name}" + (f" {version}" if version else "")
    return walk.pages, walk.problems, label
