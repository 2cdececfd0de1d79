#!/usr/bin/env node
// Builds a JavaScript operator into a WebAssembly component:
//
//   node guest-sdk/js/build.mjs --toolchain <dir> --wit <wit dir> --world <aggregator|enricher> \
//     --source <app.js> --out <file.wasm>
//
// Both worlds build against contract 0.3 (--wit wit/v0.3): an aggregator's `aggregate` (0.2's)
// and `windows`, an enricher's `enrich` (0.2's: its batch arrives field after field).
// 1. esbuild bundles the app and everything it imports into one ES module; the bare specifier
//    'weir-sdk' resolves to weir-sdk.js beside this script. For an aggregator the bundle's entry
//    is a generated module exporting the app's exports and `windows` (0.3's calls carrying many
//    windows), which the SDK's adapter keeps beside the app's `aggregate`. The bundle is kept
//    beside the component as <name>.bundle.js: positions in error messages
//    ("(at add@<name>.bundle.js:12:7)") refer to it.
// 2. componentize-js turns the bundle into a component of the given world, with the WASI
//    features Weir can offer (stdio, random, clocks; no HTTP). Its generated bindings are
//    patched for one known bug first (see patchS64Lowering).
// The toolchain directory is one where `npm ci` ran with this directory's package.json.

