// Evaluates the ValidatingAdmissionPolicies in deploy/hyperlight/policy/ with a real CEL
// evaluator (@bufbuild/cel, conformance-tested against cel-spec) against admission requests:
// the daemon's own label patch must pass; every other change must be denied.
//
//   node policy_test.mjs DOCS_JSON        (DOCS_JSON from check_manifests.py --json)
//   CEL_MODULES=<dir holding node_modules/@bufbuild/cel>
//
// Emulated like the API server: matchConstraints (operation, resource), the binding's
// namespaceSelector, matchConditions (all true or the policy does not apply), variables
// (lazily: an expression that fails makes any validation using it fail), validations in order
// (false: denied with message or messageExpression; an error: denied, failurePolicy Fail).
// Not emulated: the API server's type checking against the OpenAPI schema.
// Prints "PASS <name>" / "FAIL <name>: <why>" per case; exits 1 on any failure.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(`${process.env.CEL_MODULES || "."}/node_modules/`);
const { run, isCelError, isCelMap, isCelList } = require("@bufbuild/cel");
const { strings } = require("@bufbuild/cel/ext");

const SA = "system:serviceaccount:hyperlight-system:hyperlight-device-plugin";
const docs = Object.values(JSON.parse(readFileSync(process.argv[2], "utf8"))).flat();
const find = (kind, name) => docs.find((d) => d.kind === kind && d.metadata.name === name);
let failed = 0;

function toCel(v) {
  if (Array.isArray(v)) return v.map(toCel);
  if (v !== null && typeof v === "object")
    return new Map(Object.entries(v).map(([k, x]) => [k, toCel(x)]));
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  return v;
}

