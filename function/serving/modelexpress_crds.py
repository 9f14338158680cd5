"""The two CRDs the ModelExpress server (Dynamo stack) stores its state in, written by this project.

ModelExpress 0.5.0 keeps model metadata and its download cache as Kubernetes objects when run with
`MX_METADATA_BACKEND=kubernetes`; the kinds are the Rust types of the `modelexpress-server` crate
(crates.io, 0.5.0) and no registry publishes them as CRD files. So these are the project's own,
written from those types' fields; tests/unit/test_workload_crds.py checks they mean the same as
the upstream files of ai-dynamo/modelexpress v0.5.0 (`examples/crds.yaml`, kept in
../shared/crds/workload/modelexpress). Bump with IMAGES["modelexpress-server"] in versions.py.
"""

GROUP = "modelexpress.nvidia.com"
VERSION = "v1alpha1"
LABELS = {"app.kubernetes.io/name": "modelexpress", "app.kubernetes.io/component": "crd"}
AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def column(name: str, kind: str, path: str, **more) -> dict:
    """A printer column of `kubectl get`."""
    return {"name": name, "type": kind, **more, "jsonPath": path}


def string(description: str, **more) -> dict:
    return {"type": "string", "description": description, **more}


def integer(description: str, **more) -> dict:
    return {"type": "integer", "description": description, **more}


def obj(properties: dict, *, description: str | None = None, required=()) -> dict:
    out: dict = {"type": "object"}
    if description:
        out["description"] = description
    if required:
        out["required"] = list(required)
    out["properties"] = properties
    return out


def timestamp(description: str) -> dict:
    return string(description, format="date-time")


def crd(plural: str, kind: str, short: list[str], spec: dict, status: dict, columns: list) -> dict:
    """A namespaced v1alpha1 kind with a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": dict(LABELS)},
        "spec": {
            "group": GROUP,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec, "status": status},
                        }
                    },
                    "additionalPrinterColumns": columns,
                }
            ],
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "shortNames": short,
            },
        },
    }


def _artifact_source() -> dict:
    """A file-backed artifact's discovery summary (counts are never negative)."""
    count = {"minimum": 0}
    return obj(
        {
            "artifactId": string("Digest of the canonical sealed artifact manifest"),
            "totalSize": integer(
                "Total artifact bytes across all manifest files", format="int64", **count
            ),
            "fileCount": integer("Number of files in the sealed artifact manifest", **count),
            "chunkCount": integer(
                "Number of transfer chunks in the sealed artifact manifest", **count
            ),
            "nodeRank": integer(
                "Distributed node rank that owns this node-scoped artifact", **count
            ),
        },
        description="Small discovery summary for file-backed artifact sources",
    )


def _worker() -> dict:
    """One worker's NIXL (or TransferEngine) endpoints and readiness: one ModelMetadata each."""
    return obj(
        {
            "workerRank": integer("Worker rank (0-indexed)"),
            "backendType": string(
                "Backend type discriminator (nixl, transfer_engine, none)",
                enum=["nixl", "transfer_engine", "none"],
            ),
            "nixlMetadata": string("Base64-encoded NIXL agent metadata blob"),
            "transferEngineSessionId": string("Mooncake TransferEngine session ID (ip:port)"),
            "tensorCount": integer("Number of tensors registered by this worker"),
            "tensorConfigMap": string("Name of ConfigMap containing tensor descriptors"),
            "metadataEndpoint": string("P2P NIXL listen thread endpoint (host:port)"),
            "agentName": string("P2P NIXL agent name for remote identification"),
            "workerGrpcEndpoint": string(
                "P2P worker gRPC endpoint for tensor manifest (host:port)"
            ),
            "accelerator": string("Runtime accelerator family for compatibility filtering"),
            "artifactSource": _artifact_source(),
            "status": string(
                "Worker lifecycle status",
                enum=["Unknown", "Initializing", "Ready", "Stale"],
                default="Unknown",
            ),
            "updatedAt": timestamp("Timestamp of last status update (RFC3339)"),
        },
        description="Single worker NIXL metadata and readiness state (one CR per worker)",
        required=["workerRank"],
    )


def _condition() -> dict:
    return obj(
        {
            "type": string("Condition type", enum=["Ready"]),
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": string("Machine-readable reason for condition"),
            "message": string("Human-readable message"),
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
        required=["type", "status"],
    )


def model_metadata() -> dict:
    """P2P worker coordination: one ModelMetadata per worker of a model."""
    spec = obj(
        {
            "modelName": string("Full model name (e.g., deepseek-ai/DeepSeek-V4-Pro)"),
            "sourceType": string(
                "Source type from SourceIdentity (for example, weights or a JIT cache type)"
            ),
        },
        required=["modelName"],
    )
    status = obj(
        {
            "worker": _worker(),
            "conditions": {
                "type": "array",
                "description": "Conditions for ModelMetadata lifecycle",
                "items": _condition(),
            },
            "observedGeneration": integer("Generation observed by the controller", format="int64"),
            "publishedAt": timestamp("Timestamp when first worker published"),
        }
    )
    columns = [
        {
            "name": "Model",
            "type": "string",
            "description": "Model name",
            "jsonPath": ".spec.modelName",
        },
        {
            "name": "Type",
            "type": "string",
            "description": "Source type",
            "jsonPath": ".spec.sourceType",
        },
        dict(AGE),
    ]
    return crd("modelmetadatas", "ModelMetadata", ["mxmeta", "mm"], spec, status, columns)


def model_cache_entry() -> dict:
    """A model's download lifecycle: one ModelCacheEntry per cached model, for LRU eviction."""
    spec = obj(
        {
            "modelName": string("Full model name (e.g., meta-llama/Llama-3.1-70B)"),
            "provider": string("Model provider identifier", enum=["HuggingFace", "Ngc"]),
        },
        required=["modelName", "provider"],
    )
    status = obj(
        {
            "phase": string(
                "Model download lifecycle phase", enum=["", "Downloading", "Downloaded", "Error"]
            ),
            "createdAt": string("RFC3339 timestamp of first write"),
            "lastUsedAt": string("RFC3339 timestamp of most recent status write or touch"),
            "message": string("Optional human-readable progress or error message"),
            "claimId": {
                "type": "string",
                "nullable": True,
                "description": "Opaque identity of the current download owner",
            },
            "leaseExpiresAt": {
                "type": "string",
                "nullable": True,
                "format": "date-time",
                "description": "Owner heartbeat marker used by observers to measure lease liveness",
            },
        }
    )
    columns = [
        column("Model", "string", ".spec.modelName"),
        column("Phase", "string", ".status.phase"),
        column("LastUsed", "date", ".status.lastUsedAt"),
        column("Claim", "string", ".status.claimId", priority=1),
        column("Lease", "date", ".status.leaseExpiresAt", priority=1),
        dict(AGE),
    ]
    return crd("modelcacheentries", "ModelCacheEntry", ["mxcache"], spec, status, columns)
