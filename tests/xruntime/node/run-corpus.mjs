// Runs the conformance corpus through the engine component transpiled by jco, under Node.
//
// Usage: node run-corpus.mjs TRANSPILED_DIR CORPUS.tsv
//
// TRANSPILED_DIR is `jco transpile COMPONENT --instantiation sync --name palisade-engine -o DIR`
// output. CORPUS.tsv is written by `tests/conformance.rs` (`corpus_export_for_other_runtimes`):
// one `name<TAB>input-json` line per case, passed verbatim to `decide-json`, so every runtime
// feeds the engine the same bytes. Prints one `name digest outcome` line per case on stdout
// (outcome `decision:<backend>` or `refusal:<CODE>`) and the wall time on stderr. Exits non-zero
// on any failure to load, call or check a result; a refusal is a result, not a failure.

import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(1);
}

if (process.argv.length !== 4) fail('usage: node run-corpus.mjs TRANSPILED_DIR CORPUS.tsv');
const [dir, corpusPath] = process.argv.slice(2).map((p) => resolve(p));

const cases = readFileSync(corpusPath, 'utf8')
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => {
    const tab = line.indexOf('\t');
    if (tab < 0) fail(`${corpusPath} is not a \`name<TAB>input-json\` file`);
    return [line.slice(0, tab), line.slice(tab + 1)];
  });
if (cases.length === 0) fail(`${corpusPath} holds no cases`);

const started = performance.now();
const { instantiate } = await import(pathToFileURL(join(dir, 'palisade-engine.js')).href);
// Compile every core module once; each call then gets a fresh instance (as the Rust host does),
// so no call can observe another's allocator state.
const modules = new Map();
for (const file of readdirSync(dir).filter((f) => f.endsWith('.wasm'))) {
  modules.set(file, new WebAssembly.Module(readFileSync(join(dir, file))));
}
const getCoreModule = (file) => modules.get(file) ?? fail(`transpiled output lacks ${file}`);
const fresh = () => instantiate(getCoreModule, {}).decision; // the component imports nothing
const loaded = performance.now();

const lines = cases.map(([name, input]) => outcomeLine(name, () => fresh().decideJson(input)));
const finished = performance.now();

process.stdout.write(lines.map((line) => `${line}\n`).join(''));
process.stderr.write(
  `node (jco): ${lines.length} cases in ${Math.round(finished - loaded)} ms ` +
    `(+ load and compile ${Math.round(loaded - started)} ms)\n`,
);

// `name digest outcome` for one call. jco returns a `result`'s ok value and throws its err
// value as a ComponentError whose `payload` is the refusal record.
function outcomeLine(name, call) {
  let record;
  let outcome;
  try {
    record = call();
    outcome = `decision:${record.plan.backend}`;
  } catch (error) {
    if (error?.payload === undefined) fail(`case ${name}: the engine call failed: ${error}`);
    record = error.payload;
    outcome = `refusal:${record.code.toUpperCase().replaceAll('-', '_')}`;
  }
  const digest = createHash('sha256').update(record.canonicalJson, 'utf8').digest('hex');
  if (digest !== record.digest) {
    fail(`case ${name}: digest ${record.digest} is not the sha-256 of the canonical json`);
  }
  return `${name} ${record.digest} ${outcome}`;
}
