"""The names both the cloud renderers and the serving stack refer to (function/workload.py) are the
stack's own: a cloud renderer orders its resources against the keys the stack composes."""

from function import workload
from function.serving.components import RESOURCE_KEYS


def test_the_resource_keys_clouds_order_against_are_the_stacks():
    assert RESOURCE_KEYS["gateway-load-balancer"] == workload.GATEWAY_LOAD_BALANCER
    assert RESOURCE_KEYS["node-feature-discovery"] == workload.NODE_FEATURE_DISCOVERY_RELEASE
