"""A ValidatingAdmissionPolicy's CEL evaluated by a real CEL engine (cel-python, `celpy`).

What it provides, against the Kubernetes contract
(https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/):

* `object`: the pod admitted, as JSON data; `oldObject` and `params` are null (a CREATE, and
  the policy has no paramKind); `variables`: each of spec.variables in order, each one
  seeing those before it, as the API server composes them;
* a validation admits when its expression is true; false or an evaluation error refuses
  with its `message` (failurePolicy Fail);
* the standard CEL library with macros (`all`, `exists`, `has`), `in`, string `matches`
  (RE2, through google-re2, as cel-go's) and `+` on strings and lists.

What it does not provide: Kubernetes' CEL extension libraries (`request`, `authorizer`,
`namespaceObject`, `quantity`, `url`, optional types) and the API server's type checking and
cost limits; the rendered policy uses none of the extensions, and a test refuses any
expression that names a variable outside `object`, `oldObject`, `params` and `variables`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

ROOTS = ("object", "oldObject", "params", "variables")


@dataclass(frozen=True)
class _Compiled:
    name: str  # a variable's name, or a validation's message
    program: Any


class PolicyEvaluator:
    """The validations of one ValidatingAdmissionPolicy, compiled once."""

    def __init__(self, policy: dict[str, Any]) -> None:
        env = celpy.Environment()
        spec = policy["spec"]
        self.variables = [_Compiled(v["name"], env.program(env.compile(v["expression"])))
                          for v in spec.get("variables", [])]
        self.validations = [_Compiled(v["message"], env.program(env.compile(v["expression"])))
                            for v in spec["validations"]]

    def refusals(self, pod: dict[str, Any]) -> list[str]:
        """The messages of every validation that refuses `pod` (empty: admitted)."""
        variables = celtypes.MapType({})
        activation: dict[str, Any] = {"object": celpy.json_to_cel(pod), "oldObject": None,
                                      "params": None, "variables": variables}
        for variable in self.variables:
            variables[celtypes.StringType(variable.name)] = variable.program.evaluate(activation)
        refused = []
        for validation in self.validations:
            result = validation.program.evaluate(activation)
            if not (isinstance(result, celtypes.BoolType) and bool(result)):
                refused.append(validation.name)
        return refused
