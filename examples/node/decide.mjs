// Ask Palisade's decision engine how a command may be sandboxed, from Node.
//
// Usage: node decide.mjs [--input-json FILE]
//
// Imports the engine component transpiled by jco into ./engine (`npm run transpile`, from
// `palisade component --out palisade-engine.wasm`), builds a decision input (a taskpack, host
// facts and backend probes), calls the typed `decide` and prints the decision's canonical JSON
// and its digest. `--input-json FILE` also writes the same input in the JSON form
// `palisade decide --input FILE` reads, so the CLI can confirm the digest.

import { writeFileSync } from 'node:fs';
import { decision } from './engine/palisade-engine.js';

// The policy: a Loopwright Taskpack whose `spec.sandbox` block Palisade reads.
const TASKPACK = `apiVersion: loopwright.dev/v1alpha1
kind: Taskpack
metadata:
  name: docs-sync
spec:
  sandbox:
    preferredBackends: [linux-bwrap, linux-landlock]
    networkMode: none
    requiredCapabilities: [filesystemWriteContainment, processTreeCleanup]
    deniedReadPaths: [~/.ssh, ~/.aws]
`;

// Host facts and probes, in the JSON form `palisade doctor --json` and audit records use. A real
// host measures these (`palisade doctor --json`); these describe a typical Linux laptop.
const input = {
  document: TASKPACK,
  documentName: 'taskpack.yaml',
  host: {
    os: 'linux',
    arch: 'x86_64',
    sessionKind: 'cli',
    githubActions: false,
    allowDirectDedicated: false,
    homeDir: '/home/dev',
    workspaceDir: '/home/dev/repo',
    writableRoots: ['/home/dev/results'],
    defaultBackendOrder: ['linux-bwrap', 'linux-landlock', 'docker'],
  },
  probes: [
    {
      backend: 'linux-bwrap',
      available: true,
      reason: 'trial sandbox ok',
      capabilities: [
        'filesystemReadContainment',
        'filesystemWriteContainment',
        'protectedPathReadOnlyMask',
        'networkIsolation',
        'processTreeCleanup',
        'syscallFiltering',
      ],
      networkModes: ['none', 'loopback-only', 'allow-outbound'],
      networkBridge: true,
      version: 'bubblewrap 0.8.0',
      limitations: [],
    },
    {
      backend: 'linux-landlock',
      available: false,
      reason: 'landlock not enabled in this kernel',
      capabilities: [],
      networkModes: [],
      networkBridge: false,
      version: '',
      limitations: [],
    },
  ],
};

// jco's typed values are the JSON form already (camelCase fields, kebab-case enum strings),
// except that the capability enum is camelCase in JSON and kebab-case in WIT.
const kebab = (name) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
const typed = {
  ...input,
  probes: input.probes.map((p) => ({ ...p, capabilities: p.capabilities.map(kebab) })),
};

// `decide` returns result<decision, refusal>: jco returns the decision and throws the refusal
// (a ComponentError whose `payload` is the refusal record).
let outcome;
try {
  outcome = decision.decide(typed);
  console.log(`decision: ${outcome.plan.backend}, network ${outcome.plan.network.tag}`);
} catch (error) {
  if (error?.payload === undefined) throw error;
  outcome = error.payload;
  console.log(`refusal: ${outcome.code}: ${outcome.message}`);
}
console.log(JSON.stringify(JSON.parse(outcome.canonicalJson), null, 2));
console.log(`digest sha256:${outcome.digest}`);

const at = process.argv.indexOf('--input-json');
if (at > 0) writeFileSync(process.argv[at + 1], `${JSON.stringify(input, null, 2)}\n`);
