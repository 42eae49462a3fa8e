// Palisade's decision engine for Node: the engine component, transpiled by jco, checked and run.
//
// The component is the whole engine; this module only loads it, calls it and wraps its answer.
// The bytes of every decision come from the component: nothing here re-serializes, reorders or
// fills in a field. Loading checks every transpiled file against the SHA-256 recorded when the
// package was built (`component.js`), so a substituted file is refused before it is compiled.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { COMPONENT_SHA256, FILES, VERSION } from './component.js';

export { COMPONENT_SHA256, VERSION };

/** The interface every function lives in (`wit/palisade.wit`). */
export const INTERFACE = 'palisade:engine/decision@0.8.0';

/** A transpiled file is not the one this package was built with (refused, never run). */
export class ComponentMismatchError extends Error {
  name = 'ComponentMismatchError';
}

/**
 * The component could not be run (a trap), or it answered what the contract rules out. Never a
 * refusal: a refusal is a `Decision` whose `outcome` is `'refusal'`.
 */
export class EngineError extends Error {
  name = 'EngineError';
}

const sha256 = (data) => createHash('sha256').update(data).digest('hex');

// Check every file before any of it runs: the core module is compiled from the bytes hashed
// here, and the glue is imported only once its bytes matched.
const engineDir = new URL('./engine/', import.meta.url);
const verified = new Map();
for (const [file, expected] of Object.entries(FILES)) {
  const url = new URL(file, engineDir);
  const data = readFileSync(url);
  const actual = sha256(data);
  if (actual !== expected) {
    throw new ComponentMismatchError(
      `${fileURLToPath(url)} has sha256 ${actual}, but this package was built with sha256 ` +
        `${expected} (component sha256 ${COMPONENT_SHA256}); reinstall the package`,
    );
  }
  verified.set(file, data);
}
const coreModules = new Map();
for (const [file, data] of verified) {
  if (file.endsWith('.wasm')) coreModules.set(file, new WebAssembly.Module(data));
}
const { instantiate } = await import(new URL('palisade-engine.js', engineDir).href);

// A fresh instance for every call (as the `palisade` CLI does), so a call's answer depends on
// its input alone, never on an earlier call. The component imports nothing.
function fresh() {
  const getCoreModule = (file) => {
    const module = coreModules.get(file);
    if (module === undefined) throw new EngineError(`the transpiled engine asks for ${file}`);
    return module;
  };
  return instantiate(getCoreModule, {}).decision;
}

/**
 * Decides how the input's command may be sandboxed: a decision or a refusal.
 *
 * `input` is the decision input (`docs/contract.md`): an object, serialized with
 * `JSON.stringify`, or JSON text (a string, or UTF-8 bytes), passed verbatim.
 */
export function decide(input) {
  const text = inputText(input);
  let record;
  let ok;
  try {
    record = fresh().decideJson(text);
    ok = true;
  } catch (error) {
    // jco returns a result's ok value and throws its err value as an error whose `payload` is
    // the refusal record; anything else is a failure to run.
    if (error?.payload === undefined) {
      throw new EngineError(`the engine component failed in \`decide-json\`: ${error}`, {
        cause: error,
      });
    }
    record = error.payload;
    ok = false;
  }
  return toDecision(record, ok);
}

/** The engine's identity (engine, WIT and decision schema versions) and its digest. */
export function info() {
  let engine;
  try {
    engine = fresh().info();
  } catch (error) {
    throw new EngineError(`the engine component failed in \`info\`: ${error}`, { cause: error });
  }
  return Object.freeze({
    engineVersion: engine.engineVersion,
    witVersion: engine.witVersion,
    schemaVersion: engine.schemaVersion,
    componentSha256: COMPONENT_SHA256,
  });
}

function inputText(input) {
  if (typeof input === 'string') return input;
  if (input instanceof Uint8Array) return new TextDecoder('utf-8', { fatal: true }).decode(input);
  if (input !== null && typeof input === 'object' && !Array.isArray(input)) {
    return JSON.stringify(input);
  }
  throw new TypeError(
    `a decision input is an object or its JSON text (a string or bytes), not ${
      input === null ? 'null' : Array.isArray(input) ? 'an array' : typeof input
    }`,
  );
}

// The `Decision` for a decision or refusal record, after checking what the contract promises:
// the digest is the SHA-256 of the canonical JSON, and the JSON's outcome is the result's.
// JSON.parse reads every number exactly: the contract's integers are bounded well below 2^53
// (the largest, a memory budget, is at most 1 TiB in bytes).
function toDecision(record, ok) {
  const canonicalJson = record.canonicalJson;
  const digest = record.digest;
  if (sha256(Buffer.from(canonicalJson, 'utf8')) !== digest) {
    throw new EngineError(`the engine's digest ${digest} is not the SHA-256 of its JSON`);
  }
  const report = JSON.parse(canonicalJson);
  const outcome = ok ? 'decision' : 'refusal';
  if (report.outcome !== outcome) {
    throw new EngineError(`the engine returned a ${outcome} whose JSON says ${report.outcome}`);
  }
  const plan = report.plan ?? null;
  return Object.freeze({
    outcome,
    ok,
    canonicalJson,
    digest,
    message: report.message,
    inputDigest: report.inputDigest,
    engineVersion: report.engineVersion,
    schemaVersion: report.schemaVersion,
    backend: report.backend ?? null,
    plan,
    warnings: plan === null ? [] : plan.warnings,
    code: report.code ?? null,
    errors: report.errors ?? [],
    trace: report.trace ?? [],
    report,
  });
}
