// Offline validation of deploy/k8s/*.yaml.
//
// What is checked:
//  - every document parses as YAML and is an object of a known apiVersion
//    and kind;
//  - each object validates against the Kubernetes API schema twice:
//    kubernetes-models (1.27, generated from the upstream OpenAPI spec)
//    checks types, formats and required fields; and each object is type-
//    checked by the TypeScript compiler as a literal of its kubernetes-types
//    (1.30) type, whose excess-property check fails on unknown or misspelt
//    fields, which the OpenAPI schema lets through;
//  - the references between the manifests resolve: every Service selects
//    the pods of some workload, every named targetPort is a container port,
//    every configMapKeyRef names a key of the ConfigMap, every claim a
//    PersistentVolumeClaim, and a StatefulSet's serviceName is a headless
//    Service;
//  - every container runs one of the image's programs, with the image's
//    KUDUS_* settings spelt as `kudus-* --help` lists them (given the build
//    directory's binaries).
// What is not: scheduling, DNS, storage provisioning, the image in a
// registry, and the cluster actually training: no Kubernetes cluster runs
// here.
//
//   node tests/k8s/validate.mjs DEPLOY_K8S_DIR [BUILD_DIR]
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { execFileSync } from "node:child_process";
import { parseAllDocuments } from "yaml";
import { ConfigMap, Service, PersistentVolumeClaim } from "kubernetes-models/v1";
import { Deployment, StatefulSet } from "kubernetes-models/apps/v1";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";

const KINDS = {
  "v1/ConfigMap": ConfigMap, "v1/Service": Service,
  "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "apps/v1/Deployment": Deployment, "apps/v1/StatefulSet": StatefulSet,
};
const dir = process.argv[2];
const bin = process.argv[3];
const errors = [];
const objects = [];

for (const file of readdirSync(dir).filter(f => f.endsWith(".yaml")).sort()) {
  const docs = parseAllDocuments(readFileSync(join(dir, file), "utf8"));
  docs.forEach((doc, i) => {
    const where = `${file} document ${i + 1}`;
    if (doc.errors.length) { errors.push(`${where}: YAML: ${doc.errors[0].message}`); return; }
    const obj = doc.toJS();
    if (obj === null) return;
    const model = KINDS[`${obj.apiVersion}/${obj.kind}`];
    if (!model) { errors.push(`${where}: unexpected ${obj.apiVersion} ${obj.kind}`); return; }
    try {
      new model(obj).validate();
    } catch (e) {
      errors.push(`${where} (${obj.kind} ${obj.metadata?.name}): ${e.message}`);
      return;
    }
    objects.push({ where, obj });
  });
}

// Strict: each object as a typed literal, compiled with tsc --noEmit.
const TYPES = {
  ConfigMap: ["core/v1", "ConfigMap"], Service: ["core/v1", "Service"],
  PersistentVolumeClaim: ["core/v1", "PersistentVolumeClaim"],
  Deployment: ["apps/v1", "Deployment"], StatefulSet: ["apps/v1", "StatefulSet"],
};
{
  const require = createRequire(import.meta.url);
  const tsc = require.resolve("typescript/bin/tsc");
  const typesDir = join(require.resolve("kubernetes-types/package.json"), "..");
  const work = mkdtempSync(join(tmpdir(), "kudus-k8s-"));
  const lines = objects.map((o, i) => {
    const [module, type] = TYPES[o.obj.kind];
    return `import type { ${type} as T${i} } from ${JSON.stringify(join(typesDir, module))};\n` +
           `// ${o.where}\nexport const o${i}: T${i} = ${JSON.stringify(o.obj, null, 1)};`;
  });
  writeFileSync(join(work, "manifests.ts"), lines.join("\n") + "\n");
  try {
    execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck", "--target", "es2020",
                                     "--moduleResolution", "node", join(work, "manifests.ts")],
                 { encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    const out = (e.stdout || "") + (e.stderr || "");
    for (const line of out.split("\n").filter(l => /error TS/.test(l))) {
      // Name the manifest: the comment above the failing object.
      const m = line.match(/manifests\.ts\((\d+),/);
      const src = readFileSync(join(work, "manifests.ts"), "utf8").split("\n");
      let where = "";
      for (let n = m ? Number(m[1]) - 1 : -1; n >= 0 && !where; n--)
        if (src[n].startsWith("// ")) where = src[n].slice(3);
      errors.push(`${where}: ${line.replace(/^.*error /, "")}`);
    }
    if (!errors.length) errors.push(`tsc failed: ${out.slice(0, 500)}`);
  }
  rmSync(work, { recursive: true, force: true });
}

const byKind = kind => objects.filter(o => o.obj.kind === kind).map(o => o.obj);
const workloads = [...byKind("Deployment"), ...byKind("StatefulSet")];
const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => labels?.[k] === v);

