// Runs the conformance corpus through the installed npm package's public API.
//
// Usage: node run-corpus.mjs CORPUS.tsv COMPONENT_SHA256
//
// tests/xruntime/run.sh copies this file into an empty npm project into which the built tarball
// was installed, and runs it there: `import 'palisade-engine'` resolves as it would in a user's
// project. Each case's input text goes to `decide` as it is, and once more parsed (an object),
// which must give the same bytes. Prints one `name digest outcome` line per case on stdout, as
// the other runners do, and the wall time on stderr. Also checks:
//
// - the package is the one built from COMPONENT_SHA256 (its constant, its version, `info()`);
// - `JSON.stringify(decision.report)` is the canonical JSON again, so reading it lost nothing
//   (no number above 2^53, no key reordered);
// - a copy of the package with one byte of a transpiled file changed refuses to load.
//
// Exits non-zero on the first failure.

import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import * as engine from 'palisade-engine';

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(1);
}

if (process.argv.length !== 4) fail('usage: node run-corpus.mjs CORPUS.tsv COMPONENT_SHA256');
const [corpusPath, expectedSha256] = process.argv.slice(2);

const cases = readFileSync(corpusPath, 'utf8')
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => {
    const tab = line.indexOf('\t');
    if (tab < 0) fail(`${corpusPath} is not a \`name<TAB>input-json\` file`);
    return [line.slice(0, tab), line.slice(tab + 1)];
  });
if (cases.length === 0) fail(`${corpusPath} holds no cases`);

// The package this project installed, not a source tree.
const entry = fileURLToPath(import.meta.resolve('palisade-engine'));
const packageDir = dirname(entry);
const project = dirname(fileURLToPath(import.meta.url));
if (packageDir !== join(project, 'node_modules', 'palisade-engine')) {
  fail(`palisade-engine resolved to ${entry}, not to this project's node_modules`);
}
const manifest = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
if (engine.COMPONENT_SHA256 !== expectedSha256) {
  fail(`the package says sha256 ${engine.COMPONENT_SHA256}, built ${expectedSha256}`);
}
if (!manifest.version.endsWith(`+sha256.${expectedSha256.slice(0, 12)}`) || manifest.version !== engine.VERSION) {
  fail(`the installed version ${manifest.version} (module: ${engine.VERSION}) does not name sha256 ${expectedSha256}`);
}
if (Object.keys(manifest.dependencies ?? {}).length !== 0) {
  fail(`the package has dependencies: ${JSON.stringify(manifest.dependencies)}`);
}
const info = engine.info();
if (info.componentSha256 !== expectedSha256 || info.witVersion !== '0.8.0') {
  fail(`info() says ${JSON.stringify(info)}`);
}

const started = performance.now();
const lines = cases.map(([name, text]) => {
  const decision = engine.decide(text);
  if (JSON.stringify(decision.report) !== decision.canonicalJson) {
    fail(`case ${name}: JSON.stringify(report) is not the canonical JSON: reading it lost something`);
  }
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const unreadable = decision.errors.some((error) => error.path === 'input');
  if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) && !unreadable) {
    const again = engine.decide(parsed);
    if (again.canonicalJson !== decision.canonicalJson) {
      fail(`case ${name}: the input as an object gave sha256 ${again.digest}, as text ${decision.digest}`);
    }
  }
  const outcome = decision.ok ? `decision:${decision.backend}` : `refusal:${decision.code}`;
  return `${name} ${decision.digest} ${outcome}`;
});
const finished = performance.now();

// A copy of the package with one byte changed in each transpiled file in turn must not load.
for (const file of ['engine/palisade-engine.core.wasm', 'engine/palisade-engine.js']) {
  const scratch = mkdtempSync(join(tmpdir(), 'palisade-engine-substituted-'));
  try {
    const copy = join(scratch, 'palisade-engine');
    cpSync(packageDir, copy, { recursive: true });
    const data = readFileSync(join(copy, file));
    data[data.length >> 1] ^= 0x01;
    writeFileSync(join(copy, file), data);
    let loaded = false;
    try {
      await import(pathToFileURL(join(copy, 'index.js')).href);
      loaded = true;
    } catch (error) {
      if (error?.name !== 'ComponentMismatchError' || !String(error.message).includes('reinstall')) {
        fail(`a substituted ${file} failed to load, but not as ComponentMismatchError: ${error}`);
      }
    }
    if (loaded) fail(`a package with a substituted ${file} loaded`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

process.stdout.write(lines.map((line) => `${line}\n`).join(''));
process.stderr.write(
  `node package (${engine.VERSION}): ${lines.length} cases in ${Math.round(finished - started)} ms, ` +
    'each also as an object; every report re-serializes to its canonical JSON; ' +
    'a substituted file is refused\n',
);
