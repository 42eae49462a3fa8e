// Type-checked (never run) against the installed npm package's `index.d.ts` by
// tests/xruntime/run.sh, with `tsc --strict`: the declarations compile, and code written against
// them the way the README shows type-checks.

import {
  COMPONENT_SHA256,
  ComponentMismatchError,
  EngineError,
  VERSION,
  decide,
  info,
  type Backend,
  type Decision,
  type DecisionInput,
  type EngineInfo,
  type Plan,
  type RefusalCode,
} from 'palisade-engine';

const input: DecisionInput = {
  document: 'apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\n',
  documentName: 'taskpack.yaml',
  host: {
    os: 'linux',
    arch: 'x86_64',
    sessionKind: 'cli',
    githubActions: false,
    allowDirectDedicated: false,
    homeDir: '/home/dev',
    workspaceDir: '/home/dev/repo',
    writableRoots: [],
    defaultBackendOrder: ['linux-bwrap', 'docker'],
    budgetCeilings: { memoryBytes: 1024 * 1024 * 1024 },
  },
  probes: [
    {
      backend: 'linux-bwrap',
      available: true,
      reason: 'trial sandbox ok',
      capabilities: ['filesystemWriteContainment', 'networkIsolation'],
      networkModes: ['none'],
      networkBridge: true,
      version: 'bubblewrap 0.8.0',
      limitations: [],
    },
  ],
  budgetFlags: { timeoutMillis: 60_000 },
};

function describe(decision: Decision): string {
  if (decision.ok && decision.plan !== null) {
    const plan: Plan = decision.plan;
    const backend: Backend = plan.backend;
    const timeout: number | undefined = plan.budgets.timeoutMillis?.value;
    const ports: number[] = plan.network.hostPorts ?? [];
    return `${backend} ${plan.network.mode} ${timeout ?? '-'} ${ports.length} ${decision.warnings.join('; ')}`;
  }
  const code: RefusalCode | null = decision.code;
  const paths: string[] = decision.errors.map((error) => error.path);
  return `${code}: ${decision.message} ${paths.join(', ')}`;
}

// Neither `console` nor `TextEncoder`: the check runs without Node's or the DOM's declarations,
// so the package's types must stand on their own.
export function main(bytes: Uint8Array): string {
  try {
    const fromObject: Decision = decide(input);
    const fromText: Decision = decide(JSON.stringify(input));
    const fromBytes: Decision = decide(bytes);
    const same = fromObject.digest === fromText.digest && fromText.canonicalJson === fromBytes.canonicalJson;
    const engine: EngineInfo = info();
    return `${describe(fromObject)} ${same} ${engine.engineVersion} ${engine.componentSha256 === COMPONENT_SHA256} ${VERSION}`;
  } catch (error) {
    if (error instanceof ComponentMismatchError || error instanceof EngineError) return error.message;
    throw error;
  }
}