for (const svc of byKind("Service")) {
  const pods = workloads.filter(w => matches(svc.spec.selector, w.spec.template.metadata.labels));
  if (!pods.length) { errors.push(`Service ${svc.metadata.name} selects no workload's pods`); continue; }
  for (const port of svc.spec.ports || []) {
    if (typeof port.targetPort !== "string") continue;
    const named = pods.some(w => w.spec.template.spec.containers.some(c =>
      (c.ports || []).some(p => p.name === port.targetPort)));
    if (!named) errors.push(`Service ${svc.metadata.name}: targetPort ${port.targetPort} names no container port`);
  }
}
const maps = Object.fromEntries(byKind("ConfigMap").map(m => [m.metadata.name, m.data || {}]));
const claims = new Set(byKind("PersistentVolumeClaim").map(c => c.metadata.name));
const headless = new Set(byKind("Service").filter(s => s.spec.clusterIP === "None").map(s => s.metadata.name));

// The settings each program reads, from its --help (KUDUS_* names).
const help = {};
const settingsOf = program => {
  if (!bin) return null;
  if (!help[program]) {
    let text = "";
    try { text = execFileSync(join(bin, program), ["--help"], { encoding: "utf8" }); }
    catch (e) { text = (e.stdout || "") + (e.stderr || ""); }
    help[program] = new Set(text.match(/KUDUS_[A-Z0-9_]+/g) || []);
  }
  return help[program];
};
const programs = new Set(["kudus-scheduler", "kudus-shard", "kudus-monitor", "kudus-worker", "kudus"]);

for (const w of workloads) {
  const name = `${w.kind} ${w.metadata.name}`;
  if (!matches(w.spec.selector.matchLabels, w.spec.template.metadata.labels))
    errors.push(`${name}: its selector does not match its pod labels`);
  if (w.kind === "StatefulSet" && !headless.has(w.spec.serviceName))
    errors.push(`${name}: serviceName ${w.spec.serviceName} is not a headless Service`);
  for (const v of w.spec.template.spec.volumes || [])
    if (v.persistentVolumeClaim && !claims.has(v.persistentVolumeClaim.claimName))
      errors.push(`${name}: claim ${v.persistentVolumeClaim.claimName} is not defined`);
  for (const c of w.spec.template.spec.containers) {
    const program = (c.command || c.args || [])[0];
    if (!programs.has(program)) errors.push(`${name}: container ${c.name} runs ${program}, not a Kudus program`);
    const known = settingsOf(program);
    for (const from of c.envFrom || [])
      if (from.configMapRef && !maps[from.configMapRef.name])
        errors.push(`${name}: envFrom ConfigMap ${from.configMapRef.name} is not defined`);
    for (const e of c.env || []) {
      const ref = e.valueFrom?.configMapKeyRef;
      if (ref && !(maps[ref.name] && ref.key in maps[ref.name]))
        errors.push(`${name}: ${e.name} refers to ${ref.name}/${ref.key}, which is not defined`);
      if (known && e.name.startsWith("KUDUS_") && !known.has(e.name))
        errors.push(`${name}: ${program} reads no ${e.name}`);
    }
  }
}
// ConfigMap keys are KUDUS_* settings of some program.
if (bin)
  for (const [mapName, data] of Object.entries(maps))
    for (const key of Object.keys(data))
      if (key.startsWith("KUDUS_") && ![...programs].some(p => settingsOf(p)?.has(key)))
        errors.push(`ConfigMap ${mapName}: no program reads ${key}`);

if (errors.length) {
  for (const e of errors) console.error(`validate-k8s: ${e}`);
  process.exit(1);
}
console.log(`validate-k8s: ${objects.length} objects valid against the Kubernetes API schema (1.27 ` +
            `OpenAPI, 1.30 types, unknown fields refused), ` +
            `references resolved (${workloads.length} workloads, ${byKind("Service").length} services)`);
