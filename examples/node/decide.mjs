// Ask Palisade's decision engine how a command may be sandboxed, from Node.
//
// Usage: node decide.mjs [--input-json FILE]
//
// Uses the `palisade-engine` npm package (the tarball `packages/build.sh` writes; see
// README.md): builds a decision input (a taskpack, host facts and backend probes), decides it,
// and prints the decision's canonical JSON and its digest. `--input-json FILE` also writes the
// same input in the JSON form `palisade decide --input FILE` reads, so the CLI can confirm the
// digest.

import { writeFileSync } from 'node:fs';
import { decide, info } from 'palisade-engine';

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
/** @type {import('palisade-engine').DecisionInput} */
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

const args = process.argv.slice(2);
if (!(args.length === 0 || (args.length === 2 && args[0] === '--input-json'))) {
  console.error('usage: node decide.mjs [--input-json FILE]');
  process.exit(2);
}

const engine = info();
console.log(`engine ${engine.engineVersion}, component sha256:${engine.componentSha256}`);
const decision = decide(input); // the object, or its JSON text
if (decision.ok) {
  console.log(`decision: ${decision.backend}, network ${decision.plan.network.mode}`);
} else {
  console.log(`refusal: ${decision.code}: ${decision.message}`);
}
// The canonical JSON is the decision's bytes; this is it indented, for reading.
console.log(JSON.stringify(decision.report, null, 2));
console.log(`digest sha256:${decision.digest}`);

if (args.length === 2) writeFileSync(args[1], `${JSON.stringify(input, null, 2)}\n`);
