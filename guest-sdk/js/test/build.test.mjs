// Tests of build.mjs's checks of its command line, which come before any toolchain is used.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..');

/** Runs build.mjs with `wit` and `world` (and a toolchain that does not exist); its stderr. */
function build(wit, world) {
  const script = join(HERE, '..', 'build.mjs');
  const args = ['--toolchain', '/nonexistent', '--wit', wit, '--world', world];
  const run = spawnSync(process.execPath, [script, ...args, '--source', 'app.js', '--out', 'x.wasm'], {
    encoding: 'utf8',
  });
  assert.equal(run.status, 1, run.stderr);
  return run.stderr;
}

test('both worlds build against contract 0.3, and another is refused clearly', () => {
  // 0.3 passes the check for either world; the build then stops at the missing toolchain.
  for (const world of ['aggregator', 'enricher']) {
    const stderr = build(join(ROOT, 'wit', 'v0.3'), world);
    assert.doesNotMatch(stderr, /builds against/);
    assert.match(stderr, /nonexistent/);
  }
  assert.match(build(join(ROOT, 'wit'), 'aggregator'), /an aggregator builds against weir:operator@0\.3\.0 .* is weir:operator@0\.1\.0/);
  assert.match(build(join(ROOT, 'wit'), 'enricher'), /an enricher builds against weir:operator@0\.3\.0 .* is weir:operator@0\.1\.0/);
  assert.match(build(join(ROOT, 'wit', 'v0.2'), 'aggregator'), /is weir:operator@0\.2\.0/);
});

test('a WIT directory that is not one, or a world that is not one, is named', () => {
  assert.match(build('/nonexistent/../etc', 'aggregator'), /cannot read the WIT contract \/etc\/operator\.wit/);
  assert.match(build(join(ROOT, 'wit'), 'mapper'), /--world must be one of aggregator, enricher, not mapper/);
});
