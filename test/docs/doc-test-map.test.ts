import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findRoot } from '../support/repo-root';

// The docs say which tests prove what they promise ("Tests that prove it" at the end of each page
// that describes behaviour) and where things live (docs/map.md). That map is only worth something
// while it is true: this file fails when a page names a file of the tree that is not there (a test
// moved or renamed, a folder regrouped), or a test by a name its file no longer has. No Redis.

const ROOT = findRoot(__dirname);
const DOCS = path.join(ROOT, 'docs');

/** The pages that describe behaviour: each ends with the tests that prove what it says. */
const BEHAVIOUR_PAGES = [
  'protocol.md',
  'runtime.md',
  'resharding.md',
  'nestjs.md',
  'testing.md',
  'operations.md',
  'observability.md',
  'dashboard.md',
  'cluster.md',
  'spec.md',
];
const TESTS_HEADING = 'Tests that prove it';

/** Where a page may name a file of the tree: a path from the root into one of these folders. */
const TREE_PATH =
  /(?<![\w./-])(?:test|packages|apps|bench|scripts)\/[\w.@/-]*[\w-]\.(?:test\.ts|spec\.ts|ts|mts|js|lua|md|json|html)\b|(?<![\w./-])(?:test|packages|apps|bench|scripts)\/[\w.@/-]*[\w-]\//g;
/** A test file named by its base name alone: ambiguous once tests live in area folders. */
const BARE_TEST_FILE = /(?<![\w./-])[\w-]+\.(?:test|spec)\.ts\b/g;

function pages(): { page: string; text: string }[] {
  const found = [path.join(ROOT, 'README.md')];
  for (const entry of fs.readdirSync(DOCS, { withFileTypes: true })) {
    if (entry.isFile() && entry.name.endsWith('.md')) found.push(path.join(DOCS, entry.name));
  }
  return found.sort().map((file) => ({ page: path.relative(ROOT, file), text: fs.readFileSync(file, 'utf8') }));
}

function lineOf(text: string, index: number): number {
  return text.slice(0, index).split('\n').length;
}

/** The tree paths a page names, each with its line. */
function treePaths(text: string): { path: string; line: number }[] {
  return [...text.matchAll(TREE_PATH)].map((m) => ({ path: m[0], line: lineOf(text, m.index) }));
}

/** The body of the page's last `## ` section when it is the tests section, else undefined. */
function testsSection(text: string): string | undefined {
  const sections = text.split(/^## /m);
  const last = sections.at(-1)!;
  return sections.length > 1 && last.startsWith(`${TESTS_HEADING}\n`) ? last : undefined;
}

/**
 * The bullets of a tests section ("- `test/area/file.test.ts`: what it proves; "a test name", …),
 * each with the first file it names and the test names it quotes in double quotes.
 */
function testBullets(section: string): { file: string; names: string[] }[] {
  const bullets = section.split(/^- /m).slice(1);
  return bullets.flatMap((bullet) => {
    const file = bullet.match(/`((?:test|packages)\/[^`]+\.(?:test|spec)\.ts)`/)?.[1];
    if (!file) return [];
    const names = [...bullet.replace(/\s*\n\s*/g, ' ').matchAll(/"([^"]+)"/g)].map((m) => m[1]);
    return [{ file, names }];
  });
}

describe('the map from behaviour to test, and from folder to concept, in docs/', () => {
  it('reads the forms of path and test name the pages use', () => {
    expect(
      treePaths('`test/member/member-lifecycle.test.ts` and packages/core/src/member/handle/ (dispatcher)').map((p) => p.path),
    ).toEqual(['test/member/member-lifecycle.test.ts', 'packages/core/src/member/handle/']);
    expect(treePaths('see docs/runtime.md, not a path: latest/ or contest/x.ts')).toEqual([]);
    expect(testBullets('intro\n- `test/a/b.test.ts`: proves "one name" and\n  "another\n  name".\n- no file here "x"\n')).toEqual([
      { file: 'test/a/b.test.ts', names: ['one name', 'another name'] },
    ]);
  });

  it('names only files and folders that exist', () => {
    const missing = pages().flatMap(({ page, text }) =>
      treePaths(text)
        .filter((p) => !fs.existsSync(path.join(ROOT, p.path)))
        .map((p) => `${page}:${p.line}  ${p.path} does not exist`),
    );
    expect(missing).toEqual([]);
  });

  it('names each test file by its path from the root, not by its base name', () => {
    const bare = pages().flatMap(({ page, text }) =>
      [...text.matchAll(BARE_TEST_FILE)].map((m) => `${page}:${lineOf(text, m.index)}  ${m[0]}: write test/<area>/${m[0]}`),
    );
    expect(bare).toEqual([]);
  });

  it(`ends every page that describes behaviour with "${TESTS_HEADING}", naming test files`, () => {
    const without = BEHAVIOUR_PAGES.filter((page) => {
      const section = testsSection(fs.readFileSync(path.join(DOCS, page), 'utf8'));
      return section === undefined || testBullets(section).length === 0;
    });
    expect(without, `pages whose last section is not "${TESTS_HEADING}" with a bullet per test file`).toEqual([]);
  });

  it('quotes each test by a name its file still has', () => {
    const stale: string[] = [];
    for (const page of BEHAVIOUR_PAGES) {
      const section = testsSection(fs.readFileSync(path.join(DOCS, page), 'utf8')) ?? '';
      for (const { file, names } of testBullets(section)) {
        const source = path.join(ROOT, file);
        if (!fs.existsSync(source)) continue; // reported by 'names only files and folders that exist'
        const text = fs.readFileSync(source, 'utf8');
        for (const name of names) if (!text.includes(name)) stale.push(`docs/${page}: ${file} has no test named "${name}"`);
      }
    }
    expect(stale).toEqual([]);
  });
});
