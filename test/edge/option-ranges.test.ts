import fs from 'node:fs';
import path from 'node:path';
import { OPTION_RANGES, type OptionRange, type OptionRangeName } from '@redis-stream-coordinator/core';
import { describe, expect, it } from 'vitest';
import { findRoot } from '../support/repo-root';
import { useRedisServer } from '../support/vitest-redis';
import { EDGE_CASES } from './edge-cases';
import { TIER_FILES } from './edge-tier';
import { optionEnds } from './option-ends';

// SPEC 10.7: every numeric option works at its documented extremes. OPTION_RANGES (packages/core)
// is the one table of them: validation reads it, the edge tier runs every row at its maximum, and
// this file fails when a row has no case, a case is in no run, or a row's ends are not what its
// validation does.
const ROOT = findRoot(__dirname);
const redis = useRedisServer();
const rows = Object.keys(OPTION_RANGES) as OptionRangeName[];

/** Every source file of the packages (spec files aside). */
function sourceFiles(): string[] {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else if (file.endsWith('.ts') && !file.endsWith('.spec.ts')) files.push(file);
    }
  };
  for (const pkg of fs.readdirSync(path.join(ROOT, 'packages'))) walk(path.join(ROOT, 'packages', pkg, 'src'));
  return files;
}

/** The table (its comments quote refusals). */
const TABLE = 'packages/core/src/protocol/option-ranges.ts';

/** Files whose integer checks are not options' validation, and why; the check checkOption calls is one. */
const HAND_CHECKS_ALLOWED: Record<string, string> = {
  'packages/core/src/protocol/names.ts': 'assertIntegerInRange: the check checkOption calls with a row',
  'packages/core/src/producer/key-hash.ts':
    "jumpConsistentHash's bucket count, an argument of a hash function: the producer and the member pass shardCount, checked against its row",
  'packages/core/src/member/handle/batch-runner.ts':
    "a BatchError's failedIndex, a handler's report of where its batch failed, not an option",
  'packages/core/src/protocol/entry-format.ts':
    "deferralOf's attempt count, read from a released deferred entry's field `a` (written by the library), not an option",
};

/**
 * The options a docs options table (`| option | …`) gives that take a number: named as times,
 * counts or sizes, or given a number as their default.
 */
function numericDocOptions(markdown: string): string[] {
  const options: string[] = [];
  let inTable = false;
  for (const line of markdown.split('\n')) {
    if (/^\| option \|/.test(line)) inTable = true;
    else if (!line.startsWith('|')) inTable = false;
    if (!inTable || line.startsWith('| option') || line.startsWith('| ---')) continue;
    const [first, second] = line.split(' | ').map((cell) => cell.replace(/^\| /, ''));
    const numericDefault = /^\d/.test(second ?? '') || /default \d/.test(second ?? '');
    for (const [, name] of first.matchAll(/`([A-Za-z.]+)`/g)) {
      if (/(Ms|Count|Size|Len|Attempts|Concurrency|Entries)$|^(lanes|weight)$/.test(name) || numericDefault) options.push(name);
    }
  }
  return options;
}

