"""The compiled policies' CEL evaluated with cel-python, plus the Kubernetes CEL libraries they use.

Kubernetes adds libraries to CEL (kubernetes.io "Common Expression Language in Kubernetes"): the quantity library
(`quantity()`, `asApproximateFloat()`, `asInteger()`, `isGreaterThan()`, `isLessThan()`) and the list library
(`sum()`, `max()`, `min()`). cel-python has neither, so they are given here: a quantity is its value as a
double (parsed by the Kubernetes client's own parser), enough for the comparisons the policies make. The real
API server decides in tests/twin; these are for fast feedback.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import celpy
from celpy import celtypes
from kubernetes.utils import parse_quantity


def _quantity(text: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(parse_quantity(str(text))))


FUNCTIONS = {
    "quantity": _quantity,
    "isQuantity": lambda text: celtypes.BoolType(_is_quantity(text)),
    "asApproximateFloat": lambda q: celtypes.DoubleType(q),
    "asInteger": lambda q: celtypes.IntType(int(q)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(a > b),
    "isLessThan": lambda a, b: celtypes.BoolType(a < b),
    "sum": lambda items: celtypes.DoubleType(sum(float(x) for x in items)),
    "max": lambda items: max(items),
    "min": lambda items: min(items),
}


def _is_quantity(text: Any) -> bool:
    try:
        parse_quantity(str(text))
    except ValueError:
        return False
    return True


@cache
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression), functions=FUNCTIONS)


def evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """`expression` over plain JSON-like values (`object`, `oldObject`, `request`, `variables`...)."""
    return _program(expression).evaluate(
        {name: celpy.json_to_cel(value) for name, value in activation.items()}
    )


def holds(expression: str, **activation: Any) -> bool:
    return bool(evaluate(expression, activation))


def refusals(
    policy: Mapping[str, Any],
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None = None,
    *,
    operation: str = "CREATE",
    user: str = "alice@example.com",
    namespace: str = "vision",
    options: Mapping[str, Any] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> list[str]:
    """The messages of a ValidatingAdmissionPolicy's validations that fail for this request, its `variables`
    evaluated first, in order, as the API server does (kubernetes.io "Validating Admission Policy").

    On CREATE the API server's `oldObject` is null and the rules read it only behind `request.operation`, where
    CEL's `&&` and `||` absorb the error of reading it. cel-python raises instead of absorbing an error inside
    a macro (`map`, `all`), so a CREATE is given the object itself as `oldObject`: every rule that reads it on
    a CREATE is ruled out by the twin tests, which run the API server's own CEL."""
    request: dict[str, Any] = {"operation": operation, "namespace": namespace, "userInfo": {"username": user}}
    if options is not None:
        request["options"] = dict(options)
    if operation == "CREATE" and old is None:
        old = obj
    activation: dict[str, Any] = {
        "object": obj,
        "oldObject": old,
        "request": request,
        "namespaceObject": {"metadata": {"name": namespace, "labels": dict(namespace_labels or {})}},
    }
    variables: dict[str, Any] = {}
    for variable in policy["spec"].get("variables", []):
        value = evaluate(variable["expression"], {**activation, "variables": variables})
        variables[variable["name"]] = _plain(value)
    activation["variables"] = variables
    return [v["message"] for v in policy["spec"]["validations"] if not holds(v["expression"], **activation)]


def _plain(value: Any) -> Any:
    """A CEL value back to JSON-like Python, so it can be handed to the next expression."""
    if isinstance(value, celtypes.MapType):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [_plain(v) for v in value]
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    return value
