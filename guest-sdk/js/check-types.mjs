#!/usr/bin/env node
// Checks the SDK's TypeScript declarations against the WIT contract:
//
//   node guest-sdk/js/check-types.mjs --toolchain <dir>
//
// 1. jco (the pinned @bytecodealliance/jco, through its type generator jco-transpile) generates
//    the guest types of the worlds the SDK builds: `aggregator` and `enricher` of wit/v0.3
//    (contract 0.3).
// 2. tsc (the pinned typescript) type-checks, with --noEmit and strict options:
//    test/types.check.ts, which asserts that the adapters exportAggregate/exportEnrich return
//    implement the generated interfaces; the declarations weir-sdk.d.ts and testing.d.ts; and
//    the JavaScript examples (examples/*/js/app.js, tests/guests/js-hostile/app.js) with
//    checkJs, against weir-sdk.d.ts.
// Exits non-zero on any type error.

import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { importPackage, packageDir, preopenRoot } from './toolchain.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, '..', '..');
/** The contract both worlds are built against, and the worlds. */
const WIT = join(ROOT, 'wit', 'v0.3');
const WORLDS = ['aggregator', 'enricher'];
/** The JavaScript operators type-checked against the SDK's declarations. */
const APPS = [
  'examples/tumbling-count-sum/js/app.js',
  'examples/session-summary/js/app.js',
  'examples/enrich-customers/js/app.js',
  'tests/guests/js-hostile/app.js',
];

/** The command line. */
function options() {
  const { values } = parseArgs({
    options: { toolchain: { type: 'string' } },
  });
  if (!values.toolchain) {
    throw new Error('usage: node check-types.mjs --toolchain <dir>');
  }
  return { toolchain: resolve(values.toolchain) };
}

/**
 * Writes the guest types jco generates for each world into `outDir` (the worlds share their
 * `types` and `state` interfaces, so one directory holds each declaration once); returns the
 * files written.
 */
async function generateWitTypes(toolchain, outDir) {
  const jcoDir = packageDir(toolchain, '@bytecodealliance/jco');
  const transpileDir = packageDir(jcoDir, '@bytecodealliance/jco-transpile');
  await preopenRoot(transpileDir);
  const { generateGuestTypes } = await importPackage(jcoDir, '@bytecodealliance/jco-transpile');
  const written = [];
  for (const world of WORLDS) {
    const files = await generateGuestTypes(WIT, { worldName: world, outDir });
    for (const [path, contents] of Object.entries(files)) {
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, contents);
      written.push(path);
    }
  }
  return [...new Set(written)];
}

/** The tsconfig checking `files` (and the SDK's declarations) strictly, without emitting. */
function tsconfig(files) {
  return {
    compilerOptions: {
      strict: true,
      noEmit: true,
      allowJs: true,
      checkJs: true,
      target: 'es2022',
      lib: ['es2022', 'esnext.disposable'],
      module: 'esnext',
      moduleResolution: 'bundler',
      types: [],
      paths: {
        'weir-sdk': [join(HERE, 'weir-sdk.d.ts')],
        'weir-sdk/testing': [join(HERE, 'testing.d.ts')],
      },
    },
    files,
  };
}

/** Runs the pinned tsc on `project`; returns its exit status. */
function runTsc(toolchain, project) {
  const tsc = join(packageDir(toolchain, 'typescript'), 'bin', 'tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
  return result.status ?? 1;
}

/** Generates the WIT types and type-checks the SDK and the apps against them. */
async function main() {
  const { toolchain } = options();
  const work = await mkdtemp(join(tmpdir(), 'weir-js-types-'));
  try {
    const witTypes = await generateWitTypes(toolchain, join(work, 'wit-types'));
    const apps = APPS.map((app) => join(ROOT, app)).filter((app) => existsSync(app));
    const files = [
      ...witTypes.filter((path) => path.endsWith('.d.ts')),
      join(HERE, 'weir-sdk.d.ts'),
      join(HERE, 'testing.d.ts'),
      join(HERE, 'test', 'types.check.ts'),
      ...apps,
    ];
    const project = join(work, 'tsconfig.json');
    await writeFile(project, JSON.stringify(tsconfig(files), null, 2));
    const status = runTsc(toolchain, project);
    console.log(status === 0 ? `types ok: ${files.length} files checked` : 'type errors found');
    process.exitCode = status;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.error(`check-types.mjs: ${error.message}`);
  process.exit(1);
});
