// Validates Kubernetes objects against the API schemas compiled into the npm packages
// kubernetes-models and @kubernetes-models/prometheus-operator (its CRDs' schemas) (the OpenAPI schemas of Kubernetes, as ajv validators: types, required
// fields, enums, formats). Input: a JSON file holding [{"where": "file#doc", "object": {...},
// "expect": "valid" | "invalid"}]. Prints one "ok - " or "FAIL - " line per object and ends
// with "N passed, M failed"; exit status 1 if anything failed.
// An object whose apiVersion/kind the package has no model for is a failure ("no schema").
// Not checked by kubernetes-models: unknown fields (its schemas allow additional properties).
import { readFileSync } from "node:fs";

const items = JSON.parse(readFileSync(process.argv[2], "utf8"));
let passed = 0;
let failed = 0;

async function model(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z0-9]+$/.test(kind))
    throw new Error(`apiVersion/kind missing or malformed: ${apiVersion}/${kind}`);
  // prometheus-operator's kinds (ServiceMonitor, PodMonitor): @kubernetes-models/prometheus-operator.
  const pkg = apiVersion.startsWith("monitoring.coreos.com/")
    ? "@kubernetes-models/prometheus-operator" : "kubernetes-models";
  try {
    const m = await import(`${pkg}/${apiVersion}/${kind}`);
    return m[kind];
  } catch (e) {
    throw new Error(`no schema for apiVersion ${apiVersion} kind ${kind} in ${pkg}`);
  }
}

for (const { where, object, expect } of items) {
  let error = null;
  try {
    const Model = await model(object?.apiVersion, object?.kind);
    new Model(object).validate();
  } catch (e) {
    error = String(e.message || e).replace(/\s+/g, " ").slice(0, 400);
  }
  const what = `${where} ${object?.kind}/${object?.metadata?.name}`;
  if (expect === "invalid") {
    if (error) { passed++; console.log(`ok - ${what}: refused as it must be: ${error}`); }
    else { failed++; console.log(`FAIL - ${what}: a deliberately broken object was accepted`); }
  } else if (error) {
    failed++; console.log(`FAIL - ${what}: ${error}`);
  } else {
    passed++; console.log(`ok - ${what}: valid`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
