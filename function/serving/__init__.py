"""The serving stack on every workload cluster: the engine is function/serving/stack.py, the
component table function/serving/components.py. This package only hands the engine's names on."""

from function.serving.stack import (
    GATEWAY_KIND,
    GATEWAY_SCHEMA,
    GATEWAYS,
    StackFacts,
    adoption_requirements,
    components,
    render,
    requirements,
)

__all__ = [
    "GATEWAYS",
    "GATEWAY_KIND",
    "GATEWAY_SCHEMA",
    "StackFacts",
    "adoption_requirements",
    "components",
    "render",
    "requirements",
]
