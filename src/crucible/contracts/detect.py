"""The AST walk: evaluates every statement and expression to find contract uses.

Module-level code runs first, in order; function bodies run after it (as they
would at call time), so a body sees every module-level binding. Each use is
recorded as an Occurrence with its owner (the module-level def or class it
sits in) for reach.py. Code that never runs (flow.py: a constant-false branch,
code after a `return`) is not walked, so it uses nothing and refers to nothing.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass

import crucible.contracts.flow as flow
import crucible.contracts.options as opt
from crucible.contracts.calls import CallMixin
from crucible.contracts.model import MAIN_OWNER, MODULE_OWNER, Analysis, Occurrence
from crucible.contracts.resolve import (
    OTHER,
    UNKNOWN,
    Kind,
    Resolver,
    Scope,
    Val,
    bind_import,
    join,
    join_scopes,
)

_FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


def _is_main_guard(test: ast.expr) -> bool:
    """`if __name__ == "__main__":` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.comparators) == 1):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return isinstance(test.ops[0], ast.Eq) and names == ["__name__"] and consts == ["__main__"]


@dataclass
class _Pending:
    node: _FuncNode
    parent: Scope
    owner: str
    self_val: Val | None  # what `self` is in a method of an @app.cls class


class Analyzer(CallMixin):
    def __init__(self, resolver: Resolver | None = None) -> None:
        self.resolver = resolver
        self.uses_modal = False  # the file imports modal: `@common.app.function` is Modal's
        self.cls_self: Val | None = None
        self.result = Analysis()
        self.module = Scope()
        self.scope = self.module
        self.owner = MODULE_OWNER
        self.in_modal_cls = False
        self.pending: deque[_Pending] = deque()

    # -- recording ---------------------------------------------------------
    def emit(self, contract: str | None, node: ast.AST) -> None:
        if contract:
            line = getattr(node, "lineno", 0)
            self.result.occurrences.append(Occurrence(contract, self.owner, line))

    def exports(self) -> dict[str, Val]:
        """The module-level Modal objects other files can import from this one."""
        return {name: val for name, val in self.module.names.items() if val.modal}

    def run(self, tree: ast.Module) -> Analysis:
        self.body(tree.body)
        while self.pending:
            self._function_body(self.pending.popleft())
        return self.result

    # -- statements --------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)
            if flow.stmt_ends(stmt, self.scope.lookup):
                break  # the rest of the block never runs

    def truth(self, test: ast.expr) -> bool | None:
        return flow.truth(test, self.scope.lookup)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            self._import(node)
        elif isinstance(node, _FuncNode):
            self._def(node)
        elif isinstance(node, ast.ClassDef):
            self._class(node)
        elif isinstance(node, ast.Assign):
            val = self.eval(node.value)
            for target in node.targets:
                self.assign(target, val)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.eval(node.value))
        elif isinstance(node, ast.AugAssign):
            self._augassign(node)
        elif isinstance(node, ast.If):
            self.eval(node.test)
            main_guard = self.owner == MODULE_OWNER and _is_main_guard(node.test)
            self.owner = MAIN_OWNER if main_guard else self.owner
            known = self.truth(node.test)
            self.branches([node.body, node.orelse] if known is None else
                          [node.body if known else node.orelse])  # fmt: skip
            self.owner = MODULE_OWNER if main_guard else self.owner
        elif isinstance(node, ast.While):
            self.eval(node.test)
            known = self.truth(node.test)
            if known is not False:
                self.body(node.body)
            if known is not True:  # `while True:` leaves only by `break`, which skips `else:`
                self.body(node.orelse)
        elif isinstance(node, ast.Try | ast.TryStar):
            handlers = [h.body for h in node.handlers]
            self.branches([node.body + node.orelse, *handlers])
            self.body(node.finalbody)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.eval(node.iter)
            if self.truth(node.iter) is not False:  # `for x in ():` runs no body
                self.assign(node.target, UNKNOWN)
                self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self._imported_app_run(item.context_expr)
                val = self.eval(item.context_expr)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, val)
            self.body(node.body)
        else:
            self.generic(node)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        for name, val in bind_import(node, self.resolver):
            self.scope.names[name] = val
            self.uses_modal |= val.kind is Kind.MOD
        for alias in node.names:  # typing's TYPE_CHECKING, marked for flow.py
            mark = flow.typing_flag(node, alias)
            if mark:
                top = alias.name if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
                self.scope.names[alias.asname or top] = Val(Kind.IMPORTED, flags={mark})

    def _imported_app_run(self, expr: ast.expr) -> None:
        """`with app.run():` on an App imported from another file of a Modal program
        (a Flask app's run() is no context manager)."""
        func = expr.func if isinstance(expr, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr == "aio":
            func = func.value
        if not (isinstance(func, ast.Attribute) and func.attr == "run" and self.uses_modal):
            return
        if isinstance(func.value, ast.Name):
            base = self.scope.lookup(func.value.id)
            if base is not None and base.kind is Kind.IMPORTED:
                self.emit("local_entrypoint", expr)
                self.result.runs_app = True

    def generic(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.eval(child)
            elif isinstance(child, ast.stmt):
                self.stmt(child)
            else:
                self.generic(child)  # match cases, handlers, comprehensions

    def branches(self, bodies: list[list[ast.stmt]]) -> None:
        """Visit alternative bodies from the same state and join what they bind."""
        before = dict(self.scope.names)
        outcomes = []
        for stmts in bodies:
            self.scope.names = dict(before)
            self.body(stmts)
            outcomes.append(self.scope.names)
        self.scope.names = join_scopes(outcomes)

    def assign(self, target: ast.expr, val: Val) -> None:
        if isinstance(target, ast.Name):
            self.scope.names[target.id] = val
        elif isinstance(target, ast.Tuple | ast.List):
            same = val.kind is Kind.SEQ and len(val.elems) == len(target.elts)
            for i, elt in enumerate(target.elts):
                self.assign(elt, val.elems[i] if same else UNKNOWN)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, UNKNOWN)
        elif isinstance(target, ast.Subscript):
            base = self.eval(target.value)
            key = target.slice
            if base.kind is Kind.KWDICT and isinstance(key, ast.Constant):
                base.keys[str(key.value)] = val
            else:
                self.eval(key)
        else:
            self.eval(target)

    def _augassign(self, node: ast.AugAssign) -> None:
        val = self.eval(node.value)
        if isinstance(node.target, ast.Name):
            old = self.scope.lookup(node.target.id) or UNKNOWN
            if old.kind is val.kind and val.kind in (Kind.KWDICT, Kind.SEQ):
                self.scope.names[node.target.id] = join(val, old)
        else:
            self.eval(node.target)

    # -- definitions -------------------------------------------------------
    def _decorators(self, node: _FuncNode | ast.ClassDef) -> list[Val]:
        return [self.eval(d) for d in node.decorator_list]

    def _attach(self, node: _FuncNode | ast.ClassDef, decos: list[Val]) -> None:
        """Record that a module-level def registered on a non-Modal object (a web
        framework's route) runs when that object does."""
        if self.owner != node.name:
            return
        for expr, val in zip(node.decorator_list, decos, strict=True):
            while isinstance(expr, ast.Call | ast.Attribute):
                expr = expr.func if isinstance(expr, ast.Call) else expr.value
            if isinstance(expr, ast.Name) and not val.modal:
                base = self.scope.lookup(expr.id)
                if base is None or not base.modal:
                    self.result.attached[expr.id].add(node.name)

    def _app_method(self, val: Val, *names: str) -> bool:
        """A bare `@app.function` / `@app.cls` / `@app.local_entrypoint`."""
        return (
            val.kind is Kind.METHOD
            and val.base is not None
            and val.base.kind in (Kind.APP, Kind.STUB)
            and val.attr in names
        )

    def _def(self, node: _FuncNode) -> None:
        saved = self.owner
        if saved == MODULE_OWNER:
            self.owner = node.name
        decos = self._decorators(node)
        self._attach(node, decos)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.eval(default)
        is_func = False
        for val in decos:
            if val.kind is Kind.FUNC_DECO or self._app_method(val, "function"):
                is_func = True
                self.emit("function", node)
                if "schedule" in val.flags:
                    self.result.scheduled.add(self.owner)
            if val.kind is Kind.ENTRY_DECO or self._app_method(val, "local_entrypoint"):
                self.emit("local_entrypoint", node)
                self.result.entrypoints.add(self.owner)
            if val.kind in (Kind.MOD, Kind.DECO):
                if val.path in opt.WEB_PATHS:
                    self.result.web.add(self.owner)
                if self.in_modal_cls and val.path in opt.LIFECYCLE_PATHS:
                    self.emit("cls_lifecycle", node)
        if is_func and saved == MODULE_OWNER:
            self.result.modal_defs.add(node.name)
        self.scope.names[node.name] = Val(Kind.FUNC) if is_func else OTHER
        self.pending.append(_Pending(node, self.scope, self.owner, self.cls_self))
        self.owner = saved

    def _class(self, node: ast.ClassDef) -> None:
        saved_owner, saved_scope, saved_cls = self.owner, self.scope, self.in_modal_cls
        if saved_owner == MODULE_OWNER:
            self.owner = node.name
        decos = self._decorators(node)
        for expr in [*node.bases, *(k.value for k in node.keywords)]:
            self.eval(expr)
        is_cls = any(v.kind is Kind.CLS_DECO or self._app_method(v, "cls") for v in decos)
        if is_cls and saved_owner == MODULE_OWNER:
            self.result.modal_defs.add(node.name)
        methods = {n.name for n in node.body if isinstance(n, _FuncNode)}
        saved_self = self.cls_self
        self.scope = Scope(saved_scope, is_class=True)
        self.in_modal_cls = is_cls
        self.cls_self = Val(Kind.CLS_INST, flags=methods) if is_cls else None
        self.body(node.body)
        self.owner, self.scope, self.in_modal_cls = saved_owner, saved_scope, saved_cls
        self.cls_self = saved_self
        self.scope.names[node.name] = Val(Kind.CLS, flags=methods) if is_cls else OTHER

    def _function_body(self, item: _Pending) -> None:
        self.scope = Scope(item.parent)
        self.owner = item.owner
        self.in_modal_cls = False
        self.cls_self = None
        args = item.node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        for i, arg in enumerate(params):
            is_self = i == 0 and item.self_val is not None
            self.scope.names[arg.arg] = item.self_val if is_self and item.self_val else UNKNOWN
        self.body(item.node.body)