describe('OPTION_RANGES and the edge tier', () => {
  it('every row is run at its maximum by some case of the edge tier', () => {
    expect(rows.filter((row) => !EDGE_CASES.some((edge) => edge.covers.includes(row)))).toEqual([]);
  });

  it('every case runs rows of the table only, and is run: its tier file runs its tier, in the run its config makes', () => {
    expect(EDGE_CASES.flatMap((edge) => edge.covers.filter((row) => !(row in OPTION_RANGES)))).toEqual([]);
    const read = (file: string) => fs.readFileSync(path.join(ROOT, file), 'utf8');
    for (const edge of EDGE_CASES) expect(TIER_FILES[edge.tier], edge.title).toBeDefined();
    // npm test: test/**/*.test.ts, the quick tier's file not excluded; npm run test:edge: the slow tier's file.
    expect(TIER_FILES.quick).toMatch(/^test\/.*\.test\.ts$/);
    expect(read('vitest.config.mts')).toContain("'test/**/*.test.ts'");
    expect(read('vitest.config.mts')).not.toContain(path.basename(TIER_FILES.quick));
    expect(read('vitest.edge.mts')).toContain(`include: ['${TIER_FILES.slow}']`);
    expect(JSON.parse(read('package.json')).scripts['test:edge']).toContain('--config vitest.edge.mts');
    for (const [tier, file] of Object.entries(TIER_FILES)) expect(read(file)).toContain(`defineEdgeTier('${tier}')`);
  });

  it('no validation of the packages states a range of its own: each reads its row (checkOption, or the CLI parser)', () => {
    const own: string[] = [];
    const walk = (dir: string): void => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const file = path.join(dir, entry.name);
        if (entry.isDirectory()) walk(file);
        else if (file.endsWith('.ts') && !file.endsWith('.spec.ts') && !file.endsWith('protocol/names.ts')) {
          const text = fs.readFileSync(file, 'utf8');
          for (const call of text.match(/assertIntegerInRange\(|\binteger\(\d/g) ?? []) own.push(`${path.relative(ROOT, file)}: ${call}`);
        }
      }
    };
    for (const pkg of fs.readdirSync(path.join(ROOT, 'packages'))) walk(path.join(ROOT, 'packages', pkg, 'src'));
    expect(own.filter((site) => !site.startsWith('packages/core/src/protocol/option-ranges.ts'))).toEqual([]);
  });

  it('no validation checks a number by hand: no Number.isInteger and no "must be a positive integer" outside the table', () => {
    const own: string[] = [];
    for (const file of sourceFiles()) {
      const relative = path.relative(ROOT, file);
      if (HAND_CHECKS_ALLOWED[relative] !== undefined || relative === TABLE) continue;
      const lines = fs.readFileSync(file, 'utf8').split('\n');
      for (const [i, line] of lines.entries())
        if (/Number\.is(Safe)?Integer\(|must be an? (positive |non-negative )?integer/.test(line))
          own.push(`${relative}:${i + 1}: ${line.trim()}`);
    }
    expect(own).toEqual([]);
    // Each allowance still names a hand check (a stale one would hide the next one in its file).
    for (const [file, why] of Object.entries(HAND_CHECKS_ALLOWED))
      expect(fs.readFileSync(path.join(ROOT, file), 'utf8'), `${file}: ${why}`).toMatch(/Number\.is(Safe)?Integer\(/);
  });

  it('every numeric option of the docs options tables has a row', () => {
    const names = new Set<string>(Object.values(OPTION_RANGES).map((range: OptionRange) => range.option));
    const missing: string[] = [];
    for (const doc of fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md'))) {
      for (const option of numericDocOptions(fs.readFileSync(path.join(ROOT, 'docs', doc), 'utf8')))
        if (!names.has(option)) missing.push(`docs/${doc}: ${option}`);
    }
    expect(missing).toEqual([]);
  });

  describe('each row: its validation takes both ends and refuses one past each, naming the range and the value', () => {
    it.each(rows)('%s', async (row) => {
      const { min, max }: OptionRange = OPTION_RANGES[row];
      const apply = optionEnds(redis.client())[row];
      const refusal = async (value: number) => {
        try {
          await apply(value);
        } catch (error) {
          const message = (error as Error).message;
          return message.includes(`from ${min} to ${max}`) ? message : undefined;
        }
        return undefined;
      };
      expect(await refusal(min), `${row} at ${min}`).toBeUndefined();
      expect(await refusal(max), `${row} at ${max}`).toBeUndefined();
      for (const past of [min - 1, max + 1]) {
        const message = await refusal(past);
        expect(message, `${row} at ${past}`).toBeDefined();
        // The CLI's parser says the range; commander adds the flag and the value.
        if (!row.startsWith('rsc.')) expect(message).toContain(`got ${past}`);
      }
    });
  });
});
