#!/usr/bin/env python3
"""Kubernetes JSON schemas for kubeconform, made from the OpenAPI (swagger 2)
document that the k8s.io/kubernetes Go module ships (api/openapi-spec/
swagger.json), since kubeconform's own download (GitHub) is out of reach here.

  k8s-json-schemas.py SWAGGER_JSON OUT_DIR KIND...

writes OUT_DIR/<kind>-<group>-<version>.json (core kinds: <kind>-<version>.json),
the names kubeconform's default -schema-location template uses
('{{ .ResourceKind }}{{ .KindSuffix }}.json'). Each file holds every definition
and a $ref to its kind's; like openapi2jsonschema's strict output, objects with
properties refuse others (additionalProperties: false), IntOrString takes a
string or an integer, and Quantity a string or a number.
"""
import json
import sys


def strict(node):
    if isinstance(node, dict):
        if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string") is True:
            return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        if node.get("format") == "quantity":
            return {"oneOf": [{"type": "string"}, {"type": "number"}]}
        out = {k: strict(v) for k, v in node.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def main():
    swagger, out_dir, kinds = sys.argv[1], sys.argv[2], {k.lower() for k in sys.argv[3:]}
    with open(swagger) as f:
        defs = json.load(f)["definitions"]
    strict_defs = {name: strict(d) for name, d in defs.items()}
    made = set()
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            kind = gvk["kind"].lower()
            if kind not in kinds:
                continue
            suffix = ("-" + gvk["group"].split(".")[0] if gvk["group"] else "") + "-" + gvk["version"]
            schema = {"$ref": "#/definitions/" + name, "definitions": strict_defs}  # draft 4, kubeconform's default
            with open(f"{out_dir}/{kind}{suffix}.json", "w") as f:
                json.dump(schema, f)
            made.add(kind)
    missing = kinds - made
    if missing:
        sys.exit(f"no schema for {sorted(missing)} in {swagger}")


main()
