#!/usr/bin/env node
// Compares the outputs of two runs of a pipeline (say, its Rust and its JavaScript operator):
//
//   node guest-sdk/js/compare-outputs.mjs <expected> <actual> [<expected> <actual>...]
//
// where each pair is two JSON Lines files, or two directories (their *.jsonl files by name).
//
// Every JSON line is compared without its `id`, `operator` and `operator_version` fields, which
// name the operator; the rest (key, window, value with its field order and int/float kinds,
// kind, reasons) must be equal. Lines are compared as multisets, since shards interleave.
// Exits 1 on a difference.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const IGNORED = new Set(['id', 'operator', 'operator_version']);

/** JSON tokens: strings, numbers, and the rest (punctuation and literals) one by one. */
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[^\s"\d-]+|\s+/g;

/**
 * Parses a JSON line keeping each number's kind and text: `164` becomes {"$int":"164"} and
 * `164.0` becomes {"$float":"164.0"}, so an int and a float never compare equal.
 */
function parseExact(line) {
  const marked = line.replace(TOKENS, (token) => {
    if (!/^-?\d/.test(token)) return token;
    const kind = /[.eE]/.test(token) ? '$float' : '$int';
    return `{"${kind}":"${token}"}`;
  });
  return JSON.parse(marked);
}

/** The lines of a JSON Lines file, each without the fields that name the operator, sorted. */
function normalizedLines(path) {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const record = parseExact(line);
      for (const name of IGNORED) delete record[name];
      return JSON.stringify(record);
    })
    .sort();
}

/** Compares one pair of files; returns the number of differences. */
function compare(expectedPath, actualPath) {
  const expected = normalizedLines(expectedPath);
  const actual = normalizedLines(actualPath);
  const missing = difference(expected, actual);
  const extra = difference(actual, expected);
  for (const line of missing.slice(0, 5)) console.log(`  only in ${expectedPath}: ${line}`);
  for (const line of extra.slice(0, 5)) console.log(`  only in ${actualPath}: ${line}`);
  const verdict = missing.length + extra.length === 0 ? 'identical' : 'DIFFERENT';
  console.log(`${verdict}: ${expectedPath} (${expected.length} lines) vs ${actualPath} (${actual.length} lines)`);
  return missing.length + extra.length;
}

/** The lines of `a` not matched by a line of `b` (multiset difference). */
function difference(a, b) {
  const counts = new Map();
  for (const line of b) counts.set(line, (counts.get(line) ?? 0) + 1);
  return a.filter((line) => {
    const count = counts.get(line) ?? 0;
    counts.set(line, count - 1);
    return count <= 0;
  });
}

/** The JSON Lines files of two directories, paired by name. */
function directoryPairs(expected, actual) {
  const names = new Set(
    [...readdirSync(expected), ...readdirSync(actual)].filter((name) => name.endsWith('.jsonl')),
  );
  return [...names].sort().map((name) => [join(expected, name), join(actual, name)]);
}

/** The pairs of files to compare: the arguments, taken two by two, directories expanded. */
function pairs(args) {
  if (args.length === 0 || args.length % 2 !== 0) {
    console.error('usage: node compare-outputs.mjs <expected> <actual> [<expected> <actual>...]');
    process.exit(2);
  }
  return args.flatMap((path, i) => {
    if (i % 2 !== 0) return [];
    return statSync(path).isDirectory() ? directoryPairs(path, args[i + 1]) : [[path, args[i + 1]]];
  });
}

let differences = 0;
for (const [expected, actual] of pairs(process.argv.slice(2))) differences += compare(expected, actual);
process.exit(differences === 0 ? 0 : 1);
