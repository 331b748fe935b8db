"""KAI Scheduler and Kueue ``Topology`` objects from a cluster's levels.

Both CRDs (``kai.scheduler/v1alpha1`` and the legacy ``kueue.x-k8s.io/v1alpha1`` that KAI used
before) take ``spec.levels``: node labels ordered from the *highest* level down, optionally
ending with ``kubernetes.io/hostname``. Labels follow a Topograph scheme
(:data:`tsched.formats.topograph.SCHEMES`), so the Topology matches the labels
``tsched topology convert --to k8s-labels`` writes. :func:`validate` checks an object against
the CRD's OpenAPI schema (``jsonschema``; the schema files live in ``tsched/data/crds``).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import yaml

from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.formats.topograph import level_labels

__all__ = [
    "topology_object",
    "validate",
    "crd_schema",
    "check_schema",
    "API_VERSIONS",
    "HOSTNAME_LABEL",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"
API_VERSIONS = {"kai": "kai.scheduler/v1alpha1", "kueue": "kueue.x-k8s.io/v1alpha1"}
_CRD_FILES = {"kai": "kai.scheduler_topologies.yaml", "kueue": "kueue.x-k8s.io_topologies.yaml"}
_NAME = re.compile(r"[^a-z0-9.-]+")


def topology_object(
    cluster: Cluster,
    flavour: str = "kai",
    name: str | None = None,
    scheme: str = "topograph",
    hostname: bool = True,
) -> dict[str, Any]:
    """The Topology object (``flavour`` ``kai`` or ``kueue``) for ``cluster``'s levels."""
    if flavour not in API_VERSIONS:
        raise InputError(f"topology flavour {flavour!r}: expected kai or kueue")
    if not cluster.levels:
        raise InputError(f"cluster {cluster.name!r} has no levels for a Topology")
    labels = list(reversed(level_labels(cluster, scheme)))  # highest first
    if hostname:
        labels.append(HOSTNAME_LABEL)
    obj_name = name or _NAME.sub("-", cluster.name.lower()).strip("-.") or "tsched"
    return {
        "apiVersion": API_VERSIONS[flavour],
        "kind": "Topology",
        "metadata": {"name": obj_name[:253]},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }


@cache
def crd_schema(filename: str, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one version of a CRD shipped in ``tsched/data/crds``."""
    text = resources.files("tsched.data.crds").joinpath(filename).read_text()
    crd = next(d for d in yaml.safe_load_all(text) if d)
    spec = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return spec["schema"]["openAPIV3Schema"]


def check_schema(obj: dict[str, Any], schema: dict[str, Any], what: str) -> None:
    """Raise :class:`InputError` naming the first field of ``obj`` that breaks ``schema``
    (``"<what> spec.x: message"``)."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - part of the kubernetes extra
        raise InputError(f"validating {what} needs jsonschema (tsched[kubernetes])") from None
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.absolute_path)
    )
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "(root)"
        raise InputError(f"{what} {where}: {e.message}")


def validate(obj: dict[str, Any], flavour: str = "kai") -> None:
    """Raise :class:`InputError` if ``obj`` does not validate against the CRD schema, or breaks
    the CRD's CEL rules tsched can check (unique levels; hostname only last)."""
    version = API_VERSIONS[flavour].split("/")[1]
    check_schema(obj, crd_schema(_CRD_FILES[flavour], version), "Topology")
    labels = [lv["nodeLabel"] for lv in obj["spec"]["levels"]]
    if len(set(labels)) != len(labels):
        raise InputError("Topology spec.levels: must be unique")
    if HOSTNAME_LABEL in labels[:-1]:
        raise InputError(f"Topology spec.levels: {HOSTNAME_LABEL} can only be the lowest level")
