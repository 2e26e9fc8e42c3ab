"""Expressions: what each evaluates to, and the contracts its calls mean.

A mixin of the Analyzer in detect.py (it needs the analyzer's scopes and
recording); kept apart so each module stays small.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

import crucible.contracts.options as opt
from crucible.contracts.resolve import (
    IMPORTED,
    MAX_ELEMS,
    OTHER,
    UNKNOWN,
    Kind,
    Scope,
    Val,
    join,
    mod,
)

if TYPE_CHECKING:
    from crucible.contracts.model import Analysis

_Kw = tuple[str, Val, ast.AST | None]
# Objects whose attributes are methods worth following.
_OBJECTS = frozenset(
    {
        Kind.APP,
        Kind.STUB,
        Kind.FUNC,
        Kind.CLS,
        Kind.VOLUME,
        Kind.SANDBOX,
        Kind.FCALL,
        Kind.IMAGE,
        Kind.DICT,
        Kind.QUEUE,
        Kind.SECRET,
        Kind.KWDICT,
    }
)
_COMPREHENSIONS = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


ANY_METHOD = "<any>"  # a Cls looked up by name: any attribute may be a method
_APP_DECORATORS = frozenset({"function", "cls", "local_entrypoint"})


class CallMixin:
    scope: Scope
    owner: str
    in_modal_cls: bool
    uses_modal: bool
    result: Analysis

    def emit(self, contract: str | None, node: ast.AST) -> None:
        raise NotImplementedError

    def assign(self, target: ast.expr, val: Val) -> None:
        raise NotImplementedError

    def truth(self, test: ast.expr) -> bool | None:
        raise NotImplementedError

    # -- expressions -------------------------------------------------------
    def eval(self, node: ast.expr) -> Val:
        if isinstance(node, ast.Constant):
            return Val(Kind.OTHER, node=node)
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Attribute):
            return self._attribute(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Dict):
            return self._dict(node)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return Val(Kind.SEQ, elems=self._elements(node.elts))
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.IfExp):
            self.eval(node.test)
            known = self.truth(node.test)  # `x if False else y` never evaluates x
            if known is not None:
                return self.eval(node.body if known else node.orelse)
            return join(self.eval(node.body), self.eval(node.orelse))
        if isinstance(node, ast.BoolOp):
            return self._boolop(node)
        if isinstance(node, ast.NamedExpr):
            val = self.eval(node.value)
            self.assign(node.target, val)
            return val
        if isinstance(node, ast.Await | ast.Starred):
            return self.eval(node.value)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Lambda):
            return self._lambda(node)
        if isinstance(node, _COMPREHENSIONS):
            return self._comprehension(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.eval(child)
        return UNKNOWN

    def _name(self, node: ast.Name) -> Val:
        self.result.refs[self.owner].add(node.id)
        val = self.scope.lookup(node.id)
        if val is None:
            return Val(Kind.BUILTIN_DICT) if node.id == "dict" else UNKNOWN
        if val.kind is Kind.MOD:
            self._path_ref(val.path, node)
        return val

    def _attribute(self, node: ast.Attribute) -> Val:
        base = self.eval(node.value)
        if node.attr == "aio" and base.kind in (Kind.MOD, Kind.METHOD):
            return base  # f.map.aio(...) is f.map(...)
        if base.kind is Kind.MOD:
            val = mod(f"{base.path}.{node.attr}")
            self._path_ref(val.path, node)
            return val
        if base.kind is Kind.CLS_INST:
            # Model().predict is a Modal Function; self.dataset (say, a HF dataset) is not.
            known = ANY_METHOD in base.flags or node.attr in base.flags
            return Val(Kind.FUNC) if known else UNKNOWN
        if base.kind is Kind.PYMOD:
            return base.keys.get(node.attr, IMPORTED)
        if base.kind is Kind.IMPORTED and self.uses_modal:
            # `from common import app, image` in a Modal program: @app.function and
            # image.pip_install are Modal's, though common.py is not here to show it.
            if node.attr in _APP_DECORATORS:
                return Val(Kind.METHOD, base=Val(Kind.APP), attr=node.attr)
            if node.attr in opt.IMAGE_STEPS_BY_NAME:
                return Val(Kind.METHOD, base=Val(Kind.IMAGE), attr=node.attr)
        if base.kind in _OBJECTS:
            return Val(Kind.METHOD, base=base, attr=node.attr)
        if base.kind is Kind.METHOD and base.attr == "app" and base.base is not None:
            # Legacy `stub.app.spawn_sandbox(...)`: the running app of a Stub.
            if base.base.kind in (Kind.APP, Kind.STUB):
                return Val(Kind.METHOD, base=base.base, attr=node.attr)
        return UNKNOWN

    def _binop(self, node: ast.BinOp) -> Val:
        left, right = self.eval(node.left), self.eval(node.right)
        if left.kind is right.kind and left.kind in (Kind.SEQ, Kind.KWDICT):
            return join(right, left)
        # `[modal.Secret.from_name("a")] + extra`: what is known of the list still counts.
        lists = [v for v in (left, right) if v.kind is Kind.SEQ]
        if isinstance(node.op, ast.Add) and lists:
            return Val(Kind.SEQ, elems=list(lists[0].elems))
        return UNKNOWN

    def _boolop(self, node: ast.BoolOp) -> Val:
        """`False and f.map(xs)` never calls f.map: operands after the deciding one do not run."""
        out: Val | None = None
        for v in node.values:
            val = self.eval(v)
            out = val if out is None else join(out, val)
            if self.truth(v) is isinstance(node.op, ast.Or):
                break
        return out or UNKNOWN

    def _path_ref(self, path: str, node: ast.AST) -> None:
        self.emit(opt.DECORATORS.get(path) or opt.LEGACY_REFS.get(path), node)

    def _elements(self, elts: list[ast.expr]) -> list[Val]:
        out: list[Val] = []
        for elt in elts:
            val = self.eval(elt)
            if isinstance(elt, ast.Starred) and val.kind is Kind.SEQ:
                out.extend(val.elems)
            else:
                out.append(val)
        return out[:MAX_ELEMS]

    def _dict(self, node: ast.Dict) -> Val:
        keys: dict[str, Val] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            val = self.eval(value)
            if key is None:
                keys.update(val.keys if val.kind is Kind.KWDICT else {})
            elif isinstance(key, ast.Constant):
                keys[str(key.value)] = val
            else:
                keys[f"<{id(key)}>"] = val  # volumes={VOL_PATH: vol}: the value still counts
                self.eval(key)
        return Val(Kind.KWDICT, keys=keys)

    def _subscript(self, node: ast.Subscript) -> Val:
        base = self.eval(node.value)
        self.eval(node.slice)
        if base.kind is Kind.KWDICT and isinstance(node.slice, ast.Constant):
            return base.keys.get(str(node.slice.value), UNKNOWN)
        if base.kind is Kind.SEQ and base.elems:
            return base.elems[0]
        return UNKNOWN

    def _child_scope(self, args: ast.arguments | None, targets: list[ast.expr]) -> Scope:
        saved = self.scope
        self.scope = Scope(saved)
        if args is not None:
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                self.scope.names[arg.arg] = UNKNOWN
        for target in targets:
            self.assign(target, UNKNOWN)
        return saved

    def _lambda(self, node: ast.Lambda) -> Val:
        saved = self._child_scope(node.args, [])
        self.eval(node.body)
        self.scope = saved
        return OTHER

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp
    ) -> Val:
        for gen in node.generators:
            self.eval(gen.iter)
        saved = self._child_scope(None, [g.target for g in node.generators])
        for gen in node.generators:
            for cond in gen.ifs:
                self.eval(cond)
        if isinstance(node, ast.DictComp):
            self.eval(node.key)
            out = Val(Kind.KWDICT, keys={"<comp>": self.eval(node.value)})
        else:
            out = Val(Kind.SEQ, elems=[self.eval(node.elt)])
        self.scope = saved
        return out

    # -- calls -------------------------------------------------------------
    def _call(self, node: ast.Call) -> Val:
        callee = self.eval(node.func)
        args = self._elements(node.args)
        kws: list[_Kw] = []
        for kw in node.keywords:
            val = self.eval(kw.value)
            if kw.arg is not None:
                kws.append((kw.arg, val, kw.value))
            elif val.kind is Kind.KWDICT:  # **opts
                kws.extend((k, v, v.node) for k, v in val.keys.items())
        if callee.kind is Kind.MOD:
            return self._path_call(callee.path, kws, node)
        if callee.kind is Kind.METHOD and callee.base is not None:
            return self._method_call(callee.base, callee.attr, args, kws, node)
        if callee.kind is Kind.BUILTIN_DICT:
            keys = dict(args[0].keys) if args and args[0].kind is Kind.KWDICT else {}
            keys.update({k: v for k, v, _ in kws})
            return Val(Kind.KWDICT, keys=keys)
        if callee.kind is Kind.FUNC_DECO:
            return Val(Kind.FUNC)  # app.function(...)(f)
        if callee.kind is Kind.CLS_DECO:
            return Val(Kind.CLS, flags={ANY_METHOD})  # app.cls(...)(Model)
        if callee.kind is Kind.CLS:
            return Val(Kind.CLS_INST, flags=set(callee.flags))
        return UNKNOWN

    def options(self, kws: list[_Kw], where: str, node: ast.AST) -> set[str]:
        found: set[str] = set()
        for name, val, lit in kws:
            for cid in opt.option_ids(name, val, lit, where):
                found.add(cid)
                self.emit(cid, node)
        return found

    def _path_call(self, path: str, kws: list[_Kw], node: ast.Call) -> Val:
        if path in opt.PATH_CALLS:
            cid, kind = opt.PATH_CALLS[path]
            self.emit(cid, node)
            self.result.deploys |= path == "modal.runner.deploy_app"
            where = {"modal.App": opt.APP_CTOR, "modal.Stub": opt.APP_CTOR}.get(
                path, opt.OTHER_CALL
            )
            self.options(kws, opt.FULL if path == "modal.Sandbox.create" else where, node)
            return Val(kind, flags={ANY_METHOD} if kind is Kind.CLS else set())
        head, _, _ = path.rpartition(".")
        if head in opt.CLASS_CTORS:
            cid, kind = opt.CLASS_CTORS[head]
            self.emit(cid, node)
            self.options(kws, opt.OTHER_CALL, node)
            return Val(kind)
        if path == "modal.parameter" and self.in_modal_cls:
            self.emit("cls_lifecycle", node)
        if path in opt.DECORATORS or path in opt.LIFECYCLE_PATHS:
            return Val(Kind.DECO, path=path)
        self.options(kws, opt.OTHER_CALL, node)
        return UNKNOWN

    def _method_call(
        self, base: Val, attr: str, args: list[Val], kws: list[_Kw], node: ast.Call
    ) -> Val:
        kind = base.kind
        if kind in (Kind.APP, Kind.STUB):
            return self._app_call(attr, kws, node)
        if kind in (Kind.FUNC, Kind.CLS):
            if attr in opt.FAN_OUT_METHODS and kind is Kind.FUNC:
                self.emit("fan_out", node)
            elif attr == "spawn" and kind is Kind.FUNC:
                self.emit("spawn", node)
                return Val(Kind.FCALL)
            elif attr in ("with_options", "update_autoscaler"):
                self.options(kws, opt.FULL, node)
                return base
            elif attr in ("with_concurrency", "with_batching"):
                self.emit("concurrent_inputs" if attr == "with_concurrency" else "batched", node)
                return base
            elif attr == "keep_warm":
                self.emit("legacy_autoscaling_names", node)
            return UNKNOWN
        if kind is Kind.FCALL and attr == "get":
            self.emit("spawn", node)
        elif kind is Kind.VOLUME and attr in opt.VOLUME_USES:
            self.emit("volume", node)
        elif kind is Kind.SANDBOX and attr in opt.SANDBOX_LEGACY_FS:
            self.emit("legacy_sandbox_fs", node)
        elif kind is Kind.IMAGE and attr not in opt.IMAGE_NON_STEPS:
            legacy = attr in opt.IMAGE_LEGACY_STEPS
            self.emit("legacy_mount" if legacy else "image_build", node)
            self.options(kws, opt.OTHER_CALL, node)
            return base
        elif kind is Kind.KWDICT and attr in ("update", "copy"):
            extra = {k: v for k, v, _ in kws}
            for a in args:
                extra.update(a.keys)
            if attr == "copy":
                return Val(Kind.KWDICT, keys=dict(base.keys))
            base.keys.update(extra)
        self.options(kws, opt.OTHER_CALL, node)
        return UNKNOWN

    def _app_call(self, attr: str, kws: list[_Kw], node: ast.Call) -> Val:
        if attr == "function":
            self.emit("function", node)
            found = self.options(kws, opt.FULL, node)
            return Val(Kind.FUNC_DECO, flags=found & {"schedule"})
        if attr == "cls":
            self.options(kws, opt.FULL, node)
            return Val(Kind.CLS_DECO)
        if attr == "local_entrypoint":
            self.emit("local_entrypoint", node)
            return Val(Kind.ENTRY_DECO)
        if attr == "spawn_sandbox":
            # The pre-Sandbox.create spelling: no `sandbox` (legacy spelling, no legacy
            # id), but modern options on it still count.
            self.options(kws, opt.FULL, node)
            return Val(Kind.SANDBOX)
        if attr in ("run", "deploy"):
            self.emit("local_entrypoint", node)
            self.result.deploys |= attr == "deploy"
            self.result.runs_app |= attr == "run"
            return Val(Kind.APP)
        return UNKNOWN
