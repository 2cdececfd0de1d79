// Finds the build tools (componentize-js, esbuild, jco, typescript) in a toolchain directory:
// one where `npm ci` was run with this directory's package.json and package-lock.json.
// ESM ignores NODE_PATH, so packages are located the way Node would (walking up through
// node_modules) and imported by file URL.

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/**
 * The directory of package `name` as Node would resolve it from `fromDir`: the nearest
 * `node_modules/<name>` of `fromDir` or one of its ancestors.
 * @param {string} fromDir
 * @param {string} name
 * @returns {string}
 */
export function packageDir(fromDir, name) {
  for (let dir = resolve(fromDir); ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dirname(dir) === dir) break;
  }
  throw new Error(
    `cannot find ${name} from ${fromDir}: run \`npm ci\` there with guest-sdk/js/package.json and package-lock.json`,
  );
}

/** The conditions Node's ESM loader matches in `exports`. */
const CONDITIONS = new Set(['import', 'node', 'default']);

/** The path an `exports` target resolves to, trying its conditions in their order. */
function exportTarget(target) {
  if (typeof target === 'string' || target == null) return target ?? undefined;
  for (const [condition, inner] of Object.entries(target)) {
    const found = CONDITIONS.has(condition) ? exportTarget(inner) : undefined;
    if (found) return found;
  }
  return undefined;
}

/** The target of `subpath` in an `exports` map, with `*` patterns substituted. */
function subpathTarget(exports, subpath) {
  if (typeof exports === 'string' || !Object.keys(exports)[0]?.startsWith('.')) {
    return subpath === '.' ? exportTarget(exports) : undefined;
  }
  if (subpath in exports) return exportTarget(exports[subpath]);
  for (const [pattern, target] of Object.entries(exports)) {
    const [prefix, suffix] = pattern.split('*');
    if (suffix === undefined || !subpath.startsWith(prefix) || !subpath.endsWith(suffix)) continue;
    const star = subpath.slice(prefix.length, subpath.length - suffix.length);
    return exportTarget(target)?.replaceAll('*', star);
  }
  return undefined;
}

/**
 * The file URL of the entry point `subpath` ('.' or './x') of the package in `dir`.
 * @param {string} dir
 * @param {string} subpath
 */
export function entryUrl(dir, subpath = '.') {
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const target = manifest.exports
    ? subpathTarget(manifest.exports, subpath)
    : subpath === '.' && (manifest.module ?? manifest.main ?? 'index.js');
  if (!target) throw new Error(`${dir} has no entry point ${subpath}`);
  return pathToFileURL(join(dir, target)).href;
}

/**
 * Imports `subpath` of package `name` as found from `fromDir`.
 * @param {string} fromDir
 * @param {string} name
 * @param {string} [subpath]
 */
export async function importPackage(fromDir, name, subpath = '.') {
  return import(entryUrl(packageDir(fromDir, name), subpath));
}

/**
 * The installed version of package `name` as found from `fromDir`.
 * @param {string} fromDir
 * @param {string} name
 */
export function packageVersion(fromDir, name) {
  const manifest = readFileSync(join(packageDir(fromDir, name), 'package.json'), 'utf8');
  return JSON.parse(manifest).version;
}

/**
 * Gives the WASI shim that `fromPackageDir` uses access to the whole file system, as versions
 * of `@bytecodealliance/preview2-shim` before 0.26 did by default: the WIT tools of
 * componentize-js and jco read the WIT directory through it, and fail with "No such file or
 * directory" without a preopen.
 * @param {string} fromPackageDir the directory of the package whose shim to open up
 */
export async function preopenRoot(fromPackageDir) {
  const shimDir = packageDir(fromPackageDir, '@bytecodealliance/preview2-shim');
  const fs = await import(entryUrl(shimDir, './filesystem'));
  if (fs.preopens.getDirectories().length === 0 && fs._addPreopen) fs._addPreopen('/', '/');
}
