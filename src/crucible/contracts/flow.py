"""Control flow the detector can settle without running anything: constant conditions,
and statements that never let the code after them run.

A branch whose condition folds to a constant (`if False:`, `if 0:`, `while False:`,
`if 1 == 2:`, `if not True:`, `if "":`, `if TYPE_CHECKING:` on typing's flag) is never
visited, nor is code after `return`, `raise`, `break` or `continue` in the same block,
after an `if`/`try` that ends on every path, or after a `while True:` with no `break`.
So a use written there is no use, and a def referred to only from there is not reached.

Only literals fold. A name bound to a literal (`x = False`) is not a constant: the
program may rebind it where the detector cannot see. The folding runs on submitted
code, so it computes nothing large: ints stay under 4096 bits, strings, bytes, tuples
and lists under 10,000 items; anything else (an error included) is "not known".
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from crucible.contracts.resolve import Kind, Val

UNKNOWN: Any = object()  # the expression's value is not known before it runs
TYPING_MODULES = frozenset({"typing", "typing_extensions"})
TYPE_CHECKING_FLAG = "typing.TYPE_CHECKING"  # a Val's flag: typing's TYPE_CHECKING itself
TYPING_FLAG = "typing"  # a Val's flag: the typing module itself
_MAX_BITS = 4096
_MAX_LEN = 10_000
_Lookup = Callable[[str], Val | None]

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.BitAnd: operator.and_,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}
_SINGLETONS = (None, True, False, Ellipsis)


def typing_flag(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str | None:
    """The flag for a name an import binds: typing's TYPE_CHECKING, or typing itself."""
    if isinstance(node, ast.ImportFrom):
        ours = node.level == 0 and node.module in TYPING_MODULES
        return TYPE_CHECKING_FLAG if ours and alias.name == "TYPE_CHECKING" else None
    return TYPING_FLAG if alias.name in TYPING_MODULES else None


def _small(value: Any) -> bool:
    if isinstance(value, int):
        return value.bit_length() <= _MAX_BITS
    if isinstance(value, str | bytes | tuple | list):
        return len(value) <= _MAX_LEN
    return isinstance(value, float | complex | frozenset) or value is None or value is Ellipsis


def _binop(op: ast.operator, left: Any, right: Any) -> Any:
    fn = _BINOPS.get(type(op))
    if fn is None or isinstance(left, frozenset) or isinstance(right, frozenset):
        return UNKNOWN
    if isinstance(op, ast.Mod) and isinstance(left, str | bytes):
        return UNKNOWN  # %-formatting: "%*d" % (10**9, 1) is a gigabyte
    if isinstance(op, ast.Mult):
        seq, n = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(seq, str | bytes | tuple | list) and isinstance(n, int):
            if len(seq) * max(n, 0) > _MAX_LEN:
                return UNKNOWN
    if isinstance(op, ast.Pow) and isinstance(right, int) and abs(right) > 64:
        return UNKNOWN if abs(left) > 1 else fn(left, right)
    if isinstance(op, ast.Pow) and isinstance(left, int) and left.bit_length() > 64:
        return UNKNOWN
    if isinstance(op, ast.LShift) and isinstance(right, int) and right > _MAX_BITS:
        return UNKNOWN
    return fn(left, right)


