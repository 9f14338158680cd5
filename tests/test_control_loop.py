"""A simulated control plane that replays reconciles in every order the world allows.

Hypothesis drives a state machine: between reconciles, providers report (or not), observed
resources lose their status, their Ready condition or their connection details, providers report
errors, classes are deleted and restored, the cloud ProviderConfig goes and comes back, the fleet's
InferenceGateways vanish, and the spec drops a pool. After every reconcile: nothing was removed
unless the spec changed, and then only what belonged to what the spec dropped. At the end, with
the world restored, the desired set converges in a bounded number of passes.
"""

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from tests.builders import all_classes, example, provider_configs
from tests.sim.providers import World, conditions, observe
from tests.sim.workload import inference_gateway

EXAMPLES = ["eks", "eks-on-demand", "gke", "aks", "nebius", "vultr", "existing-dynamo"]
SCHEMAS = {
    "inference-gateway-kind": True,
    "model-replicas-kind": True,
    "model-routes-kind": True,
    "model-caches-kind": True,
}
CONVERGENCE_PASSES = 30
WORLD = World(
    capacity_reservations={
        "cr-0123456789abcdef0": {
            "availabilityZone": "us-east-2b",
            "instanceType": "p5en.48xlarge",
            "instanceCount": 2,
        }
    }
)
# Resources shared by pools that go with the last pool using them.
SHARED = (
    "efa-security-group",
    "release-efa-dra-driver",
    "release-network-operator",
    "gpu-cluster-",
)


class ControlPlane(RuleBasedStateMachine):
    @initialize(name=st.sampled_from(EXAMPLES))
    def start(self, name):
        self.name = name
        self.xr, self.classes = example(name)
        self.configs = provider_configs(name)
        self.classes_present = True
        self.config_present = True
        self.gateways_present = True
        self.observed: dict[str, dict] = {}
        self.status: dict = {}
        self.previous: set[str] = set()
        self.dropped_pools: list[str] = []
        self.reconciles = 0

    def required(self) -> dict[str, list[dict]]:
        out = all_classes(self.classes if self.classes_present else [])
        if self.configs:
            out["cloud-provider-config"] = copy.deepcopy(
                self.configs if self.config_present else []
            )
        out["inference-gateways"] = [inference_gateway("fleet")] if self.gateways_present else []
        for key in ("model-replicas", "model-routes", "model-caches"):
            out[key] = []
        return out

    def compose(self):
        observed = Observed({k: ObservedResource(v) for k, v in self.observed.items()}, self.status)
        return compose_cluster(self.xr, self.required(), observed, SCHEMAS)

    @rule()
    def reconcile(self):
        out = self.compose()
        self.reconciles += 1
        removed = self.previous - set(out.resources)
        if not self.dropped_pools:
            assert not removed, f"removed without a spec change: {sorted(removed)}"
        else:
            allowed = {
                k
                for k in removed
                if any(k.endswith(f"-{p}") or f"-{p}-" in k for p in self.dropped_pools)
                or k.startswith(SHARED)
                or k.startswith("usage-")
            }
            assert removed <= allowed, f"removed more than the dropped pools: {removed - allowed}"
        self.previous = set(out.resources)
        self.desired = out
        self.status = out.status
        # Crossplane applies the desired set: new resources exist (without status yet), and what
        # the function stopped returning is deleted.
        for key in set(self.observed) - set(out.resources):
            del self.observed[key]
        for key, desired in out.resources.items():
            self.observed.setdefault(key, copy.deepcopy(desired.body))

    @precondition(lambda self: self.reconciles > 0)
    @rule()
    def providers_report(self):
        for key, desired in self.desired.resources.items():
            body = copy.deepcopy(desired.body)
            body["status"] = observe(body, WORLD).status
            self.observed[key] = body

    @precondition(lambda self: self.observed)
    @rule(data=st.data(), how=st.sampled_from(["status", "ready", "error", "gone-status-only"]))
    def an_observation_regresses(self, data, how):
        keys = data.draw(st.lists(st.sampled_from(sorted(self.observed)), min_size=1, max_size=6))
        for key in keys:
            body = self.observed[key]
            if how in ("status", "gone-status-only"):
                body.pop("status", None)
            elif how == "ready":
                body.setdefault("status", {})["conditions"] = conditions(False, "Unavailable")
            else:
                body.setdefault("status", {})["conditions"] = conditions(
                    False, "ReconcileError", "cannot update: provider error"
                )

    @rule()
    def the_xr_status_is_lost(self):
        self.status = {}

    @rule(present=st.booleans())
    def classes_come_and_go(self, present):
        self.classes_present = present

    @rule(present=st.booleans())
    def the_provider_config_comes_and_goes(self, present):
        self.config_present = present

    @rule(present=st.booleans())
    def the_gateways_come_and_go(self, present):
        self.gateways_present = present

    @precondition(lambda self: len(self.xr["spec"].get("nodePools", [])) > 1)
    @rule(data=st.data())
    def a_pool_is_dropped(self, data):
        pools = self.xr["spec"]["nodePools"]
        gone = data.draw(st.sampled_from([p["name"] for p in pools]))
        self.xr["spec"]["nodePools"] = [p for p in pools if p["name"] != gone]
        self.dropped_pools.append(gone)

    def teardown(self):
        """The world restored: the desired set converges."""
        if not hasattr(self, "xr"):
            return
        self.classes_present = self.config_present = self.gateways_present = True
        stable = 0
        for _ in range(CONVERGENCE_PASSES):
            self.reconcile()
            before = {k: d.body for k, d in self.desired.resources.items()}
            self.providers_report()
            after = {k: d.body for k, d in self.compose().resources.items()}
            stable = stable + 1 if before == after else 0
            if stable >= 2:
                return
        raise AssertionError(f"{self.name}: no convergence in {CONVERGENCE_PASSES} passes")


ControlPlane.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestControlPlane = ControlPlane.TestCase