import { mkdtemp, mkdir, readFile, rm, writeFile, copyFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { importPackage, packageDir, packageVersion, preopenRoot } from './toolchain.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
/** What the bare specifiers of the SDK resolve to in a bundle. */
const SDK_MODULES = {
  'weir-sdk': join(HERE, 'weir-sdk.js'),
  'weir-sdk/testing': join(HERE, 'testing.js'),
};
/** The contract (WIT package) both worlds build against. */
const CONTRACT = 'weir:operator@0.3.0';
const WORLDS = ['aggregator', 'enricher'];
const COMPONENTIZE = '@bytecodealliance/componentize-js';

/** The command line, checked. */
function options() {
  const { values } = parseArgs({
    options: {
      toolchain: { type: 'string' },
      wit: { type: 'string' },
      world: { type: 'string' },
      source: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const missing = ['toolchain', 'wit', 'world', 'source', 'out'].filter((name) => !values[name]);
  if (missing.length > 0) {
    throw new Error(
      `missing --${missing.join(', --')}\nusage: node build.mjs --toolchain <dir> --wit <wit dir> ` +
        '--world <aggregator|enricher> --source <app.js> --out <file.wasm>',
    );
  }
  if (!WORLDS.includes(values.world)) {
    throw new Error(`--world must be one of ${WORLDS.join(', ')}, not ${values.world}`);
  }
  return values;
}

/** An esbuild plugin resolving 'weir-sdk' (and 'weir-sdk/testing') to this directory's files. */
const weirSdkPlugin = {
  name: 'weir-sdk',
  setup(build) {
    build.onResolve({ filter: /^weir-sdk(\/testing)?$/ }, (args) => ({
      path: SDK_MODULES[args.path],
    }));
  },
};

/**
 * Throws unless the WIT package in `wit` is the contract `world` builds against (both worlds'
 * is the same; `world` names the one asked for in the message).
 * @param {string} wit
 * @param {string} world
 */
async function checkContract(wit, world) {
  const file = join(resolve(wit), 'operator.wit');
  const text = await readFile(file, 'utf8').catch((error) => {
    throw new Error(`cannot read the WIT contract ${file}: ${error.message}`);
  });
  const found = /^package ([^;]+);/m.exec(text)?.[1] ?? 'no package';
  if (found !== CONTRACT) {
    throw new Error(
      `an ${world} builds against ${CONTRACT} (--wit wit/v0.3), but ${file} is ${found}`,
    );
  }
}

/**
 * The entry module of an aggregator's bundle: the app's exports, and the `windows` export
 * that the SDK's adapter keeps beside the app's `aggregate`. A `windows` of the app's own is
 * refused rather than silently shadowed by the entry's.
 * @param {string} source the app's absolute path
 */
function aggregatorEntry(source) {
  const app = JSON.stringify(source);
  return [
    `import * as app from ${app};`,
    "import { windowsOf } from 'weir-sdk';",
    `export * from ${app};`,
    "if ('windows' in app) {",
    "  throw new Error('the module exports `windows`, which the SDK defines for it: rename it');",
    '}',
    'export const windows = windowsOf(app.aggregate);',
    '',
  ].join('\n');
}

/**
 * Bundles the module `entry` and its imports into the single ES module `bundle`.
 * @param {string} toolchain
 * @param {string} entry
 * @param {string} bundle
 */
async function bundleApp(toolchain, entry, bundle) {
  const esbuild = await importPackage(toolchain, 'esbuild');
  const result = await esbuild.build({
    entryPoints: [entry],
    outfile: bundle,
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    mainFields: ['module', 'main'],
    target: 'es2022',
    keepNames: true,
    charset: 'utf8',
    logLevel: 'warning',
    plugins: [weirSdkPlugin],
  });
  if (result.errors.length > 0) throw new Error(`bundling ${entry} failed`);
}

/**
 * The i64 slot of a `value` passed to an import (`scope.put`, `scope.map-put`), as the
 * bindings compute it for an int and for a float's bits: `BigInt(toInt64(e))`,
 * `BigInt(f64ToI64(+e))`.
 */
const S64_SLOT = /BigInt\((toInt64\(e\)|f64ToI64\(\+e\))\)/g;

/**
 * Works around componentize-js 0.23.0 trapping (`unreachable`) when an import receives a
 * negative i64 (ComponentizeJS issue #343: negative ints and floats stored with `put` or
 * `mapPut` trapped), while unsigned 64-bit BigInts pass: the generated bindings' import
 * lowering is rewritten to hand over the same 64 bits as an unsigned BigInt.
 * @param {string} componentizeDir the componentize-js package directory
 */
async function patchS64Lowering(componentizeDir) {
  const url = pathToFileURL(join(componentizeDir, 'lib', 'spidermonkey-embedding-splicer.js'));
  const { splicer } = await import(url.href);
  if (splicer.spliceBindings.patchedForS64) return;
  const splice = splicer.spliceBindings;
  splicer.spliceBindings = (...args) => {
    const spliced = splice(...args);
    const jsBindings = spliced.jsBindings.replace(S64_SLOT, 'BigInt.asUintN(64, $1)');
    if (jsBindings === spliced.jsBindings) {
      throw new Error('cannot patch the s64 lowering of these bindings: is componentize-js 0.23.0 installed?');
    }
    return { ...spliced, jsBindings };
  };
  splicer.spliceBindings.patchedForS64 = true;
}

/**
 * Turns the bundle into a component of `world` and returns its bytes.
 * @param {string} toolchain
 * @param {{bundle: string, wit: string, world: string}} what
 */
async function componentizeBundle(toolchain, { bundle, wit, world }) {
  const { componentize } = await importPackage(toolchain, COMPONENTIZE);
  await preopenRoot(packageDir(toolchain, COMPONENTIZE));
  await patchS64Lowering(packageDir(toolchain, COMPONENTIZE));
  const { component } = await componentize({
    sourcePath: bundle,
    witPath: resolve(wit),
    worldName: world,
    disableFeatures: ['http', 'fetch-event'],
  });
  return component;
}

/** Builds the component the command line asks for. */
async function main() {
  const args = options();
  const out = resolve(args.out);
  const name = basename(out).replace(/\.wasm$/, '');
  const work = await mkdtemp(join(tmpdir(), 'weir-js-build-'));
  try {
    // The bundle's file name is the one error positions show; it is kept beside the output.
    const bundle = join(work, `${name}.bundle.js`);
    await checkContract(args.wit, args.world);
    let entry = resolve(args.source);
    if (args.world === 'aggregator') {
      const generated = join(work, 'entry.mjs');
      await writeFile(generated, aggregatorEntry(entry));
      entry = generated;
    }
    await bundleApp(args.toolchain, entry, bundle);
    const component = await componentizeBundle(args.toolchain, { ...args, bundle });
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, component);
    await copyFile(bundle, join(dirname(out), basename(bundle)));
    const version = packageVersion(args.toolchain, COMPONENTIZE);
    console.log(`wrote ${out} (${component.length} bytes, ${args.world}, componentize-js ${version})`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.error(`build.mjs: ${error.message}`);
  process.exit(1);
});
