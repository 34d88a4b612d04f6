/**
 * Validation of Kubernetes objects against the published schemas, for the manifests and the
 * examples (test/unit/manifest.test.ts). Nothing here describes a shape by hand:
 *
 * - Built-in kinds (Pod, DaemonSet, ConfigMap, ServiceAccount, Role, RoleBinding): kubernetes-models'
 *   runtime validation, compiled from the Kubernetes OpenAPI schema (`new Pod(obj).validate()`:
 *   types, required fields, enums, formats such as quantities). That schema does not forbid
 *   unknown fields (the API server drops or refuses them by field validation); a misspelt field
 *   in what ballast generates is caught by the type check instead, as the objects are built as
 *   kubernetes-models' interfaces (generated from the same schema). (@kubernetes/client-node's
 *   ObjectSerializer could find them at run time, but importing it costs a second of the unit
 *   tests' budget.)
 * - KubeadmControlPlane (controlplane.cluster.x-k8s.io/v1beta2): the openAPIV3Schema of Cluster
 *   API's CRD (test/fixtures/cluster-api/, see its README), run by Ajv with the Kubernetes
 *   formats of @kubernetes-models/validate, and unknown fields refused where the schema lists
 *   properties and does not preserve unknown fields (the API server's strict field validation,
 *   `kubectl apply --validate=strict`, the default). The CEL rules (x-kubernetes-validations) are
 *   not evaluated.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import { formats } from '@kubernetes-models/validate';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Pod } from 'kubernetes-models/v1/Pod';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ObjectMeta } from '@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta';

/** The model class of each built-in kind the manifests use. */
const BUILTIN: Record<string, new (data: never) => { validate(): void }> = {
  'v1/Pod': Pod as never,
  'v1/ConfigMap': ConfigMap as never,
  'v1/ServiceAccount': ServiceAccount as never,
  'apps/v1/DaemonSet': DaemonSet as never,
  'rbac.authorization.k8s.io/v1/Role': Role as never,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding as never,
};

/**
 * Validates a built-in Kubernetes object (one of BUILTIN's kinds).
 * @throws Error naming the object and the schema's complaint.
 */
export function validateBuiltin(obj: unknown): void {
  const o = obj as { apiVersion?: string; kind?: string; metadata?: { name?: string } };
  const key = `${o.apiVersion}/${o.kind}`;
  const model = BUILTIN[key];
  if (!model) throw new Error(`no schema for ${key}`);
  const what = `${key} ${o.metadata?.name ?? '(no name)'}`;
  try {
    new model(structuredClone(obj) as never).validate();
  } catch (err) {
    throw new Error(`${what}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Adds `additionalProperties: false` where the API server would refuse unknown fields, and drops
 * what Ajv would not check anyway (descriptions, CEL rules: half the compile time).
 */
function strict(schema: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === 'description' || k === 'x-kubernetes-validations') continue;
    if (k === 'properties' && typeof v === 'object' && v !== null) {
      out[k] = Object.fromEntries(Object.entries(v).map(([p, s]) => [p, strict(s as Record<string, unknown>)]));
    } else if (typeof v === 'object' && v !== null && !Array.isArray(v)) out[k] = strict(v as Record<string, unknown>);
    else if (Array.isArray(v)) out[k] = v.map((x: unknown) => (typeof x === 'object' && x !== null ? strict(x as Record<string, unknown>) : x));
    else out[k] = v;
  }
  if (schema.properties !== undefined && schema.additionalProperties === undefined && schema['x-kubernetes-preserve-unknown-fields'] !== true) {
    out.additionalProperties = false;
  }
  return out;
}

const CRD_FILE = join(import.meta.dirname, '..', 'fixtures', 'cluster-api', 'controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.json');
let kcpValidator: ValidateFunction | null = null;
let kcpSchema: Record<string, unknown> | null = null;

/** The v1beta2 openAPIV3Schema of the KubeadmControlPlane CRD (Cluster API), as published. */
export function kubeadmControlPlaneSchema(): Record<string, unknown> {
  if (kcpSchema) return kcpSchema;
  const crd = JSON.parse(readFileSync(CRD_FILE, 'utf8')) as { spec: { versions: { name: string; schema: { openAPIV3Schema: Record<string, unknown> } }[] } };
  const v = crd.spec.versions.find((x) => x.name === 'v1beta2');
  if (!v) throw new Error(`${CRD_FILE} has no v1beta2`);
  kcpSchema = v.schema.openAPIV3Schema;
  return kcpSchema;
}

function ajv(): Ajv {
  // the generated code unoptimized: a third of the compile time, and one schema is compiled once per run
  const a = new Ajv({ strict: false, allErrors: true, validateFormats: true, code: { optimize: false } });
  for (const [name, f] of Object.entries(formats)) a.addFormat(name, f as never);
  return a;
}

/**
 * Validates a KubeadmControlPlane (v1beta2) against the CRD's schema, its metadata against
 * ObjectMeta. @throws Error listing every complaint.
 */
export function validateKubeadmControlPlane(obj: unknown): void {
  kcpValidator ??= ajv().compile(strict(kubeadmControlPlaneSchema()));
  if (!kcpValidator(obj))
    throw new Error(
      `KubeadmControlPlane: ${kcpValidator.errors!.map((e) => `${e.instancePath || '/'} ${e.message}${e.params && 'additionalProperty' in e.params ? ` (${String(e.params.additionalProperty)})` : ''}`).join('; ')}`,
    );
  const o = obj as { apiVersion?: unknown; kind?: unknown; metadata?: unknown };
  if (o.apiVersion !== 'controlplane.cluster.x-k8s.io/v1beta2' || o.kind !== 'KubeadmControlPlane')
    throw new Error(`not a v1beta2 KubeadmControlPlane: ${String(o.apiVersion)} ${String(o.kind)}`);
  new ObjectMeta(o.metadata as never).validate();
}

/**
 * Validates one part of a KubeadmConfigSpec (`clusterConfiguration`, `initConfiguration`,
 * `joinConfiguration`) against the same CRD's schema, unknown fields refused: the part is put in
 * a minimal KubeadmControlPlane, so one compiled schema serves all.
 * @throws Error listing every complaint, with paths inside the KubeadmControlPlane.
 */
export function validateKubeadmConfigPart(part: 'clusterConfiguration' | 'initConfiguration' | 'joinConfiguration', obj: unknown): void {
  validateKubeadmControlPlane({
    apiVersion: 'controlplane.cluster.x-k8s.io/v1beta2',
    kind: 'KubeadmControlPlane',
    metadata: { name: 'part' },
    spec: {
      version: 'v1.36.0',
      machineTemplate: { spec: { infrastructureRef: { apiGroup: 'infrastructure.cluster.x-k8s.io', kind: 'Machine', name: 'part' } } },
      kubeadmConfigSpec: { [part]: obj },
    },
  });
}