def fold(node: ast.expr, lookup: _Lookup) -> Any:
    """The value of a literal expression, or UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value  # as large as the source it is written in, no larger
    try:
        value = _fold(node, lookup)
    except (ArithmeticError, TypeError, ValueError):
        return UNKNOWN
    return value if value is UNKNOWN or _small(value) else UNKNOWN


def _fold(node: ast.expr, lookup: _Lookup) -> Any:
    if isinstance(node, ast.Name | ast.Attribute):
        return False if _is_type_checking(node, lookup) else UNKNOWN
    if isinstance(node, ast.NamedExpr):
        return fold(node.value, lookup)
    if isinstance(node, ast.UnaryOp):
        v = fold(node.operand, lookup)
        if v is UNKNOWN:
            return UNKNOWN
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(v, bool) or not isinstance(v, int | float | complex):
            return UNKNOWN  # ~True is deprecated; -"a" an error
        return _UNARY[type(node.op)](v)
    if isinstance(node, ast.BinOp):
        left, right = fold(node.left, lookup), fold(node.right, lookup)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return _binop(node.op, left, right)
    if isinstance(node, ast.BoolOp):
        is_or = isinstance(node.op, ast.Or)
        values = [fold(e, lookup) for e in node.values]
        for v in values:
            if v is UNKNOWN or bool(v) == is_or:
                return v  # unknown, or the operand that decides
        return values[-1]
    if isinstance(node, ast.Compare):
        return _compare(node, lookup)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        elts = [fold(e, lookup) for e in node.elts]
        if any(e is UNKNOWN for e in elts) or any(isinstance(e, ast.Starred) for e in node.elts):
            return UNKNOWN
        if isinstance(node, ast.Set):
            return frozenset(elts)
        return tuple(elts) if isinstance(node, ast.Tuple) else elts
    return UNKNOWN


def _compare(node: ast.Compare, lookup: _Lookup) -> Any:
    left = fold(node.left, lookup)
    for op, comp in zip(node.ops, node.comparators, strict=True):
        right = fold(comp, lookup)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        if isinstance(op, ast.Is | ast.IsNot):
            if left not in _SINGLETONS or right not in _SINGLETONS:
                return UNKNOWN  # `1 is 1` is the interpreter's choice
            same = left is right
            ok = same if isinstance(op, ast.Is) else not same
        else:
            ok = bool(_CMPOPS[type(op)](left, right))
        if not ok:
            return False
        left = right
    return True


def _is_type_checking(node: ast.Name | ast.Attribute, lookup: _Lookup) -> bool:
    """typing's TYPE_CHECKING (False when the program runs), by either spelling."""
    if isinstance(node, ast.Name):
        val = lookup(node.id)
        return val is not None and TYPE_CHECKING_FLAG in val.flags
    if node.attr != "TYPE_CHECKING" or not isinstance(node.value, ast.Name):
        return False
    val = lookup(node.value.id)
    return val is not None and val.kind is Kind.IMPORTED and TYPING_FLAG in val.flags


def truth(node: ast.expr, lookup: _Lookup) -> bool | None:
    """Whether a condition is true, false, or not known before the program runs."""
    if isinstance(node, ast.BoolOp):
        # `f() and False` is false whatever f() gives, `f() or 1` true.
        parts = [truth(v, lookup) for v in node.values]
        decisive = isinstance(node.op, ast.Or)
        if decisive in parts:
            return decisive
        return None if None in parts else not decisive
    if isinstance(node, ast.List | ast.Tuple | ast.Set) and node.elts:
        if not any(isinstance(e, ast.Starred) for e in node.elts):
            return True  # a non-empty display, whatever its elements are
    if isinstance(node, ast.Dict) and not node.keys:
        return False
    if isinstance(node, ast.JoinedStr) and not node.values:
        return False
    value = fold(node, lookup)
    return None if value is UNKNOWN else bool(value)


# -- statements that never let the next one run ------------------------------


def breaks(stmts: list[ast.stmt]) -> bool:
    """A `break` of the loop these statements are the body of (inner loops' own not)."""
    for s in stmts:
        if isinstance(s, ast.Break):
            return True
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(s, ast.For | ast.AsyncFor | ast.While):
            if breaks(s.orelse):
                return True
            continue
        inner: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            inner += getattr(s, name, [])
        for sub in [*getattr(s, "handlers", []), *getattr(s, "cases", [])]:
            inner += sub.body
        if inner and breaks(inner):
            return True
    return False


def ends(stmts: list[ast.stmt], lookup: _Lookup) -> bool:
    """Whether running these statements never falls through to the next one."""
    return any(stmt_ends(s, lookup) for s in stmts)


def stmt_ends(s: ast.stmt, lookup: _Lookup) -> bool:
    if isinstance(s, ast.Return | ast.Raise | ast.Break | ast.Continue):
        return True
    if isinstance(s, ast.If):
        t = truth(s.test, lookup)
        if t is None:
            return ends(s.body, lookup) and ends(s.orelse, lookup)
        return ends(s.body if t else s.orelse, lookup)
    if isinstance(s, ast.While):
        t = truth(s.test, lookup)
        if t is False:
            return ends(s.orelse, lookup)
        return not breaks(s.body) and (t is True or ends(s.orelse, lookup))
    if isinstance(s, ast.For | ast.AsyncFor):
        return not breaks(s.body) and ends(s.orelse, lookup)
    if isinstance(s, ast.Try | ast.TryStar):
        if ends(s.finalbody, lookup):
            return True
        done = ends(s.body, lookup) or ends(s.orelse, lookup)
        return done and all(ends(h.body, lookup) for h in s.handlers)
    return False  # `with` may swallow the exception that ended its body