function evaluate(expr, vars) {
  try {
    const r = run(expr, vars, { funcs: strings });
    return isCelError(r) ? { error: String(r.message ?? r) } : { value: r };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

function selectorMatches(sel, labels) {
  return (sel?.matchExpressions ?? []).every((e) => {
    const has = e.key in labels;
    switch (e.operator) {
      case "In": return has && e.values.includes(labels[e.key]);
      case "NotIn": return !has || !e.values.includes(labels[e.key]);
      case "Exists": return has;
      case "DoesNotExist": return !has;
      default: throw new Error(`operator ${e.operator}`);
    }
  }) && Object.entries(sel?.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
}

// Returns { allowed: true } or { allowed: false, message }.
function admit(policyName, req) {
  const policy = find("ValidatingAdmissionPolicy", policyName);
  const binding = find("ValidatingAdmissionPolicyBinding", policyName);
  const spec = policy.spec;
  const matched = spec.matchConstraints.resourceRules.some((r) =>
    r.resources.includes(req.resource) && (r.operations.includes(req.operation) || r.operations.includes("*")));
  if (!matched) return { allowed: true, why: "not matched" };
  if (req.namespace !== undefined &&
      !selectorMatches(binding.spec.matchResources?.namespaceSelector,
        { "kubernetes.io/metadata.name": req.namespace }))
    return { allowed: true, why: "namespace not selected" };
  const request = { operation: req.operation, userInfo: req.userInfo, namespace: req.namespace };
  const base = { request: toCel(request), object: toCel(req.object ?? null),
    oldObject: toCel(req.oldObject ?? null) };
  for (const c of spec.matchConditions ?? []) {
    const r = evaluate(c.expression, base);
    if (r.error) return { allowed: false, message: `matchCondition ${c.name}: ${r.error}` };
    if (r.value !== true) return { allowed: true, why: "matchConditions false" };
  }
  const variables = new Map();
  for (const v of spec.variables ?? []) {
    const r = evaluate(v.expression, { ...base, variables });
    if (r.error) continue; // lazily failing: any validation using it errors (no such key)
    variables.set(v.name, r.value);
  }
  const vars = { ...base, variables };
  for (const v of spec.validations) {
    const r = evaluate(v.expression, vars);
    if (r.error) return { allowed: false, message: `error: ${r.error}`, error: true };
    if (r.value !== true) {
      let message = v.message;
      if (v.messageExpression) {
        const m = evaluate(v.messageExpression, vars);
        if (m.error || typeof m.value !== "string")
          return { allowed: false, message: `messageExpression failed: ${m.error}`, error: true };
        message = m.value;
      }
      return { allowed: false, message };
    }
  }
  return { allowed: true };
}

function expect(name, policy, req, allowed, messagePart) {
  const r = admit(policy, req);
  let ok = r.allowed === allowed && !r.error;
  let why = r.allowed ? `allowed (${r.why ?? "all validations true"})` : `denied: ${r.message}`;
  if (ok && messagePart && !(r.message ?? "").includes(messagePart)) {
    ok = false;
    why += ` (expected the message to contain "${messagePart}")`;
  }
  if (!ok) failed++;
  console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`);
}

// ---- node-labels ----
const clone = (o) => JSON.parse(JSON.stringify(o));
const node = (name, labels, extra = {}) => ({
  apiVersion: "v1", kind: "Node",
  metadata: { name, resourceVersion: "100", labels, annotations: { "node.alpha.kubernetes.io/ttl": "0" },
    managedFields: [{ manager: "kubelet", operation: "Update" }] },
  spec: { podCIDR: "10.0.0.0/24", ...extra },
  status: { capacity: { cpu: "4" } },
});
const baseLabels = { "kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux",
  "hyperlight.dev/device-plugin": "true" };
const saUser = (nodeName) => ({ username: SA, uid: "u1", groups: ["system:serviceaccounts"],
  ...(nodeName === undefined ? {} : { extra: nodeName === null ? { "authentication.kubernetes.io/pod-name": ["p"] }
    : { "authentication.kubernetes.io/node-name": [nodeName], "authentication.kubernetes.io/pod-name": ["p"] } }) });
function update(user, oldNode, mutate) {
  const obj = clone(oldNode);
  mutate(obj);
  obj.metadata.managedFields.push({ manager: "hyperlight-device-plugin", operation: "Update" });
  return { operation: "UPDATE", resource: "nodes", userInfo: user, object: obj, oldObject: oldNode };
}
const setDaemonLabels = (o, hv = "kvm") => Object.assign(o.metadata.labels ??= {}, {
  "hyperlight.dev/enabled": "true", "hyperlight.dev/hypervisor": hv });
const NL = "hyperlight-node-labels";
const a = node("node-a", { ...baseLabels });
const labelled = node("node-a", { ...baseLabels, "hyperlight.dev/enabled": "true", "hyperlight.dev/hypervisor": "kvm" });

expect("node-labels: the daemon's patch on its own node", NL, update(saUser("node-a"), a, (o) => setDaemonLabels(o)), true);
expect("node-labels: mshv on its own node", NL, update(saUser("node-a"), a, (o) => setDaemonLabels(o, "mshv")), true);
expect("node-labels: node without labels", NL,
  update(saUser("node-a"), node("node-a", undefined), (o) => setDaemonLabels(o)), true);
expect("node-labels: patch that changes nothing", NL, update(saUser("node-a"), labelled, () => {}), true);
expect("node-labels: removing its own hypervisor label", NL,
  update(saUser("node-a"), labelled, (o) => delete o.metadata.labels["hyperlight.dev/hypervisor"]), true);
expect("node-labels: another node", NL,
  update(saUser("node-b"), a, (o) => setDaemonLabels(o)), false, "on node node-b may not change node node-a");
expect("node-labels: token without a node name", NL, update(saUser(null), a, (o) => setDaemonLabels(o)), false,
  "pod-bound token");
expect("node-labels: token without extra", NL, update(saUser(undefined), a, (o) => setDaemonLabels(o)), false,
  "pod-bound token");
expect("node-labels: changing another label", NL,
  update(saUser("node-a"), a, (o) => { setDaemonLabels(o); o.metadata.labels["kubernetes.io/os"] = "windows"; }),
  false, "only the labels");
expect("node-labels: adding another label", NL,
  update(saUser("node-a"), a, (o) => { o.metadata.labels["node-role.kubernetes.io/control-plane"] = ""; }),
  false, "only the labels");
expect("node-labels: removing another label", NL,
  update(saUser("node-a"), a, (o) => delete o.metadata.labels["kubernetes.io/hostname"]), false, "only the labels");
expect("node-labels: removing the operator's opt-in label", NL,
  update(saUser("node-a"), a, (o) => delete o.metadata.labels["hyperlight.dev/device-plugin"]), false, "only the labels");
expect("node-labels: another hyperlight.dev/ label", NL,
  update(saUser("node-a"), a, (o) => { o.metadata.labels["hyperlight.dev/other"] = "x"; }), false, "only the labels");
expect("node-labels: hypervisor value outside kvm|mshv", NL,
  update(saUser("node-a"), a, (o) => setDaemonLabels(o, "xen")), false, "kvm");
expect("node-labels: enabled=false", NL,
  update(saUser("node-a"), a, (o) => { setDaemonLabels(o); o.metadata.labels["hyperlight.dev/enabled"] = "false"; }),
  false, "must be");
expect("node-labels: adding a taint", NL,
  update(saUser("node-a"), a, (o) => { setDaemonLabels(o); o.spec.taints = [{ key: "k", effect: "NoSchedule" }]; }),
  false, "spec");
expect("node-labels: cordoning", NL, update(saUser("node-a"), a, (o) => { o.spec.unschedulable = true; }), false, "spec");
expect("node-labels: changing an annotation", NL,
  update(saUser("node-a"), a, (o) => { o.metadata.annotations.x = "y"; }), false, "annotations");
expect("node-labels: adding a finalizer", NL,
  update(saUser("node-a"), a, (o) => { o.metadata.finalizers = ["x"]; }), false, "finalizers");
expect("node-labels: deleting its own node", NL,
  { operation: "DELETE", resource: "nodes", userInfo: saUser("node-a"), object: null, oldObject: a }, false, "never create or delete");
expect("node-labels: creating a node", NL,
  { operation: "CREATE", resource: "nodes", userInfo: saUser("node-a"), object: a, oldObject: null }, false, "never create or delete");
expect("node-labels: other users are not restricted", NL,
  update({ username: "system:node:node-a", groups: ["system:nodes"] }, a,
    (o) => { o.metadata.labels["kubernetes.io/os"] = "x"; o.spec.unschedulable = true; }), true);

// ---- reserve-device-access ----
const RD = "hyperlight-reserve-device-access";
const mainDs = find("DaemonSet", "hyperlight-device-plugin");
const example = find("Pod", "hyperlight-example");
const podOf = (spec, namespace) => ({ operation: "CREATE", resource: "pods", namespace,
  userInfo: { username: "u" }, object: { apiVersion: "v1", kind: "Pod", metadata: { name: "p", namespace }, spec } });
const wants = (where) => ({ containers: [{ name: "app", image: "i" }], ...where });
expect("reserve: the plugin's own pod in hyperlight-system", RD, podOf(mainDs.spec.template.spec, "hyperlight-system"), true);
expect("reserve: the plugin's pod template elsewhere", RD, podOf(mainDs.spec.template.spec, "default"), false,
  "containers: device-plugin");
expect("reserve: the example workload", RD, podOf(example.spec, "default"), true);
expect("reserve: requests in a container", RD, podOf(wants({ containers: [{ name: "x", image: "i",
  resources: { requests: { "hyperlight.dev/device-access": "1" }, limits: { "hyperlight.dev/device-access": "1" } } }] }),
  "team-a"), false, "reserved");
expect("reserve: limit in an init container", RD, podOf(wants({ initContainers: [{ name: "init", image: "i",
  resources: { limits: { "hyperlight.dev/device-access": "1" } } }] }), "team-a"), false, "containers: init");
expect("reserve: pod without resources", RD, podOf(wants({}), "team-a"), true);
expect("reserve: other resources", RD, podOf(wants({ containers: [{ name: "x", image: "i",
  resources: { limits: { cpu: "1", "hyperlight.dev/hypervisor": "1" } } }] }), "team-a"), true);

process.exit(failed ? 1 : 0);
