"""Kubernetes manifests as ``podman kube play`` runs them, and the kubelet's ``$(VAR)`` expansion.

Debian's podman 4.3.1 plays Pods, Deployments, PersistentVolumeClaims and ConfigMaps; not a
StatefulSet, a Service or a PodDisruptionBudget (``kube play`` of a service's manifest as
``fw new`` writes it: "YAML document does not contain any supported kube kind").
``statefulset_pods`` derives from a service's manifest what the StatefulSet controller would
create, changing only what podman 4.3.1 cannot run as written:

- the pod template becomes one Pod per replica, ``<name>-<n>`` (the StatefulSet's names), each
  with its ``volumeClaimTemplates`` claim as a PersistentVolumeClaim ``<claim>-<name>-<n>``
  (the StatefulSet's claim names; podman makes each a named volume). The Service and the
  PodDisruptionBudget are left out: podman has no kind for them;
- a ``metadata.namespace`` field reference becomes the literal ``default``: podman's downward
  API has ``metadata.name`` but refuses the namespace ("fieldPath metadata.namespace is either
  not valid or not supported");
- ``$(VAR)`` references in the command and the ``env`` values are expanded here, as the kubelet
  expands them: podman passes them on literally (every member would run with the instance id
  ``$(POD_NAME)``);
- the container's ``ports`` are left out: podman 4.3.1 publishes every ``containerPort`` on the
  host's port of the same number (Kubernetes publishes none without a ``hostPort``), so the
  second pod could not start. The probes do not need them (podman's own conversion of a probe
  cannot use a named port anyway: it becomes port 0);
- ``env`` values given in ``overrides`` replace the manifest's (before expansion), and
  ``image`` replaces the container's image, as ``kustomization.yaml``'s ``images:`` would.
"""

from __future__ import annotations

import copy
import re
from typing import Any

__all__ = ["expand", "statefulset_pods"]

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
NAMESPACE = "default"  # podman has no namespaces


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in a container's command and env values: a variable
    defined (before) is replaced, any other reference stays as written."""
    return _REFERENCE.sub(lambda m: env.get(m[1], m[0]), text)


def statefulset_pods(manifest: list[dict[str, Any]], config_map: dict[str, Any], image: str,
                     overrides: dict[str, str]) -> list[dict[str, Any]]:
    """The ConfigMap and, per replica of the manifest's StatefulSet, its claims and its Pod
    (module docstring), as documents for ``podman kube play``."""
    stateful = next(d for d in manifest if d["kind"] == "StatefulSet")
    out = [copy.deepcopy(config_map)]
    for n in range(stateful["spec"]["replicas"]):
        pod = f"{stateful['metadata']['name']}-{n}"
        template = copy.deepcopy(stateful["spec"]["template"])
        spec = template["spec"]
        spec["volumes"] = []
        for claim in stateful["spec"]["volumeClaimTemplates"]:
            name = f"{claim['metadata']['name']}-{pod}"
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                        "spec": claim["spec"]})
            spec["volumes"].append({"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": name}})
        fields = {"metadata.name": pod, "metadata.namespace": NAMESPACE}
        for container in spec["containers"]:
            container["image"] = image
            container.pop("ports", None)
            env = dict(config_map.get("data", {}))
            for var in container.get("env", []):
                field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                if field == "metadata.namespace":
                    del var["valueFrom"]
                    var["value"] = NAMESPACE
                if var["name"] in overrides:
                    var["value"] = overrides[var["name"]]
                if "value" in var:
                    var["value"] = expand(var["value"], env)
                env[var["name"]] = var["value"] if "value" in var else fields[field]
            container["command"] = [expand(arg, env) for arg in container["command"]]
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": pod},
                    "spec": spec})
    return out
